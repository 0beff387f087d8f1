/**
 * REST client of the kf-jupyter server extension. Every request goes through
 * ServerConnection.makeRequest so the token and the XSRF header are sent.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  IBackendsReply,
  IJob,
  IJobEvent,
  IRuntime,
  queryString
} from './jobs';
import { ILogRecord, parseLogEventData, SseParser } from './logparse';
import { ISocket, StreamHub } from './stream';

export const API_ROOT = 'kf-jupyter/api';

/** An error reply of the server extension: {"error": "...", "kind": "..."}. */
export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly kind: string = ''
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

/** Where the jobs live: a backend and, for kubernetes, a namespace. */
export interface ITarget {
  backend: string;
  namespace?: string | null;
}

function targetParams(t: ITarget): Record<string, string | null | undefined> {
  return { backend: t.backend, namespace: t.backend === 'kubernetes' ? t.namespace : null };
}

export function apiUrl(settings: ServerConnection.ISettings, path: string, query = ''): string {
  return URLExt.join(settings.baseUrl, API_ROOT, path) + query;
}

async function errorOf(response: Response): Promise<ApiError> {
  let text = '';
  try {
    text = await response.text();
  } catch {
    // ignore
  }
  try {
    const body = JSON.parse(text) as { error?: string; kind?: string; message?: string };
    const msg = body.error ?? body.message;
    if (msg) {
      return new ApiError(msg, response.status, body.kind ?? '');
    }
  } catch {
    // not JSON
  }
  return new ApiError(
    `${response.status} ${response.statusText || 'error'}${text ? `: ${text.slice(0, 300)}` : ''}`,
    response.status
  );
}

async function request(
  path: string,
  query: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<Response> {
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(apiUrl(settings, path, query), init, settings);
  } catch (e) {
    throw new ApiError(`Cannot reach the Jupyter server: ${(e as Error).message ?? e}`, 0, 'NetworkError');
  }
  if (!response.ok) {
    throw await errorOf(response);
  }
  return response;
}

async function getJSON<T>(path: string, query = '', settings?: ServerConnection.ISettings): Promise<T> {
  const response = await request(path, query, {}, settings);
  return (await response.json()) as T;
}

export function listBackends(): Promise<IBackendsReply> {
  return getJSON<IBackendsReply>('backends');
}

export async function listRuntimes(t: ITarget, framework?: string): Promise<IRuntime[]> {
  const r = await getJSON<{ runtimes: IRuntime[] }>('runtimes', queryString({ ...targetParams(t), framework }));
  return r.runtimes ?? [];
}

export async function listJobs(t: ITarget): Promise<IJob[]> {
  const r = await getJSON<{ jobs: IJob[] }>('jobs', queryString(targetParams(t)));
  return r.jobs ?? [];
}

export function getJob(t: ITarget, name: string): Promise<IJob> {
  return getJSON<IJob>(`jobs/${encodeURIComponent(name)}`, queryString(targetParams(t)));
}

export async function deleteJob(t: ITarget, name: string): Promise<void> {
  await request(`jobs/${encodeURIComponent(name)}`, queryString(targetParams(t)), { method: 'DELETE' });
}

/** Suspend (stop its pods or processes, keep the job) or resume a job. */
export async function setSuspended(t: ITarget, name: string, suspend: boolean): Promise<void> {
  const action = suspend ? 'suspend' : 'resume';
  await request(`jobs/${encodeURIComponent(name)}/${action}`, queryString(targetParams(t)), {
    method: 'POST'
  });
}

/** What a Cancel did: `cancelled` false when the job had already ended (the server's 409). */
export interface ICancelResult {
  cancelled: boolean;
  /** The backend's record afterwards ({status: "Deleted"} when the backend deleted it). */
  job: IJob;
  message: string;
}

/**
 * Cancel a job if it still runs (POST jobs/{name}/cancel, with the XSRF
 * header). An ended job is left alone and comes back with `cancelled: false`.
 */
