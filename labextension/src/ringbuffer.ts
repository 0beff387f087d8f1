/**
 * A fixed-capacity FIFO: pushing past the capacity drops the oldest items.
 * Used to keep at most N log lines in the DOM.
 */
export class RingBuffer<T> {
  private _items: (T | undefined)[];
  private _start = 0;
  private _length = 0;
  private _dropped = 0;

  constructor(readonly capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) {
      throw new RangeError(`capacity must be a positive integer, got ${capacity}`);
    }
    this._items = new Array(capacity);
  }

  /** Number of items held. */
  get length(): number {
    return this._length;
  }

  /** Number of items dropped since creation (or the last clear). */
  get dropped(): number {
    return this._dropped;
  }

  /** Append an item; returns the item it evicted, if any. */
  push(item: T): T | undefined {
    if (this._length < this.capacity) {
      this._items[(this._start + this._length) % this.capacity] = item;
      this._length++;
      return undefined;
    }
    const evicted = this._items[this._start];
    this._items[this._start] = item;
    this._start = (this._start + 1) % this.capacity;
    this._dropped++;
    return evicted;
  }

  /** Item i (0 = oldest), or undefined when out of range. */
  get(i: number): T | undefined {
    if (i < 0 || i >= this._length) {
      return undefined;
    }
    return this._items[(this._start + i) % this.capacity];
  }

  /** Items, oldest first. */
  toArray(): T[] {
    const out: T[] = [];
    for (let i = 0; i < this._length; i++) {
      out.push(this._items[(this._start + i) % this.capacity] as T);
    }
    return out;
  }

  clear(): void {
    this._items = new Array(this.capacity);
    this._start = 0;
    this._length = 0;
    this._dropped = 0;
  }
}
