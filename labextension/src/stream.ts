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
 *
 * However many views a page has (a sweep of hundreds of trials, issue 38), the
 * hub keeps the server's work small: views that follow the same job's record
 * share one `job` subscription, and at most `maxLogs` log subscriptions are
 * sent at a time, the others waiting here, in order, until one of them ends
 * or is closed (a finished job's log ends once replayed).
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
/** Log subscriptions the hub has open on the server at once (the rest wait, in order). */
export const MAX_LOGS = 16;
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

interface IJobShare {
  id: string;
  handle: ISubscription;
  handlers: Set<IJobHandlers>;
  job: IJob | null;
  events: IJobEvent[] | null;
  gone: boolean;
}

export class StreamHub {
  constructor(
    private readonly _factory: SocketFactory,
    readonly maxLogs: number = MAX_LOGS
  ) {}

  /** How many subscriptions are live (tests). */
  get size(): number {
    return this._subs.size;
  }

  /** How many log subscriptions are open on the server now (tests). */
  get logsOpen(): number {
    return this._logsOpen.size;
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
    const key = JSON.stringify([targetFields(target), name, options.intervalMs ?? 1000, !!options.events]);
    let share = this._jobShares.get(key);
    if (!share || share.gone) {
      share = this._shareJob(key, target, name, options);
    } else {
      const known = share;
      // what the others were sent already, at once (after the caller has its handle)
      void Promise.resolve().then(() => {
        if (known.handlers.has(handlers)) {
          if (known.job) {
            handlers.onJob(known.job);
          }
          if (known.events) {
            handlers.onEvents?.(known.events);
          }
        }
      });
    }
    const joined = share;
    joined.handlers.add(handlers);
    return {
      close: () => {
        if (joined.handlers.delete(handlers) && joined.handlers.size === 0) {
          if (this._jobShares.get(key) === joined) {
            this._jobShares.delete(key);
          }
          joined.handle.close();
        }
      },
      refresh: () => {
        if (this._subs.has(joined.id)) {
          this._send({ op: 'refresh', id: joined.id });
        }
      }
    };
  }

  /** One server subscription for every view that follows this job's record this way. */
  private _shareJob(
    key: string,
    target: IStreamTarget,
    name: string,
    options: { intervalMs?: number; events?: boolean }
  ): IJobShare {
    const share: IJobShare = {
      id: '',
      handle: { close: () => undefined },
      handlers: new Set(),
      job: null,
      events: null,
      gone: false
    };
    const fanOut: IJobHandlers = {
      onJob: job => {
        share.job = job;
        for (const h of [...share.handlers]) {
          h.onJob(job);
        }
      },
      onEvents: events => {
        share.events = events;
        for (const h of [...share.handlers]) {
          h.onEvents?.(events);
        }
      },
      onError: (err, final) => {
        share.gone = share.gone || final;
        for (const h of [...share.handlers]) {
          h.onError(err, final);
        }
      }
    };
    this._jobShares.set(key, share);
    const id = this._nextId();
    share.id = id;
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
      job: fanOut,
      backoff: new Backoff({ interval: 0, base: 1000, factor: 2, max: 30000, jitter: 0.1 }),
      retry: null,
      done: false
    };
    share.handle = this._add(id, sub);
    return share;
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
        if (!sub.done && (sub.kind === 'job' || this._logsOpen.has(id))) {
          this._send({ op: 'close', id });
        }
        this._logEnded(id);
        this._maybeIdle();
      }
    };
  }

  private _start(id: string, sub: ISub): void {
    sub.done = false;
    sub.retry = null;
    if (this._socket?.readyState !== OPEN) {
      return;
    }
    if (sub.kind === 'logs') {
      if (this._logsOpen.size >= this.maxLogs) {
        this._logsWaiting.add(id); // sent once one of the open ones ends
        return;
      }
      this._logsWaiting.delete(id);
      this._logsOpen.add(id);
    }
    sub.logs?.onStart();
    this._send(sub.message);
  }

  /** A log subscription is no longer open on the server: the next waiting one is sent. */
  private _logEnded(id: string): void {
    this._logsWaiting.delete(id);
    if (!this._logsOpen.delete(id)) {
      return;
    }
    for (const next of this._logsWaiting) {
      if (this._logsOpen.size >= this.maxLogs) {
        break;
      }
      const sub = this._subs.get(next);
      this._logsWaiting.delete(next);
      if (sub && !sub.done && !sub.retry) {
        this._start(next, sub);
      }
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
      this._logsOpen.clear(); // a new connection: nothing of this page is open on it yet
      this._logsWaiting.clear();
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
        this._logEnded(id);
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
    this._logEnded(id);
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
  private _jobShares = new Map<string, IJobShare>();
  private _logsOpen = new Set<string>();
  private _logsWaiting = new Set<string>();
  private _counter = 0;
  private _idle: ReturnType<typeof setTimeout> | null = null;
  private _reconnect: ReturnType<typeof setTimeout> | null = null;
  private _connBackoff = new Backoff({ interval: 0, base: 1000, factor: 2, max: 30000, jitter: 0.1 });
}

function targetFields(t: IStreamTarget): Record<string, string> {
  return t.backend === 'kubernetes' && t.namespace ? { backend: t.backend, namespace: t.namespace } : { backend: t.backend };
}
