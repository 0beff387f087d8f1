import { RingBuffer } from '../ringbuffer';

describe('RingBuffer', () => {
  it('keeps items in order below capacity', () => {
    const r = new RingBuffer<number>(3);
    expect(r.push(1)).toBeUndefined();
    r.push(2);
    expect(r.toArray()).toEqual([1, 2]);
    expect(r.length).toBe(2);
    expect(r.dropped).toBe(0);
  });

  it('evicts the oldest past capacity', () => {
    const r = new RingBuffer<number>(3);
    for (let i = 1; i <= 3; i++) {
      r.push(i);
    }
    expect(r.push(4)).toBe(1);
    expect(r.push(5)).toBe(2);
    expect(r.toArray()).toEqual([3, 4, 5]);
    expect(r.length).toBe(3);
    expect(r.dropped).toBe(2);
    expect(r.get(0)).toBe(3);
    expect(r.get(2)).toBe(5);
    expect(r.get(3)).toBeUndefined();
    expect(r.get(-1)).toBeUndefined();
  });

  it('stays bounded over many pushes', () => {
    const r = new RingBuffer<number>(100);
    for (let i = 0; i < 10000; i++) {
      r.push(i);
    }
    const a = r.toArray();
    expect(a.length).toBe(100);
    expect(a[0]).toBe(9900);
    expect(a[99]).toBe(9999);
    expect(r.dropped).toBe(9900);
  });

  it('clears', () => {
    const r = new RingBuffer<string>(2);
    r.push('a');
    r.push('b');
    r.push('c');
    r.clear();
    expect(r.toArray()).toEqual([]);
    expect(r.dropped).toBe(0);
    r.push('d');
    expect(r.toArray()).toEqual(['d']);
  });

  it('rejects a bad capacity', () => {
    expect(() => new RingBuffer(0)).toThrow(RangeError);
    expect(() => new RingBuffer(1.5)).toThrow(RangeError);
  });
});
