/**
 * The sidebar's runtimes list as the server's /runtimes payload renders it. Jest runs in node
 * (no jsdom here), so a minimal element stand-in provides `document.createElement`.
 */

class FakeElement {
  tagName: string;
  className = '';
  children: FakeElement[] = [];
  private _attrs = new Map<string, string>();
  private _nodes: (FakeElement | string)[] = [];

  constructor(tag: string) {
    this.tagName = tag.toUpperCase();
  }
  setAttribute(k: string, v: string): void {
    this._attrs.set(k, String(v));
  }
  getAttribute(k: string): string | null {
    return this._attrs.has(k) ? this._attrs.get(k)! : null;
  }
  hasAttribute(k: string): boolean {
    return this._attrs.has(k);
  }
  get title(): string {
    return this.getAttribute('title') ?? '';
  }
  append(...nodes: (FakeElement | string)[]): void {
    for (const n of nodes) {
      this._nodes.push(n);
      if (typeof n !== 'string') {
        this.children.push(n);
      }
    }
  }
  get textContent(): string {
    return this._nodes.map(n => (typeof n === 'string' ? n : n.textContent)).join('');
  }
  /** Every descendant with this class (depth first). */
  byClass(cls: string): FakeElement[] {
    const out: FakeElement[] = [];
    for (const c of this.children) {
      if (c.className.split(' ').includes(cls)) {
        out.push(c);
      }
      out.push(...c.byClass(cls));
    }
    return out;
  }
}

(globalThis as any).document = { createElement: (tag: string) => new FakeElement(tag) };

import { IRuntime } from '../jobs';
import { runtimeGroups, runtimeItem } from '../runtimelist';

const REASON =
  "Runtime 'torchtune-llama3.2-1b' is a torchtune fine-tuning runtime: on a cluster it downloads a " +
  'pre-trained model and a dataset with its initializers ... Run it on a cluster ' +
  "(--backend kubernetes / KubernetesBackendConfig), or train your own function locally on 'torch-distributed'.";

/** As GET kf-jupyter/api/runtimes?backend=local returns them. */
const payload: IRuntime[] = [
  { name: 'torch-distributed', framework: 'torch', num_nodes: 1, image: null, deprecated: false, runs_here: true, unsupported_reason: null },
  { name: 'torchtune-llama3.2-1b', framework: 'torchtune', num_nodes: 1, image: null, deprecated: false, runs_here: false, unsupported_reason: REASON },
  { name: 'jax-distributed', framework: 'jax', num_nodes: 1, image: null } // an older server: no field
];

const asFake = (e: unknown) => e as FakeElement;

describe('runtimes list', () => {
  it('tags a runtime this backend cannot run "cluster only", with the reason as tooltip', () => {
    const li = asFake(runtimeItem(payload[1]));
    const tags = li.byClass('kf-runtime-tag');
    expect(tags).toHaveLength(1);
    expect(tags[0].textContent).toBe('cluster only');
    expect(tags[0].title).toBe(REASON);
    expect(tags[0].getAttribute('aria-label')).toBe(`cluster only: ${REASON}`);
    expect(li.className.split(' ')).toEqual(expect.arrayContaining(['kf-runtime', 'kf-runtime-elsewhere']));
    expect(li.byClass('kf-runtime-name')[0].textContent).toBe('torchtune-llama3.2-1b');
  });

  it('leaves runnable runtimes (and servers without the field) untagged', () => {
    for (const r of [payload[0], payload[2]]) {
      const li = asFake(runtimeItem(r));
      expect(li.byClass('kf-runtime-tag')).toHaveLength(0);
      expect(li.className).toBe('kf-runtime');
      expect(li.textContent).not.toContain('cluster only');
    }
  });

  it('falls back to a generic reason when the server gives none', () => {
    const li = asFake(runtimeItem({ name: 'x', runs_here: false, unsupported_reason: null }));
    expect(li.byClass('kf-runtime-tag')[0].title).toMatch(/cannot run this runtime; run it on a cluster/);
  });

  it('renders the whole payload: one group per framework, the tag only on torchtune', () => {
    const groups = runtimeGroups(payload).map(asFake);
    expect(groups.map(g => g.children[0].textContent)).toEqual(['jax (1)', 'torch (1)', 'torchtune (1)']);
    const tagged = groups.filter(g => g.byClass('kf-runtime-tag').length > 0);
    expect(tagged.map(g => g.children[0].textContent)).toEqual(['torchtune (1)']);
  });

  it('tags a runtime a plugin brings with the plugin name, under its own framework', () => {
    const ring: IRuntime = { name: 'ring-distributed', framework: 'ring', num_nodes: 1, image: null, runs_here: true, plugin: 'ring' };
    const li = asFake(runtimeItem(ring));
    const tags = li.byClass('kf-runtime-plugin');
    expect(tags).toHaveLength(1);
    expect(tags[0].textContent).toBe('plugin ring');
    expect(tags[0].title).toMatch(/kf-jupyter plugin ring/);
    expect(li.className).toBe('kf-runtime');
    const groups = runtimeGroups([...payload, ring]).map(asFake);
    expect(groups.map(g => g.children[0].textContent)).toContain('ring (1)');
    expect(asFake(runtimeItem(payload[0])).byClass('kf-runtime-plugin')).toHaveLength(0);
  });

  it('says so when there are no runtimes', () => {
    const [only] = runtimeGroups([]).map(asFake);
    expect(only.className).toBe('kf-empty');
    expect(only.textContent).toBe('No runtimes found.');
  });
});
