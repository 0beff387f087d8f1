/**
 * The queue between a log stream and the panel's next animation frame.
 *
 * Records arrive from the network whatever the page does; they are applied to
 * the DOM once per animation frame. When frames stop (a hidden browser tab),
 * an unbounded queue would grow with the job's output and end in one huge
 * flush. The view keeps only the last `capacity` lines anyway, so the queue
 * keeps at most as many (drop-oldest): what it drops the view would have
 * dropped on the next flush, and `dropped` counts it for the "earlier lines
 * hidden" note.
 */
import { RingBuffer } from './ringbuffer';

export class LogQueue<T> {
  private _ring: RingBuffer<T>;
  private _dropped = 0;

  constructor(readonly capacity: number) {
    this._ring = new RingBuffer<T>(capacity);
  }

  /** Queue an item, dropping the oldest queued one when full. */
  push(item: T): void {
    if (this._ring.length === this.capacity) {
      this._dropped++;
    }
    this._ring.push(item);
  }

  /** Queued items, oldest first; the queue is empty afterwards. */
  drain(): T[] {
    const out = this._ring.toArray();
    this._ring.clear();
    return out;
  }

  /** Items queued now. */
  get length(): number {
    return this._ring.length;
  }

  /** Items dropped unseen since creation or the last `reset()`. */
  get dropped(): number {
    return this._dropped;
  }

  /** Empty the queue and zero the dropped count (a new stream from the start). */
  reset(): void {
    this._ring.clear();
    this._dropped = 0;
  }
}
