/**
 * Training progress as the Kubeflow Trainer has it (`status.trainerStatus`,
 * KEP-2779), as the server extension sends it in a job's `trainer_status`:
 * short texts for the sidebar and the job panel, and the points it adds to
 * the metrics chart.
 */
import { IReport, MetricSeries } from './metrics';

export interface ITrainerStatus {
  progress_percentage?: number | null;
  estimated_remaining_seconds?: number | null;
  /** Metric name to value, as the trainer sent it (strings). */
  metrics?: Record<string, string> | null;
  last_updated_time?: string | null;
}

/** "42s", "3m 05s", "2h 10m"; "" when unknown. */
export function formatEta(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds) || seconds < 0) {
    return '';
  }
  const s = Math.floor(seconds);
  const pad = (n: number): string => String(n).padStart(2, '0');
  if (s < 60) {
    return `${s}s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  }
  return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
}

/**
 * "45% · ETA 3m 05s": the one way every view writes a job's progress (as
 * kf_jupyter/progress.py progress_label). The ETA shows only while the job
 * runs and has work left: never on a suspended or ended job, never
 * "100% · ETA 0s". "" for none.
 */
export function progressLabel(
  percent: number | null | undefined,
  etaSeconds: number | null | undefined,
  status?: string | null
): string {
  const parts: string[] = [];
  const pct = typeof percent === 'number' && Number.isFinite(percent) ? Math.round(percent) : null;
  if (pct !== null) {
    parts.push(`${pct}%`);
  }
  const running = status === undefined || status === null || status === 'Running';
  if (running && (pct === null || pct < 100) && etaSeconds) {
    const eta = formatEta(etaSeconds);
    if (eta) {
      parts.push(`ETA ${eta}`);
    }
  }
  return parts.join(' \u00b7 ');
}

/** A job's recorded progress (`trainer_status`), as progressLabel writes it. */
export function progressText(ts: ITrainerStatus | null | undefined, status?: string | null): string {
  if (!ts) {
    return '';
  }
  return progressLabel(ts.progress_percentage, ts.estimated_remaining_seconds, status);
}

/** The metrics whose value is a finite number. */
export function numericMetrics(ts: ITrainerStatus | null | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [name, raw] of Object.entries(ts?.metrics ?? {})) {
    const v = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : NaN;
    if (Number.isFinite(v)) {
      out[name] = v;
    }
  }
  return out;
}

const STEP_KEYS = ['current_step', 'step'];
const NOT_CURVES = ['total_steps'];

/**
 * Feeds a job's successive trainer statuses into its MetricSeries: one point
 * per new status (anything in it differs: `last_updated_time` keeps whole
 * seconds, so a job's last report, sent at its exit, often shares the time of
 * the one before), at the reported step (else the sample number),
 * for the metrics the log's report lines do not already carry (those are not
 * throttled, so they win); progress likewise only when no report line gave it.
 */
export class TrainerStatusFeed {
  constructor(readonly series: MetricSeries) {}

  /** Take one status; true when the series changed. */
  add(ts: ITrainerStatus | null | undefined): boolean {
    if (!ts || !ts.last_updated_time) {
      return false;
    }
    const key = JSON.stringify(ts);
    if (key === this._last) {
      return false;
    }
    this._last = key;
    this._samples += 1;
    const metrics = numericMetrics(ts);
    let step = this._samples;
    for (const key of STEP_KEYS) {
      if (key in metrics) {
        step = metrics[key];
        break;
      }
    }
    const fromLog = new Set(this.series.names().filter(n => !this._ours.has(n)));
    const report: IReport = { step, metrics: {} };
    for (const [name, value] of Object.entries(metrics)) {
      if (!STEP_KEYS.includes(name) && !NOT_CURVES.includes(name) && !fromLog.has(name)) {
        report.metrics[name] = value;
        this._ours.add(name);
      }
    }
    const pct = ts.progress_percentage;
    if (typeof pct === 'number' && (this.series.progress === null || this._ownsProgress)) {
      report.progress = Math.min(1, Math.max(0, pct / 100));
      this._ownsProgress = true;
    }
    if (!Object.keys(report.metrics).length && report.progress === undefined) {
      return false;
    }
    this.series.add(report);
    return true;
  }

  clear(): void {
    this._last = null;
    this._samples = 0;
    this._ours.clear();
    this._ownsProgress = false;
  }

  private _last: string | null = null;
  private _samples = 0;
  private _ours = new Set<string>();
  private _ownsProgress = false;
}
