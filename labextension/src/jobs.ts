/**
 * Types of the REST contract and pure helpers over jobs and runtimes:
 * filtering, sorting, grouping, age formatting.
 */

import type { ITrainerStatus } from './progress';

export type JobStatus = 'Created' | 'Running' | 'Suspended' | 'Complete' | 'Failed';
export const JOB_STATUSES: JobStatus[] = ['Created', 'Running', 'Suspended', 'Complete', 'Failed'];

export interface IStep {
  name: string;
  status: string;
  rank?: number | null;
}

export interface IJob {
  name: string;
  status: JobStatus | string;
  reason?: string | null;
  message?: string | null;
  framework?: string | null;
  runtime?: string | null;
  backend?: string | null;
  num_nodes?: number | null;
  num_proc_per_node?: number | string | null;
  creation_time?: string | null;
  completion_time?: string | null;
  steps?: IStep[];
  /** The training's own progress report (status.trainerStatus), if any. */
  trainer_status?: ITrainerStatus | null;
  failure?: IFailure | null;
  /** What a Created or Running job does before its first line, from its events (TrainJob.phase). */
  phase?: string | null;
}

/** The root cause of a failed job, as the server sends it (`TrainJob.failure`). */
export interface IFailure {
  source: string;
  exc_type: string;
  message?: string | null;
  traceback?: string[] | null;
}

/** `Rank 1 failed: NameError: ...` and the user's traceback; undefined when not known. */
export function failureText(job: IJob): string | undefined {
  const f = job.failure;
  if (!f || job.status !== 'Failed') {
    return undefined;
  }
  const what = f.message ? `${f.exc_type}: ${f.message}` : f.exc_type;
  const tb = (f.traceback ?? []).slice(-40);
  return [`${f.source} failed: ${what}`, ...tb].join('\n');
}

export interface IRuntime {
  name: string;
  kind?: string | null;
  framework?: string | null;
  ml_policy?: string | null;
  image?: string | null;
  num_nodes?: number | null;
  deprecated?: boolean;
  /** False when this backend cannot run the runtime (e.g. torchtune on local). */
  runs_here?: boolean;
  /** Why this backend cannot run it (the error `train` would give), else null. */
  unsupported_reason?: string | null;
  /** The kf-jupyter plugin that brings this runtime (entry points kf_jupyter.plugins), else null. */
  plugin?: string | null;
}

export interface IBackendInfo {
  name: string;
  available: boolean;
  namespace?: string | null;
  error?: string | null;
}

export interface IBackendsReply {
  backends: IBackendInfo[];
  default: string;
}

export interface IJobEvent {
  time?: string | null;
  type?: string | null;
  reason?: string | null;
  message?: string | null;
}

/**
 * What a job does before its first line, for the monitor and the job panel; null when there is
 * nothing to show (no job, or it is not Created or Running). The backend's phase (from the
 * ranks' own events: starting, importing the framework, waiting at rendezvous) when it gives
 * one; otherwise only what its record and latest event say, never a guess.
 */
export function startupText(job: IJob | null | undefined, events: IJobEvent[]): string | null {
  if (!job || (job.status !== 'Created' && job.status !== 'Running')) {
    return null;
  }
  const phase = (job.phase ?? '').trim();
  if (phase) {
    return `${phase}. No output yet.`;
  }
  const last = events.filter(e => e.reason && e.reason !== 'Exited').slice(-1)[0];
  const state = job.status === 'Created' ? 'Waiting to start' : 'Running';
  const what = last ? ` · ${last.reason}: ${last.message ?? ''}` : '';
  return `${state}${what}. No output yet.`;
}

/** Whether a job has finished (no more logs or status changes expected). */
export function isFinished(status: string): boolean {
  return status === 'Complete' || status === 'Failed';
}

/**
 * The state a person reads, the same in every view: `Cancelled` for a job the
 * user stopped (the backend records Failed with reason Cancelled), never a red
 * Failed; otherwise the backend's status.
 */
export function displayStatus(job: Pick<IJob, 'status' | 'reason'>): string {
  if (job.status === 'Failed' && job.reason === 'Cancelled') {
    return 'Cancelled';
  }
  return job.status || 'Unknown';
}

/** A CSS-safe status key for the badge ("unknown" for anything else). */
export function statusKey(status: string): string {
  const known = [...(JOB_STATUSES as string[]), 'Cancelled', 'Deleted'];
  return known.includes(status) ? status.toLowerCase() : 'unknown';
}

/**
 * Keep the jobs matching every whitespace-separated term of `query`
 * (case-insensitive, against name, status, framework, runtime, backend).
 * A term `status:running` (or `framework:torch`) matches that field only.
 */
