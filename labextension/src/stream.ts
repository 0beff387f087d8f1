/**
 * One WebSocket per page for every live monitor's and job panel's updates
 * (kf_jupyter/server/socket.py). Browsers open at most 6 HTTP/1.1
 * connections per host: a log stream held per monitor took them all once six
 * monitors were live, and saving and the file browser waited (issue 20).
 *
 * Subscriptions survive a dropped socket: the hub reconnects with back-off
 * and subscribes again (a log subscription then replays its tail, so the view
 * is told to start over with `onStart`). The socket closes when nothing is
 * subscribed. The WebSocket class and URL are injectable for tests.
 */
import { Backoff } from './backoff';
import { IJob, IJobEvent } from './jobs';
import { ILogRecord } from './logparse';

/** An error the server sent for a subscription (`status`: the REST route's HTTP status). */
export class StreamError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly kind: string = ''
  ) {
    super(message);
    this.name = 'StreamError';
  }
}

export interface IStreamTarget {
  backend: string;
  namespace?: string | null;
}

export interface ILogHandlers {
  /** The subscription (re)started: the records that follow replay the tail. */
  onStart(): void;
  onRecords(records: ILogRecord[]): void;
  /** The job ended and its whole log was sent. */
  onEnd(status: string | null): void;
  /** An error; `retryMs` when the hub subscribes again after that delay, null when it gave up. */
  onError(error: StreamError, retryMs: number | null): void;
}

export interface IJobHandlers {
  onJob(job: IJob): void;
  onEvents?(events: IJobEvent[]): void;
  /** An error; the server keeps polling, except after 404 (`final`). */
  onError(error: StreamError, final: boolean): void;
}

export interface ISubscription {
  close(): void;
}

export interface IJobSubscription extends ISubscription {
  /** Ask the server to read the job now (after Suspend or Resume). */
  refresh(): void;
}

/** The part of the WebSocket API the hub uses. */
export interface ISocket {
  readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onclose: ((ev: unknown) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  send(data: string): void;
  close(): void;
}

export type SocketFactory = () => ISocket;

const OPEN = 1;
/** How long the socket stays open with nothing subscribed (a monitor re-rendering re-subscribes). */
const IDLE_CLOSE_MS = 5000;

interface ISub {
  message: Record<string, unknown>;
  kind: 'logs' | 'job';
  logs?: ILogHandlers;
  job?: IJobHandlers;
  backoff: Backoff;
  retry: ReturnType<typeof setTimeout> | null;
  done: boolean;
}

export class StreamHub {
  constructor(private readonly _factory: SocketFactory) {}

  /** How many subscriptions are live (tests). */
  get size(): number {
    return this._subs.size;
  }

  /** Whether the socket is open or opening (tests). */
  get connected(): boolean {
    return this._socket !== null;
  }

  /** Follow a job's log: the last `tail` lines, then new ones, until the job ends. */
  watchLogs(target: IStreamTarget, name: string, tail: number, handlers: ILogHandlers): ISubscription {
    const id = this._nextId();
    const sub: ISub = {
      message: { op: 'logs', id, job: name, tail, ...targetFields(target) },
      kind: 'logs',
      logs: handlers,
      backoff: new Backoff({ interval: 0, base: 1000, factor: 2, max: 30000, jitter: 0.1 }),
      retry: null,
      done: false
    };
    return this._add(id, sub);
  }

  /** The job's record (and events), whenever it changes, polled every `intervalMs` until it ends. */
  watchJob(
    target: IStreamTarget,
    name: string,
    options: { intervalMs?: number; events?: boolean },
    handlers: IJobHandlers
  ): IJobSubscription {
    const id = this._nextId();
    const sub: ISub = {
      message: {
        op: 'job',
        id,
        job: name,
        interval: options.intervalMs ?? 1000,
        events: !!options.events,
        ...targetFields(target)
      },
      kind: 'job',
      job: handlers,
      backoff: new Backoff({ interval: 0, base: 1000, factor: 2, max: 30000, jitter: 0.1 }),
      retry: null,
      done: false
    };
    const handle = this._add(id, sub);
    return {
      close: () => handle.close(),
      refresh: () => {
        if (this._subs.get(id) === sub) {
          this._send({ op: 'refresh', id });
        }
      }
    };
  }

  private _add(id: string, sub: ISub): ISubscription {
    this._subs.set(id, sub);
    if (this._idle) {
      clearTimeout(this._idle);
      this._idle = null;
    }
    this._ensureSocket();
    this._start(id, sub);
    return {
      close: () => {
        if (this._subs.get(id) !== sub) {
          return;
        }
        this._subs.delete(id);
        if (sub.retry) {
          clearTimeout(sub.retry);
        }
        if (!sub.done) {
          this._send({ op: 'close', id });
        }
        this._maybeIdle();
      }
    };
  }

