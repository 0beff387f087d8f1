/**
 * One colour per log source, shared with the Python side
 * (kf_jupyter/widgets/state.py: PALETTE, source_colour_index; a Python test
 * keeps both lists and rules equal), so a rank has the same colour in the
 * notebook monitor, its static output and the lab job panel.
 *
 * No JupyterLab imports: unit-tested under plain Node.
 */

export const PALETTE: readonly string[] = [
  '#1f77b4',
  '#d62728',
  '#2ca02c',
  '#9467bd',
  '#ff7f0e',
  '#17becf',
  '#8c564b',
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

/** The colour of a source's `[rank-N]` prefix. */
export function sourceColour(source: string): string {
  return PALETTE[sourceColourIndex(source)];
}
