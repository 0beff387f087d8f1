/**
 * One colour per log source, shared with the Python side
 * (kf_jupyter/widgets/state.py: PALETTE, source_colour_index; a Python test
 * keeps both lists and rules equal), so a rank has the same colour in the
 * notebook monitor, its static output and the lab job panel.
 *
 * No JupyterLab imports: unit-tested under plain Node.
 */

export const PALETTE: readonly string[] = [
  '#1d6ea7',
  '#c92526',
  '#217821',
  '#824eb2',
  '#a74e00',
  '#0e727c',
  '#8c564b',
  '#b9268c'
];

/** The same slots under a dark theme (style/base.css `.kf-src-N`; each >= 4.5:1 on #111 and #212121). */
export const PALETTE_DARK: readonly string[] = [
  '#3d9cde',
  '#e67374',
  '#2fac2f',
  '#ab87cb',
  '#ff7f0e',
  '#17becf',
  '#bc8b81',
  '#e377c2'
];

/** The palette slot of a source: its trailing number, else the sum of its char codes. */
export function sourceColourIndex(source: string): number {
  const m = /(\d+)$/.exec(source);
  let n = 0;
  if (m) {
    n = parseInt(m[1], 10);
  } else {
    for (const ch of source) {
      n += ch.codePointAt(0) ?? 0;
    }
  }
  return n % PALETTE.length;
}

/** The class that colours a source's `[rank-N]` prefix in the current theme. */
export function sourceClass(source: string): string {
  return `kf-src-${sourceColourIndex(source)}`;
}

/** The colour of a source's `[rank-N]` prefix (light theme). */
export function sourceColour(source: string): string {
  return PALETTE[sourceColourIndex(source)];
}
