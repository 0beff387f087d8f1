/**
 * Several jobs' metric curves overlaid: one chart per metric, one line per
 * job, each in its run's palette colour (the `kf-run-N` class: the light
 * palette, or the dark one under a dark theme). Used by the sweep view and
 * the compare panel. Plain SVG, no chart library.
 */
import { h, s } from './dom';
import { formatMetric, IPoint, MetricSeries, scalePaths } from './metrics';
import { PALETTE } from './palette';

const W = 480;
const H = 200;
const PAD_L = 8;
const PAD = 8;

export interface IOverlayRun {
  /** The job's name (data-run on its line). */
  key: string;
  /** What the legend and the chart's description call it. */
  label: string;
  /** Its slot in the palette (its position in the view). */
  colour: number;
  series: MetricSeries;
  /** Drawn thicker, on top (the best trial). */
  highlight?: boolean;
}

/** Every metric any run reported, sorted. */
export function overlayMetrics(runs: IOverlayRun[]): string[] {
  const names = new Set<string>();
  for (const r of runs) {
    for (const n of r.series.names()) {
      names.add(n);
    }
  }
  return Array.from(names).sort();
}

export interface IOverlayGeometry {
  xMin: number;
  xMax: number;
  yMin: number;
  yMax: number;
  /** SVG path `d` per run key ('' when it has no point). */
  paths: Map<string, string>;
}

/** One scale for every run's points of a metric, and each run's path on it. */
export function overlayGeometry(
  lines: { key: string; points: IPoint[] }[],
  width = W,
  height = H,
  pad = PAD
): IOverlayGeometry {
  const scaled = scalePaths(
    lines.map(l => l.points),
    width,
    height,
    pad
  );
  const paths = new Map<string, string>();
  if (lines.some(l => l.points.length > 0)) {
    lines.forEach((l, i) => paths.set(l.key, scaled.paths[i]));
  }
  return { xMin: scaled.xMin, xMax: scaled.xMax, yMin: scaled.yMin, yMax: scaled.yMax, paths };
}

/** The overlay charts of a set of runs (re-rendered whole on each update; a few kB of SVG). */
export class OverlayCharts {
  readonly node: HTMLDivElement;

  constructor(empty = 'No metrics reported yet.') {
    this.node = h('div', { className: 'kf-overlay', role: 'group', 'aria-label': 'Metric curves' });
    this._empty = h('div', { className: 'kf-empty' }, empty);
    this._grid = h('div', { className: 'kf-chart-grid' });
    this.node.append(this._empty, this._grid);
  }

  render(runs: IOverlayRun[]): void {
    const metrics = overlayMetrics(runs);
    this._empty.hidden = metrics.length > 0;
    this._grid.textContent = '';
    for (const metric of metrics) {
      const lines = runs
        .map(r => ({ run: r, key: r.key, points: r.series.points(metric) }))
        .filter(l => l.points.length > 0);
      const g = overlayGeometry(lines);
      const desc = lines.map(l => `${l.run.label} ${formatMetric(l.points[l.points.length - 1].value)}`).join(', ');
      const svg = s('svg', {
        viewBox: `0 0 ${W} ${H}`,
        preserveAspectRatio: 'none',
        class: 'kf-chart-svg kf-overlay-svg',
        role: 'img',
        'aria-label': `${metric}, last values: ${desc}`
      });
      svg.append(
        s('rect', { x: 0, y: 0, width: W, height: H, class: 'kf-chart-bg' }),
        s('line', { x1: PAD_L, y1: H - PAD, x2: W - PAD, y2: H - PAD, class: 'kf-chart-axis' }),
        s('line', { x1: PAD_L, y1: PAD, x2: PAD_L, y2: H - PAD, class: 'kf-chart-axis' })
      );
      // the highlighted run last: drawn on top
      const ordered = lines.slice().sort((a, b) => Number(!!a.run.highlight) - Number(!!b.run.highlight));
      for (const l of ordered) {
        const cls = `kf-overlay-line kf-run-${l.run.colour % PALETTE.length}${l.run.highlight ? ' kf-overlay-best' : ''}`;
        const d = g.paths.get(l.key) ?? '';
        if (l.points.length === 1) {
          const m = /^M([\d.-]+),([\d.-]+)/.exec(d);
          if (m) {
            svg.append(s('circle', { cx: m[1], cy: m[2], r: 3, class: `${cls} kf-overlay-dot`, 'data-run': l.key }));
          }
          continue;
        }
        svg.append(s('path', { d, class: cls, 'data-run': l.key, 'vector-effect': 'non-scaling-stroke' }));
      }
      this._grid.append(
        h(
          'figure',
          { className: 'kf-chart kf-overlay-chart', 'data-metric': metric },
          h('figcaption', {}, h('span', { className: 'kf-chart-name' }, metric)),
          h(
            'div',
            { className: 'kf-chart-body' },
            h('div', { className: 'kf-chart-y' }, h('span', {}, formatMetric(g.yMax)), h('span', {}, formatMetric(g.yMin))),
            svg
          ),
          h(
            'div',
            { className: 'kf-chart-x' },
            h('span', {}, `step ${formatMetric(g.xMin)}`),
            h('span', {}, `step ${formatMetric(g.xMax)}`)
          )
        )
      );
    }
  }

  private _empty: HTMLDivElement;
  private _grid: HTMLDivElement;
}

/** The small coloured line tying a legend row to its curve. */
export function swatch(colour: number): HTMLSpanElement {
  return h('span', { className: `kf-swatch kf-run-${colour % PALETTE.length}`, 'aria-hidden': 'true' });
}

/**
 * Katib's default metrics collector reads `name=value` lines on stdout (what
 * the SDK's optimizer examples print). Every `[name, value]` match of its
 * filter `([\w|-]+)\s*=\s*([+-]?\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?)`, in order,
 * in linear time: the filter itself, run with `exec`, retries every position
 * of a long run of name characters not followed by `=` to the run's end
 * (quadratic: 32,000 `-` took seconds on the page's main thread). A match can
 * only start where such a run starts, so each run is tried once, at its start.
 */
export function katibPairs(line: string): [string, string][] {
  const run = /[\w|-]+/g;
  const after = /\s*=\s*([+-]?\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?)/y;
  const out: [string, string][] = [];
  for (let m = run.exec(line); m; m = run.exec(line)) {
    after.lastIndex = run.lastIndex;
    const v = after.exec(line);
    if (v) {
      out.push([m[0], v[1]]);
      run.lastIndex = after.lastIndex;
    }
  }
  return out;
}

/** The last value of `metric` in one stdout line (`katibPairs`), or null. */
export function stdoutMetric(line: string, metric: string): number | null {
  let found: number | null = null;
  for (const [name, text] of katibPairs(line)) {
    if (name === metric && text !== '' && text !== '+' && text !== '-') {
      const v = Number(text);
      if (Number.isFinite(v)) {
        found = v;
      }
    }
  }
  return found;
}
