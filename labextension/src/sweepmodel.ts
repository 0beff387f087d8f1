/**
 * The sweep view's model, without DOM: its MIME payload (written by
 * kf_jupyter/widgets/sweep.py), a trial's objective from its curve, and the
 * best trial. No JupyterLab imports: unit-tested under plain Node.
 */
import { MetricSeries } from './metrics';

export const SWEEP_MIME_TYPE = 'application/vnd.kf-jupyter.sweep+json';
export const SWEEP_PAYLOAD_VERSION = 1;

export interface ITrialPayload {
  name: string;
  job: string;
  parameters: Record<string, string>;
  /** The trial's status and objective as the optimizer recorded them (when the kernel knew). */
  status?: string | null;
  objective?: number | null;
}

export interface ISweepPayload {
  version: number;
  name: string;
  backend: string;
  namespace: string | null;
  status: string;
  objective: { metric: string; direction: 'minimize' | 'maximize' };
  trials: ITrialPayload[];
}

/** Validate the payload; never throws. */
export function parseSweepPayload(data: unknown): { payload: ISweepPayload | null; error: string } {
  if (!data || typeof data !== 'object') {
    return { payload: null, error: 'no payload' };
  }
  const p = data as Partial<ISweepPayload>;
  if (p.version !== SWEEP_PAYLOAD_VERSION) {
    return { payload: null, error: `unknown payload version ${String(p.version)}` };
  }
  if (typeof p.name !== 'string' || typeof p.backend !== 'string' || !Array.isArray(p.trials)) {
    return { payload: null, error: 'malformed payload' };
  }
  const obj = p.objective;
  if (!obj || typeof obj.metric !== 'string' || (obj.direction !== 'minimize' && obj.direction !== 'maximize')) {
    return { payload: null, error: 'malformed objective' };
  }
  const trials = p.trials.filter(
    (t): t is ITrialPayload => !!t && typeof t.name === 'string' && typeof t.job === 'string'
  );
  return {
    payload: {
      version: p.version,
      name: p.name,
      backend: p.backend,
      namespace: typeof p.namespace === 'string' ? p.namespace : null,
      status: typeof p.status === 'string' ? p.status : '',
      objective: { metric: obj.metric, direction: obj.direction },
      trials
    },
    error: ''
  };
}

export interface ITrialState {
  name: string;
  status: string;
  objective: number | null;
}

/**
 * A trial's objective from its curve, as Katib's default metric strategy
 * reads it (and the kernel's view): the lowest value when minimizing, the
 * highest when maximizing.
 */
export function curveObjective(series: MetricSeries, metric: string, direction: string): number | null {
  const values = series.points(metric).map(p => p.value).filter(v => Number.isFinite(v));
  if (values.length === 0) {
    return null;
  }
  return direction === 'minimize' ? Math.min(...values) : Math.max(...values);
}

/** The best trial: completed, with a finite objective; ties go to the earlier trial. */
export function bestTrial(trials: ITrialState[], direction: string): string | null {
  let best: ITrialState | null = null;
  for (const t of trials) {
    if (t.status !== 'Complete' || t.objective === null || !Number.isFinite(t.objective)) {
      continue;
    }
    if (!best || (direction === 'minimize' ? t.objective < best.objective! : t.objective > best.objective!)) {
      best = t;
    }
  }
  return best ? best.name : null;
}
