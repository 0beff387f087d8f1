/**
 * A small poller: runs an async task, then waits (interval when healthy,
 * exponential back-off after failures) and runs it again. It pauses while
 * the panel is hidden and refreshes at once when shown again.
 *
 * The timer functions are injectable so the logic is tested with fake timers.
 */
import { Backoff, DEFAULT_BACKOFF, IBackoffOptions } from './backoff';

export type PollerState = 'stopped' | 'running' | 'paused' | 'disposed';

export interface IScheduler {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const defaultScheduler: IScheduler = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: handle => clearTimeout(handle as ReturnType<typeof setTimeout>)
};

export interface IPollerOptions {
  backoff?: IBackoffOptions;
  scheduler?: IScheduler;
  random?: () => number;
  /** Called after each run with the error (or null) and the next delay. */
  onTick?: (error: unknown, nextDelay: number) => void;
}

export class Poller {
  private _state: PollerState = 'stopped';
  private _timer: unknown = null;
  private _inFlight: Promise<void> | null = null;
  private _again = false;
  private _backoff: Backoff;
  private _scheduler: IScheduler;
  private _onTick?: (error: unknown, nextDelay: number) => void;
  private _nextDelay = 0;

  constructor(
    private readonly _task: () => Promise<void>,
    options: IPollerOptions = {}
  ) {
    this._backoff = new Backoff(options.backoff ?? DEFAULT_BACKOFF, options.random);
    this._scheduler = options.scheduler ?? defaultScheduler;
    this._onTick = options.onTick;
  }

  get state(): PollerState {
    return this._state;
  }

  /** Consecutive failures so far. */
  get failures(): number {
    return this._backoff.failures;
  }

  /** The delay chosen after the last run, ms. */
  get nextDelay(): number {
    return this._nextDelay;
  }

  /** Whether a timer is pending. */
  get scheduled(): boolean {
    return this._timer !== null;
  }

  /** Start polling: run now, then on schedule. */
  start(): Promise<void> {
    if (this._state === 'disposed') {
      return Promise.resolve();
    }
    this._state = 'running';
    return this.refresh();
  }

  /** Stop scheduling (the panel is hidden). A run in flight completes. */
  pause(): void {
    if (this._state !== 'running') {
      return;
    }
    this._state = 'paused';
    this._clearTimer();
  }

  /** Resume after pause: refresh at once. */
  resume(): Promise<void> {
    if (this._state !== 'paused' && this._state !== 'stopped') {
      return this._inFlight ?? Promise.resolve();
    }
    this._state = 'running';
    return this.refresh();
  }

  /** Stop for good. */
  dispose(): void {
    this._state = 'disposed';
    this._clearTimer();
  }

  /**
   * Run the task now (coalesced with a run in flight), then schedule the
   * next run if the poller is running. Works while paused (manual refresh)
   * but does not schedule then.
   */
  refresh(): Promise<void> {
    if (this._state === 'disposed') {
      return Promise.resolve();
    }
    if (this._inFlight) {
      this._again = true;
      return this._inFlight;
    }
    this._clearTimer();
    const run = (async () => {
      let error: unknown = null;
      try {
        await this._task();
        this._nextDelay = this._backoff.success();
      } catch (e) {
        error = e;
        this._nextDelay = this._backoff.failure();
      }
      this._inFlight = null;
      if (this._onTick) {
        this._onTick(error, this._nextDelay);
      }
      if (this._again) {
        this._again = false;
        await this.refresh();
        return;
      }
      this._schedule();
    })();
    this._inFlight = run;
    return run;
  }

  private _schedule(): void {
    this._clearTimer();
    if (this._state !== 'running') {
      return;
    }
    this._timer = this._scheduler.setTimeout(() => {
      this._timer = null;
      void this.refresh();
    }, this._nextDelay);
  }

  private _clearTimer(): void {
    if (this._timer !== null) {
      this._scheduler.clearTimeout(this._timer);
      this._timer = null;
    }
  }
}
