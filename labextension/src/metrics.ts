/**
 * Metrics reported by `kf_jupyter.report()`: lines
 * `##kf-jupyter:report {"step": 3, "progress": 0.3, "metrics": {"loss": 0.1}}`
 * parsed into series, and the pure geometry of the SVG chart.
 */

export const REPORT_PREFIX = '##kf-jupyter:report ';
export const RESULT_PREFIX = '##kf-jupyter:result ';

export interface IReport {
  step: number;
  progress?: number;
  metrics: Record<string, number>;
}

// A JSON string, or one of the non-finite tokens Python's json.dumps writes (not JSON).
const NON_FINITE = /"(?:[^"\\]|\\.)*"|-?Infinity|NaN/g;

/**
 * Python writes `NaN`, `Infinity` and `-Infinity` for non-finite floats, which
 * `JSON.parse` rejects; outside strings they become `null` (then dropped), so
 * one NaN metric does not hide the other values of its report.
 */
export function nonFiniteToNull(text: string): string {
  return text.replace(NON_FINITE, m => (m.startsWith('"') ? m : 'null'));
}

/**
 * Parse a report line (leading whitespace allowed); null if it is not one.
 * Never throws: malformed JSON is null; values that are not finite numbers
 * (NaN, ±Infinity, a 400-digit integer, text) are dropped.
 */
export function parseReport(line: string): IReport | null {
  const text = line.trimStart();
  if (!text.startsWith(REPORT_PREFIX.trimEnd())) {
    return null;
  }
  let value: unknown;
  try {
    value = JSON.parse(nonFiniteToNull(text.slice(REPORT_PREFIX.length - 1)));
  } catch {
    return null;
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) {
    return null;
  }
  const obj = value as { step?: unknown; progress?: unknown; metrics?: unknown };
  if (typeof obj.step !== 'number' || !Number.isFinite(obj.step)) {
    return null;
  }
  const report: IReport = { step: obj.step, metrics: {} };
  if (typeof obj.progress === 'number' && Number.isFinite(obj.progress)) {
    report.progress = Math.min(1, Math.max(0, obj.progress));
  }
  if (obj.metrics && typeof obj.metrics === 'object' && !Array.isArray(obj.metrics)) {
    for (const [k, v] of Object.entries(obj.metrics as Record<string, unknown>)) {
      if (typeof v === 'number' && Number.isFinite(v)) {
        report.metrics[k] = v;
      }
    }
  }
  return report;
}

export interface IPoint {
  step: number;
  value: number;
}

/**
 * Series of metric values by name. Reports from several ranks for the same
 * step overwrite each other (last wins), so one curve per metric.
 * Each series is bounded: past `maxPoints` every other point is dropped.
 */
export class MetricSeries {
  private _series = new Map<string, Map<number, number>>();
  private _progress: number | null = null;
  private _lastStep: number | null = null;

  constructor(readonly maxPoints = 2000) {}

  add(report: IReport): void {
    if (report.progress !== undefined) {
      this._progress = report.progress;
    }
    if (this._lastStep === null || report.step > this._lastStep) {
      this._lastStep = report.step;
    }
    for (const [name, value] of Object.entries(report.metrics)) {
      let s = this._series.get(name);
      if (!s) {
        s = new Map();
        this._series.set(name, s);
      }
      s.set(report.step, value);
      if (s.size > this.maxPoints) {
        const kept = new Map<number, number>();
        const steps = Array.from(s.keys()).sort((a, b) => a - b);
        steps.forEach((st, i) => {
          if (i % 2 === 0 || i === steps.length - 1) {
            kept.set(st, s!.get(st)!);
          }
        });
        this._series.set(name, kept);
      }
    }
  }

  /** Latest progress in 0..1, or null if none was reported. */
  get progress(): number | null {
    return this._progress;
  }

  get lastStep(): number | null {
    return this._lastStep;
  }

  names(): string[] {
    return Array.from(this._series.keys()).sort();
  }

  /** Points of one metric, by step. */
  points(name: string): IPoint[] {
    const s = this._series.get(name);
    if (!s) {
      return [];
    }
    return Array.from(s.entries())
      .map(([step, value]) => ({ step, value }))
      .sort((a, b) => a.step - b.step);
  }

  /** Latest value of one metric. */
  last(name: string): number | undefined {
    const pts = this.points(name);
    return pts.length ? pts[pts.length - 1].value : undefined;
  }

  get size(): number {
    return this._series.size;
  }

  clear(): void {
    this._series.clear();
    this._progress = null;
    this._lastStep = null;
  }
}

export interface IChartGeometry {
  /** SVG path `d` attribute, "" with no points. */
  path: string;
  xMin: number;
  xMax: number;
  yMin: number;
  yMax: number;
}

/** The common scale of several lines of points and each line's SVG path on it. */
export interface IScaledPaths {
  /** SVG path `d` per line, in the order given ("" for a line with no point). */
  paths: string[];
  xMin: number;
  xMax: number;
  yMin: number;
  yMax: number;
}

/**
 * Map every line's points into one width × height box (inner, after `pad` on each side),
 * y growing upwards, on one scale. Degenerate ranges are widened so nothing divides by 0;
 * with no point at all the range is 0..1.
 */
export function scalePaths(lines: IPoint[][], width: number, height: number, pad = 4): IScaledPaths {
  let xMin = Infinity;
  let xMax = -Infinity;
  let yMin = Infinity;
  let yMax = -Infinity;
  for (const points of lines) {
    for (const p of points) {
      xMin = Math.min(xMin, p.step);
      xMax = Math.max(xMax, p.step);
      yMin = Math.min(yMin, p.value);
      yMax = Math.max(yMax, p.value);
    }
  }
  if (xMin === Infinity) {
    return { paths: lines.map(() => ''), xMin: 0, xMax: 1, yMin: 0, yMax: 1 };
  }
  if (xMax === xMin) {
    xMin -= 1;
    xMax += 1;
  }
  if (yMax === yMin) {
    const d = Math.abs(yMin) > 0 ? Math.abs(yMin) * 0.1 : 1;
    yMin -= d;
    yMax += d;
  }
  const w = Math.max(1, width - 2 * pad);
  const h = Math.max(1, height - 2 * pad);
  // halves: the span of two finite numbers near ±1.8e308 would overflow to Infinity
  const sx = (x: number): number => pad + ((x / 2 - xMin / 2) / (xMax / 2 - xMin / 2)) * w;
  const sy = (y: number): number => pad + h - ((y / 2 - yMin / 2) / (yMax / 2 - yMin / 2)) * h;
  const fmt = (v: number): string => (Math.round(v * 100) / 100).toString();
  const paths = lines.map(points =>
    points.map((p, i) => `${i === 0 ? 'M' : 'L'}${fmt(sx(p.step))},${fmt(sy(p.value))}`).join(' ')
  );
  return { paths, xMin, xMax, yMin, yMax };
}

/**
 * Map points into a width × height box (inner, after `pad` on each side),
 * y growing upwards. Degenerate ranges are widened so nothing divides by 0.
 */
export function chartGeometry(points: IPoint[], width: number, height: number, pad = 4): IChartGeometry {
  const { paths, ...range } = scalePaths([points], width, height, pad);
  return { path: paths[0], ...range };
}

/** Short number for axis labels and legends: 3 significant digits. */
export function formatMetric(v: number): string {
  if (!Number.isFinite(v)) {
    return String(v);
  }
  if (v !== 0 && (Math.abs(v) >= 1e5 || Math.abs(v) < 1e-3)) {
    return v.toExponential(2);
  }
  return Number(v.toPrecision(3)).toString();
}
