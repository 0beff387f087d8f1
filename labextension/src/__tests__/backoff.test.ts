import { Backoff, backoffDelay, IBackoffOptions } from '../backoff';

const opts: IBackoffOptions = { interval: 3000, base: 1000, factor: 2, max: 10000, jitter: 0 };

describe('backoffDelay', () => {
  it('uses the interval while healthy', () => {
    expect(backoffDelay(0, opts)).toBe(3000);
  });
  it('grows exponentially and caps', () => {
    expect([1, 2, 3, 4, 5, 6, 50].map(n => backoffDelay(n, opts))).toEqual([
      1000, 2000, 4000, 8000, 10000, 10000, 10000
    ]);
  });
  it('applies bounded jitter', () => {
    const j = { ...opts, jitter: 0.5 };
    expect(backoffDelay(2, j, () => 0)).toBe(1000); // 2000 * (1 - 0.5)
    expect(backoffDelay(2, j, () => 1)).toBe(3000); // 2000 * (1 + 0.5)
    expect(backoffDelay(2, j, () => 0.5)).toBe(2000);
    expect(backoffDelay(10, j, () => 1)).toBe(10000); // never above max
  });
  it('treats a factor below 1 as 1', () => {
    expect(backoffDelay(5, { ...opts, factor: 0.5 })).toBe(1000);
  });
});

describe('Backoff', () => {
  it('counts failures and resets on success', () => {
    const b = new Backoff(opts);
    expect(b.delay).toBe(3000);
    expect(b.failure()).toBe(1000);
    expect(b.failure()).toBe(2000);
    expect(b.failure()).toBe(4000);
    expect(b.failures).toBe(3);
    expect(b.success()).toBe(3000);
    expect(b.failures).toBe(0);
  });
});
