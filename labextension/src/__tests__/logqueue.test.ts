import { LogQueue } from '../logqueue';

describe('LogQueue (records waiting for the next animation frame)', () => {
  it('keeps everything while under capacity, in order', () => {
    const q = new LogQueue<number>(5);
    [1, 2, 3].forEach(i => q.push(i));
    expect(q.length).toBe(3);
    expect(q.dropped).toBe(0);
    expect(q.drain()).toEqual([1, 2, 3]);
    expect(q.length).toBe(0);
  });

  it('stays bounded when frames stop (hidden tab): drops the oldest and counts them', () => {
    const cap = 2000;
    const q = new LogQueue<{ source: string; line: string }>(cap);
    const n = 8000 * 60; // a minute at 8k lines/s with no frame
    for (let i = 0; i < n; i++) {
      q.push({ source: `rank-${i % 4}`, line: `line ${i}` });
      if (q.length > cap) {
        throw new Error(`queue holds ${q.length} > ${cap} after ${i + 1} records`);
      }
    }
    expect(q.dropped).toBe(n - cap);
    const batch = q.drain();
    expect(batch.length).toBe(cap);
    expect(batch[0].line).toBe(`line ${n - cap}`);
    expect(batch[cap - 1].line).toBe(`line ${n - 1}`);
    // the count of dropped lines survives draining (the note shows it), reset zeroes it
    q.push({ source: 'rank-0', line: 'next' });
    expect(q.dropped).toBe(n - cap);
    q.reset();
    expect(q.dropped).toBe(0);
    expect(q.length).toBe(0);
  });
});
