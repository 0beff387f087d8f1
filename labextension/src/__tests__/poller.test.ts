import { IScheduler, Poller } from '../poller';

/** A manual clock: timers fire only when `advance` passes them. */
class FakeScheduler implements IScheduler {
  now = 0;
  private _next = 1;
  timers = new Map<number, { at: number; fn: () => void }>();

  setTimeout(fn: () => void, ms: number): unknown {
    const id = this._next++;
    this.timers.set(id, { at: this.now + ms, fn });
    return id;
  }
  clearTimeout(handle: unknown): void {
    this.timers.delete(handle as number);
  }
  /** Delays of pending timers, relative to now. */
  pending(): number[] {
    return Array.from(this.timers.values()).map(t => t.at - this.now);
  }
  async advance(ms: number): Promise<void> {
    const target = this.now + ms;
    for (;;) {
      const due = Array.from(this.timers.entries())
        .filter(([, t]) => t.at <= target)
        .sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) {
        break;
      }
      this.timers.delete(due[0]);
      this.now = due[1].at;
      due[1].fn();
      await flush();
    }
    this.now = target;
  }
}

async function flush(): Promise<void> {
  for (let i = 0; i < 10; i++) {
    await Promise.resolve();
  }
}

const backoff = { interval: 1000, base: 500, factor: 2, max: 4000, jitter: 0 };

describe('Poller', () => {
  it('runs at once, then every interval while healthy', async () => {
    const s = new FakeScheduler();
    let calls = 0;
    const p = new Poller(async () => void calls++, { backoff, scheduler: s });
    await p.start();
    expect(calls).toBe(1);
    expect(s.pending()).toEqual([1000]);
    await s.advance(999);
    expect(calls).toBe(1);
    await s.advance(1);
    expect(calls).toBe(2);
    await s.advance(3000);
    expect(calls).toBe(5);
  });

  it('backs off exponentially on errors and recovers', async () => {
    const s = new FakeScheduler();
    let fail = true;
    const delays: number[] = [];
    const p = new Poller(
      async () => {
        if (fail) {
          throw new Error('503');
        }
      },
      { backoff, scheduler: s, onTick: (_e, d) => delays.push(d) }
    );
    await p.start();
    for (let i = 0; i < 5; i++) {
      await s.advance(s.pending()[0]);
    }
    expect(delays).toEqual([500, 1000, 2000, 4000, 4000, 4000]);
    expect(p.failures).toBe(6);
    fail = false;
    await s.advance(4000);
    expect(delays[delays.length - 1]).toBe(1000);
    expect(p.failures).toBe(0);
    expect(s.pending()).toEqual([1000]);
  });

  it('pauses while hidden and refreshes at once on resume', async () => {
    const s = new FakeScheduler();
    let calls = 0;
    const p = new Poller(async () => void calls++, { backoff, scheduler: s });
    await p.start();
    p.pause();
    expect(p.state).toBe('paused');
    expect(s.pending()).toEqual([]);
    await s.advance(60000);
    expect(calls).toBe(1);
    await p.resume();
    expect(calls).toBe(2);
    expect(p.state).toBe('running');
    expect(s.pending()).toEqual([1000]);
  });

  it('does not reschedule when paused during a run in flight', async () => {
    const s = new FakeScheduler();
    let release: () => void = () => undefined;
    const p = new Poller(() => new Promise<void>(r => (release = r)), { backoff, scheduler: s });
    const run = p.start();
    p.pause();
    release();
    await run;
    expect(s.pending()).toEqual([]);
  });

  it('coalesces refreshes during a run into one more run', async () => {
    const s = new FakeScheduler();
    let calls = 0;
    let release: () => void = () => undefined;
    const p = new Poller(
      () =>
        new Promise<void>(r => {
          calls++;
          release = r;
        }),
      { backoff, scheduler: s }
    );
    const first = p.start();
    void p.refresh();
    void p.refresh();
    release();
    await flush();
    expect(calls).toBe(2);
    release();
    await first;
    await flush();
    expect(calls).toBe(2);
    expect(s.pending()).toEqual([1000]);
  });

  it('stops for good on dispose', async () => {
    const s = new FakeScheduler();
    let calls = 0;
    const p = new Poller(async () => void calls++, { backoff, scheduler: s });
    await p.start();
    p.dispose();
    expect(s.pending()).toEqual([]);
    await p.refresh();
    await p.resume();
    expect(calls).toBe(1);
    expect(p.state).toBe('disposed');
  });
});
