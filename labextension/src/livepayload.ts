/**
 * The `application/vnd.kf-jupyter.job+json` payload a training cell displays
 * (kf_jupyter/widgets/static.py: job_payload) and what the live monitor makes
 * of the server's answers. No JupyterLab imports: unit-tested under Node.
 */
import { displayStatus, IJob, isFinished } from './jobs';

export const JOB_MIME_TYPE = 'application/vnd.kf-jupyter.job+json';
export const PAYLOAD_VERSION = 1;

export interface IJobPayload {
  name: string;
  backend: string;
  namespace: string | null;
  runtime: string;
}

/** Read the payload; null (with the reason) when it is not one this version understands. */
export function parsePayload(data: unknown): { payload: IJobPayload | null; error: string } {
  if (!data || typeof data !== 'object') {
    return { payload: null, error: 'the output holds no job description' };
  }
  const d = data as Record<string, unknown>;
  if (d.version !== PAYLOAD_VERSION) {
    return { payload: null, error: `unknown monitor version ${String(d.version)} (expected ${PAYLOAD_VERSION})` };
  }
  const name = typeof d.name === 'string' ? d.name : '';
  if (!/^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/.test(name)) {
    return { payload: null, error: 'the output names no valid job' };
  }
  const backend = d.backend === 'kubernetes' ? 'kubernetes' : 'local';
  const namespace = backend === 'kubernetes' && typeof d.namespace === 'string' && d.namespace ? d.namespace : null;
  return {
    payload: { name, backend, namespace, runtime: typeof d.runtime === 'string' ? d.runtime : '' },
    error: ''
  };
}

/** The badge text of a job, from the backend's record ("Cancelled" only if it recorded one). */
export function statusLabel(job: Pick<IJob, 'status' | 'reason'>): string {
  return displayStatus(job);
}

/** CSS key of a badge label. */
export function labelKey(label: string): string {
  const known = ['Created', 'Running', 'Suspended', 'Complete', 'Failed', 'Cancelled', 'Deleted'];
  return known.includes(label) ? label.toLowerCase() : 'unknown';
}

/** Whether Cancel may be offered for a job in this state. */
export function canCancel(job: Pick<IJob, 'status'> | null): boolean {
  return !!job && !isFinished(job.status) && job.status !== 'Deleted';
}

/** The cause of a failure as the monitor shows it first (h12-fail's `failure`, else the message). */
export function failureText(job: IJob & { failure?: unknown }): string {
  if (job.status !== 'Failed' || job.reason === 'Cancelled') {
    return '';
  }
  const f = job.failure as { source?: string; exc_type?: string; message?: string; traceback?: string[] } | null;
  if (f && typeof f === 'object' && f.exc_type) {
    const head = `${f.source ?? ''} failed: ${f.exc_type}${f.message ? `: ${f.message}` : ''}`.trim();
    const tb = Array.isArray(f.traceback) ? f.traceback.join('\n') : '';
    return tb ? `${head}\n${tb}` : head;
  }
  return [job.reason, job.message].filter(Boolean).join(': ');
}

/** kf-jupyter's own protocol lines (reports, results): they drive the monitor, never shown. */
export function isProtocolLine(line: string): boolean {
  return line.startsWith('##kf-jupyter:');
}
