/**
 * Exponential back-off schedule for polling: the normal interval while
 * requests succeed, then base * factor^(n-1) after n consecutive failures,
 * capped at `max`, with optional jitter.
 */
export interface IBackoffOptions {
  /** Interval while healthy, ms. */
  interval: number;
  /** First delay after a failure, ms. */
  base: number;
  /** Growth factor per consecutive failure (>= 1). */
  factor: number;
  /** Upper bound of any delay, ms. */
  max: number;
  /** Fraction of random spread, 0..1 (0 = deterministic). */
  jitter: number;
}

export const DEFAULT_BACKOFF: IBackoffOptions = {
  interval: 3000,
  base: 2000,
  factor: 2,
  max: 60000,
  jitter: 0
};

/** Delay before the next attempt after `failures` consecutive failures. */
export function backoffDelay(
  failures: number,
  options: IBackoffOptions = DEFAULT_BACKOFF,
  random: () => number = Math.random
): number {
  if (failures <= 0) {
    return options.interval;
  }
  const factor = Math.max(1, options.factor);
  const raw = options.base * Math.pow(factor, failures - 1);
  let delay = Math.min(options.max, raw);
  if (options.jitter > 0) {
    // Spread symmetrically in [delay*(1-j), delay*(1+j)], never above max.
    const spread = delay * options.jitter * (2 * random() - 1);
    delay = Math.min(options.max, Math.max(0, delay + spread));
  }
  return Math.round(delay);
}

/** Stateful wrapper: call `success()` / `failure()`, read `delay`. */
export class Backoff {
  private _failures = 0;

  constructor(
    readonly options: IBackoffOptions = DEFAULT_BACKOFF,
    private readonly _random: () => number = Math.random
  ) {}

  get failures(): number {
    return this._failures;
  }

  /** Delay before the next attempt. */
  get delay(): number {
    return backoffDelay(this._failures, this.options, this._random);
  }

  success(): number {
    this._failures = 0;
    return this.delay;
  }

  failure(): number {
    this._failures++;
    return this.delay;
  }
}