export function filterJobs(jobs: IJob[], query: string): IJob[] {
  const terms = query.toLowerCase().split(/\s+/).filter(t => t.length > 0);
  if (terms.length === 0) {
    return jobs.slice();
  }
  const fields = (job: IJob): Record<string, string> => ({
    name: job.name ?? '',
    status: job.status ?? '',
    framework: job.framework ?? '',
    runtime: job.runtime ?? '',
    backend: job.backend ?? ''
  });
  return jobs.filter(job => {
    const f = fields(job);
    return terms.every(term => {
      const colon = term.indexOf(':');
      if (colon > 0) {
        const key = term.slice(0, colon);
        const value = term.slice(colon + 1);
        if (key in f) {
          return f[key].toLowerCase().includes(value);
        }
      }
      return Object.values(f).some(v => v.toLowerCase().includes(term));
    });
  });
}

function timeOf(iso: string | null | undefined): number {
  if (!iso) {
    return Number.NEGATIVE_INFINITY;
  }
  const t = Date.parse(iso);
  return Number.isNaN(t) ? Number.NEGATIVE_INFINITY : t;
}

/** Newest first (by creation_time; jobs without one last), then by name. */
export function sortJobs(jobs: IJob[]): IJob[] {
  return jobs.slice().sort((a, b) => {
    const ta = timeOf(a.creation_time);
    const tb = timeOf(b.creation_time);
    if (ta !== tb) {
      return tb > ta ? 1 : -1;
    }
    return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
  });
}

/**
 * Compact age like kubectl: "45s", "12m", "3h", "2d", from an ISO 8601
 * time to `now` (ms since epoch). "-" when unknown; "0s" for future times.
 */
export function formatAge(iso: string | null | undefined, now: number): string {
  if (!iso) {
    return '-';
  }
  const t = Date.parse(iso);
  if (Number.isNaN(t)) {
    return '-';
  }
  const s = Math.max(0, Math.floor((now - t) / 1000));
  if (s < 60) {
    return `${s}s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m}m`;
  }
  const h = Math.floor(m / 60);
  if (h < 48) {
    return `${h}h`;
  }
  return `${Math.floor(h / 24)}d`;
}

/** Human duration between two ISO times ("1m 5s"), or "" when unknown. */
export function formatDuration(start?: string | null, end?: string | null): string {
  if (!start || !end) {
    return '';
  }
  const a = Date.parse(start);
  const b = Date.parse(end);
  if (Number.isNaN(a) || Number.isNaN(b) || b < a) {
    return '';
  }
  let s = Math.round((b - a) / 1000);
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (h) {
    return `${h}h ${m}m`;
  }
  if (m) {
    return `${m}m ${s}s`;
  }
  return `${s}s`;
}

/** Nodes column: "2" or "2×4" when processes per node are known. */
export function formatNodes(job: IJob): string {
  const n = job.num_nodes ?? null;
  const p = job.num_proc_per_node ?? null;
  if (n === null) {
    return '-';
  }
  const nodes = `${n} node${n === 1 ? '' : 's'}`;
  const procs = typeof p === 'number' ? p : typeof p === 'string' && /^\d+$/.test(p) ? Number(p) : null;
  if (procs === null) {
    return nodes;
  }
  return `${nodes} \u00d7 ${procs} process${procs === 1 ? '' : 'es'}`;
}

/** A time as a person reads it ("Dec 1, 23:14:05", local time); '-' when unknown. */
export function formatTime(iso: string | null | undefined): string {
  if (!iso) {
    return '-';
  }
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) {
    return '-';
  }
  return t.toLocaleString(undefined, {
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hour12: false
  });
}

export interface IRuntimeGroup {
  framework: string;
  runtimes: IRuntime[];
}

/** Group runtimes by framework (alphabetical; "other" last), names sorted. */
export function groupRuntimes(runtimes: IRuntime[]): IRuntimeGroup[] {
  const groups = new Map<string, IRuntime[]>();
  for (const r of runtimes) {
    const fw = r.framework || 'other';
    if (!groups.has(fw)) {
      groups.set(fw, []);
    }
    groups.get(fw)!.push(r);
  }
  return Array.from(groups.keys())
    .sort((a, b) => (a === 'other' ? 1 : b === 'other' ? -1 : a < b ? -1 : a > b ? 1 : 0))
    .map(framework => ({
      framework,
      runtimes: groups.get(framework)!.slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    }));
}

/** Query string for the REST routes, skipping empty values. */
export function queryString(params: Record<string, string | number | boolean | null | undefined>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === null || v === undefined || v === '' || v === false) {
      continue;
    }
    parts.push(`${encodeURIComponent(k)}=${encodeURIComponent(v === true ? '1' : String(v))}`);
  }
  return parts.length ? `?${parts.join('&')}` : '';
}