  private _start(id: string, sub: ISub): void {
    sub.done = false;
    sub.retry = null;
    if (this._socket?.readyState === OPEN) {
      sub.logs?.onStart();
      this._send(sub.message);
    }
  }

  private _ensureSocket(): void {
    if (this._socket || this._reconnect) {
      return;
    }
    let socket: ISocket;
    try {
      socket = this._factory();
    } catch (e) {
      this._scheduleReconnect(`cannot open the update connection (${(e as Error).message ?? e})`);
      return;
    }
    this._socket = socket;
    socket.onopen = () => {
      this._connBackoff.success();
      for (const [id, sub] of this._subs) {
        if (!sub.done && !sub.retry) {
          this._start(id, sub);
        }
      }
    };
    socket.onmessage = ev => this._onMessage(ev.data);
    socket.onerror = () => undefined; // onclose follows
    socket.onclose = () => {
      if (this._socket !== socket) {
        return;
      }
      this._socket = null;
      if ([...this._subs.values()].some(s => !s.done)) {
        this._scheduleReconnect('the update connection to the Jupyter server dropped');
      }
    };
  }

  private _scheduleReconnect(why: string): void {
    const delay = this._connBackoff.failure();
    for (const sub of this._subs.values()) {
      if (sub.done) {
        continue;
      }
      const err = new StreamError(`${why}; reconnecting in ${Math.round(delay / 1000)} s`, 0, 'NetworkError');
      if (sub.logs) {
        sub.logs.onError(err, delay);
      } else {
        sub.job?.onError(err, false);
      }
    }
    this._reconnect = setTimeout(() => {
      this._reconnect = null;
      if (this._subs.size) {
        this._ensureSocket();
      }
    }, delay);
  }

  private _maybeIdle(): void {
    if ([...this._subs.values()].some(s => !s.done) || this._idle) {
      return;
    }
    this._idle = setTimeout(() => {
      this._idle = null;
      if (![...this._subs.values()].some(s => !s.done) && this._socket) {
        const socket = this._socket;
        this._socket = null;
        socket.close();
      }
    }, IDLE_CLOSE_MS);
  }

  private _onMessage(data: unknown): void {
    let msg: Record<string, unknown>;
    try {
      msg = JSON.parse(String(data)) as Record<string, unknown>;
    } catch {
      return;
    }
    const id = typeof msg.id === 'string' ? msg.id : '';
    const sub = this._subs.get(id);
    if (!sub || sub.done) {
      return;
    }
    switch (msg.type) {
      case 'records':
        sub.backoff.success();
        sub.logs?.onRecords((msg.records as ILogRecord[]) ?? []);
        break;
      case 'end':
        sub.done = true;
        sub.logs?.onEnd((msg.status as string | null) ?? null);
        this._maybeIdle();
        break;
      case 'job':
        sub.job?.onJob(msg.job as IJob);
        break;
      case 'events':
        sub.job?.onEvents?.((msg.events as IJobEvent[]) ?? []);
        break;
      case 'error':
        this._onError(id, sub, msg);
        break;
    }
  }

  private _onError(id: string, sub: ISub, msg: Record<string, unknown>): void {
    const status = typeof msg.status === 'number' ? msg.status : 500;
    const err = new StreamError(String(msg.error ?? 'error'), status, String(msg.kind ?? ''));
    if (sub.kind === 'job') {
      const final = status === 404;
      sub.done = final;
      sub.job?.onError(err, final);
      if (final) {
        this._maybeIdle();
      }
      return;
    }
    // a log subscription ends with its error; it is tried again unless the job is gone
    sub.done = true;
    if (status === 404 || status === 400) {
      sub.logs?.onError(err, null);
      this._maybeIdle();
      return;
    }
    const delay = sub.backoff.failure();
    sub.logs?.onError(err, delay);
    sub.retry = setTimeout(() => {
      if (this._subs.get(id) === sub) {
        this._ensureSocket();
        this._start(id, sub);
      }
    }, delay);
  }

  private _send(message: Record<string, unknown>): void {
    if (this._socket?.readyState === OPEN) {
      this._socket.send(JSON.stringify(message));
    }
  }

  private _nextId(): string {
    this._counter += 1;
    return `s${this._counter}`;
  }

  private _socket: ISocket | null = null;
  private _subs = new Map<string, ISub>();
  private _counter = 0;
  private _idle: ReturnType<typeof setTimeout> | null = null;
  private _reconnect: ReturnType<typeof setTimeout> | null = null;
  private _connBackoff = new Backoff({ interval: 0, base: 1000, factor: 2, max: 30000, jitter: 0.1 });
}

function targetFields(t: IStreamTarget): Record<string, string> {
  return t.backend === 'kubernetes' && t.namespace ? { backend: t.backend, namespace: t.namespace } : { backend: t.backend };
}