export async function cancelJob(t: ITarget, name: string): Promise<ICancelResult> {
  const settings = ServerConnection.makeSettings();
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(
      apiUrl(settings, `jobs/${encodeURIComponent(name)}/cancel`, queryString(targetParams(t))),
      { method: 'POST', body: '' },
      settings
    );
  } catch (e) {
    throw new ApiError(`Cannot reach the Jupyter server: ${(e as Error).message ?? e}`, 0, 'NetworkError');
  }
  if (response.status === 409) {
    const body = (await response.json()) as { error?: string; job?: IJob };
    if (body.job) {
      return { cancelled: false, job: body.job, message: body.error ?? '' };
    }
  }
  if (!response.ok) {
    throw await errorOf(response);
  }
  return { cancelled: true, job: (await response.json()) as IJob, message: '' };
}

export async function getJobEvents(t: ITarget, name: string): Promise<IJobEvent[]> {
  const r = await getJSON<{ events: IJobEvent[] }>(
    `jobs/${encodeURIComponent(name)}/events`,
    queryString(targetParams(t))
  );
  return r.events ?? [];
}

/**
 * URL of the full, non-streamed log (text/plain), for an "open full log" link.
 * It carries no token: the route is authenticated by the login cookie the
 * server set when the page was opened, so the token never lands in the
 * browser's history, a copied link or a Referer header (issue 20).
 */
export function fullLogUrl(t: ITarget, name: string): string {
  const settings = ServerConnection.makeSettings();
  return apiUrl(settings, `jobs/${encodeURIComponent(name)}/logs`, queryString(targetParams(t)));
}

let sharedHub: StreamHub | null = null;

/**
 * The page's one update connection (kf-jupyter/api/stream, a WebSocket):
 * every live monitor and job panel subscribes through it instead of holding
 * an HTTP/1.1 stream each. Authenticated as JupyterLab's kernel sockets are.
 */
export function streamHub(): StreamHub {
  if (!sharedHub) {
    sharedHub = new StreamHub(() => {
      const settings = ServerConnection.makeSettings();
      let url = URLExt.join(settings.wsUrl, API_ROOT, 'stream');
      if (settings.appendToken && settings.token) {
        url += `?token=${encodeURIComponent(settings.token)}`;
      }
      return new settings.WebSocket(url) as unknown as ISocket;
    });
  }
  return sharedHub;
}

export interface ILogStreamHandlers {
  onRecord(record: ILogRecord): void;
  /** The server sent `end` (the job ended) or closed the stream. */
  onEnd(reason: 'end' | 'closed'): void;
}

/**
 * Stream the logs of a job (SSE over fetch, parsed incrementally). Resolves
 * when the stream ends; rejects with ApiError on an HTTP error. Abort with
 * `signal`.
 */
export async function streamLogs(
  t: ITarget,
  name: string,
  handlers: ILogStreamHandlers,
  signal: AbortSignal,
  tail = 1000
): Promise<void> {
  const response = await request(
    `jobs/${encodeURIComponent(name)}/logs`,
    queryString({ ...targetParams(t), follow: true, tail }),
    { signal, headers: { Accept: 'text/event-stream' }, cache: 'no-store' }
  );
  const body = response.body;
  if (!body) {
    // No streaming support: fall back to the whole text.
    const text = await response.text();
    const parser = new SseParser();
    dispatch(parser.push(text).concat(parser.finish()), handlers);
    handlers.onEnd('closed');
    return;
  }
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        break;
      }
      if (dispatch(parser.push(decoder.decode(value, { stream: true })), handlers)) {
        await reader.cancel().catch(() => undefined);
        return;
      }
    }
    if (!dispatch(parser.push(decoder.decode()).concat(parser.finish()), handlers)) {
      handlers.onEnd('closed');
    }
  } finally {
    reader.releaseLock();
  }
}

/** Deliver parsed events; true when the `end` event was seen. */
function dispatch(events: ReturnType<SseParser['push']>, handlers: ILogStreamHandlers): boolean {
  for (const ev of events) {
    if (ev.event === 'end') {
      handlers.onEnd('end');
      return true;
    }
    if (ev.event === 'message') {
      const rec = parseLogEventData(ev.data);
      if (rec) {
        handlers.onRecord(rec);
      }
    }
  }
  return false;
}
