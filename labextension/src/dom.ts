/** Tiny DOM helpers (no framework). */

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | boolean | undefined> = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) {
      continue;
    }
    if (k === 'className') {
      el.className = v as string;
    } else {
      el.setAttribute(k, v === true ? '' : v);
    }
  }
  for (const c of children) {
    if (c !== null && c !== undefined) {
      el.append(c);
    }
  }
  return el;
}

export const SVG_NS = 'http://www.w3.org/2000/svg';

export function s<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number> = {}
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    el.setAttribute(k, String(v));
  }
  return el;
}

/** A status badge: <span class="kf-badge kf-badge-running">Running</span>. */
export function statusBadge(status: string, key: string): HTMLSpanElement {
  return h('span', { className: `kf-badge kf-badge-${key}`, title: `Status: ${status}` }, status || 'Unknown');
}

export function setBadge(el: HTMLElement, status: string, key: string): void {
  if (el.textContent !== status) {
    el.textContent = status || 'Unknown';
    el.className = `kf-badge kf-badge-${key}`;
    el.title = `Status: ${status}`;
  }
}
