/**
 * Pure parsing of the log stream: "[source] line" text lines and the
 * server-sent events (SSE) of the streaming logs route.
 *
 * No JupyterLab imports here: this module is unit-tested under plain Node.
 */

/** One log line and the process (source) that wrote it. */
export interface ILogRecord {
  /** `rank-N`, `node-N`, `launcher`, or "" when the log has a single source. */
  source: string;
  line: string;
}

const SOURCED_LINE = /^\[([A-Za-z0-9][A-Za-z0-9._:-]*)\] ?(.*)$/s;

/**
 * Parse one line of the non-streamed log ("[source] line", or a bare `line`
 * when the job has a single source).
 */
export function parseSourcedLine(text: string): ILogRecord {
  const stripped = text.endsWith('\r') ? text.slice(0, -1) : text;
  const m = SOURCED_LINE.exec(stripped);
  if (m) {
    return { source: m[1], line: m[2] };
  }
  return { source: '', line: stripped };
}

/**
 * Turn the JSON payload of one SSE `data:` field into a log record, or null
 * when it is not one (malformed JSON, missing `line`).
 */
export function parseLogEventData(data: string): ILogRecord | null {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    return null;
  }
  if (!value || typeof value !== 'object') {
    return null;
  }
  const obj = value as { source?: unknown; line?: unknown };
  if (typeof obj.line !== 'string') {
    return null;
  }
  return {
    source: typeof obj.source === 'string' ? obj.source : '',
    line: obj.line
  };
}

/** One server-sent event. `event` defaults to "message". */
export interface ISseEvent {
  event: string;
  data: string;
  id?: string;
}

/**
 * Incremental parser of a `text/event-stream` body (the subset of the
 * WHATWG spec the server uses: `event:`, `data:`, `id:`, comments).
 *
 * Feed it decoded text chunks as they arrive; chunk boundaries may fall
 * anywhere, including inside a line or between `\r` and `\n`.
 */
export class SseParser {
  private _buffer = '';
  private _event = '';
  private _data: string[] = [];
  private _id: string | undefined = undefined;

  /** Feed a chunk; returns the events it completed. */
  push(chunk: string): ISseEvent[] {
    this._buffer += chunk;
    const events: ISseEvent[] = [];
    for (;;) {
      const m = /\r\n|\r|\n/.exec(this._buffer);
      if (!m) {
        break;
      }
      // A lone trailing "\r" may be the first half of "\r\n": wait for more.
      if (m[0] === '\r' && m.index === this._buffer.length - 1) {
        break;
      }
      const line = this._buffer.slice(0, m.index);
      this._buffer = this._buffer.slice(m.index + m[0].length);
      const ev = this._line(line);
      if (ev) {
        events.push(ev);
      }
    }
    return events;
  }

  /** Signal the end of the body; returns a last event not closed by a blank line. */
  finish(): ISseEvent[] {
    const events: ISseEvent[] = [];
    if (this._buffer.length) {
      const ev = this._line(this._buffer.replace(/\r$/, ''));
      this._buffer = '';
      if (ev) {
        events.push(ev);
      }
    }
    const ev = this._dispatch();
    if (ev) {
      events.push(ev);
    }
    return events;
  }

  private _line(line: string): ISseEvent | null {
    if (line === '') {
      return this._dispatch();
    }
    if (line.startsWith(':')) {
      return null; // comment / keep-alive
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    switch (field) {
      case 'event':
        this._event = value;
        break;
      case 'data':
        this._data.push(value);
        break;
      case 'id':
        this._id = value;
        break;
      default:
        break; // "retry" and unknown fields are ignored
    }
    return null;
  }

  private _dispatch(): ISseEvent | null {
    const hasData = this._data.length > 0;
    const event = this._event;
    const ev: ISseEvent = {
      event: event || 'message',
      data: this._data.join('\n')
    };
    if (this._id !== undefined) {
      ev.id = this._id;
    }
    this._event = '';
    this._data = [];
    // Per spec an event with no data is dropped; a named event (e.g. `end`)
    // without data is still meaningful to us, so keep it.
    return hasData || event ? ev : null;
  }
}

/** Sort sources for the rank filter: launcher first, then by kind and number. */
export function sortSources(sources: Iterable<string>): string[] {
  const key = (s: string): [number, string, number] => {
    if (s === 'launcher') {
      return [0, s, 0];
    }
    const m = /^(.*?)-(\d+)$/.exec(s);
    if (m) {
      return [1, m[1], parseInt(m[2], 10)];
    }
    return [2, s, 0];
  };
  return Array.from(new Set(sources)).sort((a, b) => {
    const ka = key(a);
    const kb = key(b);
    if (ka[0] !== kb[0]) {
      return ka[0] - kb[0];
    }
    if (ka[1] !== kb[1]) {
      return ka[1] < kb[1] ? -1 : 1;
    }
    return ka[2] - kb[2];
  });
}

/** Every line kf-jupyter's runner prints for kf-jupyter (report, result, error) has this. */
export const PROTOCOL_PREFIX = '##kf-jupyter:';

const OMP_BANNER =
  /^[WI]\d{4} [\d:.]+ +\d+ \S*torch\/distributed\/run\.py:\d+\] (\**|Setting OMP_NUM_THREADS environment variable .*)\s*$/;

/** A line of torchrun's `Setting OMP_NUM_THREADS ... to be 1` banner. */
export function isBanner(line: string): boolean {
  return line.includes('torch/distributed/run.py') && OMP_BANNER.test(line);
}

/** What a terminal shows for a line with carriage returns: its last non-blank segment. */
export function collapseCr(line: string): string {
  if (!line.includes('\r')) {
    return line;
  }
  const parts = line.split('\r').filter(p => p.trim() !== '');
  return parts.length ? parts[parts.length - 1] : '';
}

const TRACEBACK = 'Traceback (most recent call last):';
const ELASTIC = 'torch.distributed.elastic.multiprocessing.errors.ChildFailedError';

/**
 * The log as a person reads it (the same rules as kf_jupyter/logview.py): protocol lines and
 * torchrun's OMP banner hidden, `\r` progress bars collapsed, updates of a line still being
 * written (records starting with `\r`) kept apart. Text before a protocol record on one line is
 * a progress bar the record's newline interrupted: it is held, replaced by the next such line
 * of its source, and shown once when the bar's line ends.
 *
 * `live` holds, per source, the line it is still writing (a tqdm bar redrawn with `\r` and no
 * newline yet): the views show it below the finished lines, updated in place, and drop it
 * when the source's line ends (the finished line then comes through `push`), as a terminal
 * would show it (the same rule as kf_jupyter/widgets/state.py).
 *
 * The raw stream still carries the reports: the panel's chart reads them before this.
 */
/** How far a tqdm bar's next state may differ in width from the last one shown. */
const BAR_SLACK = 16;

/**
 * The text printed after a progress bar on the bar's own line, or null when `line` is not a
 * bar followed by text (the same rule as kf_jupyter/logview.py `after_bar`). The completed line
 * is the bar's next state followed by what was printed: as wide as the shown one for a
 * fixed-width bar; tqdm's ends with its `[...]` block, whose rate and times may change width by
 * a few characters between two states, so there the bar ends at the `]` nearest that width. A
 * bar without that block may grow: what follows counts as printed only when it holds a letter.
 */
export function afterBar(bar: string, line: string): string | null {
  if (line.includes('\r') || !/[|%]/.test(bar)) {
    return null;
  }
  let cut = bar.length;
  let best = -1;
  if (bar.endsWith(']')) {
    const hi = Math.min(line.length, cut + BAR_SLACK);
    for (let j = Math.max(0, cut - 1 - BAR_SLACK); j < hi; j++) {
      if (line[j] === ']' && (best < 0 || Math.abs(j + 1 - cut) < Math.abs(best - cut))) {
        best = j + 1;
      }
    }
    if (best >= 0) {
      cut = best;
    }
  }
  const head = line.slice(0, cut);
  const tail = line.slice(cut);
  if (!/[|%]/.test(head) || tail.trim() === '') {
    return null;
  }
  if (best < 0 && !/\p{L}/u.test(tail)) {
    return null; // a bar without a [...] block may grow (`6/6 |#######`): no letter, no print
  }
  return tail;
}

export class ReadableLog {
  private _held = new Map<string, ILogRecord>();
  private _tracebacks = new Map<string, string[]>();
  private _box = new Map<string, number>();
  private _live = new Map<string, string>();

  /** The line each source is still writing (a progress bar), by source; see the class. */
  get live(): ReadonlyMap<string, string> {
    return this._live;
  }

  /** The records to show for one raw record (none, one, or held lines and the record). */
  push(rec: ILogRecord): ILogRecord[] {
    if (rec.line.startsWith('\r')) {
      const text = collapseCr(rec.line);
      if (text.trim() !== '') {
        this._live.set(rec.source, text);
      }
      return [];
    }
    let line = rec.line;
    if (!line.includes(PROTOCOL_PREFIX)) {
      const bar = this._live.get(rec.source);
      const printed = bar === undefined ? null : afterBar(bar, line);
      if (printed !== null) {
        // a print after a bar update, on the bar's terminal line (`...[00:19<00:11]rank 0 step
        // 19`): the bar stays the rank's live line, the printed text is a clean line of its own
        this._live.set(rec.source, line.slice(0, line.length - printed.length));
        line = printed;
      } else {
        this._live.delete(rec.source); // the line it was writing has ended
      }
    }
    return this._fold(rec.source, line).flatMap(l => this._one(rec.source, l));
  }

  /** What is still held, at the end of the log. */
  finish(): ILogRecord[] {
    this._live.clear();
    const out: ILogRecord[] = [];
    for (const [source, lines] of this._tracebacks) {
      for (const line of lines) {
        out.push(...this._one(source, line));
      }
    }
    this._tracebacks.clear();
    out.push(...this._held.values());
    this._held.clear();
    return out;
  }

  /**
   * torchrun's traceback and `ChildFailedError` box, printed after a rank failed, are folded
   * away: a traceback is held until its exception line, and passed on unless it is torchrun's.
   */
  private _fold(source: string, line: string): string[] {
    if (line.includes(PROTOCOL_PREFIX)) {
      return [line];
    }
    const box = this._box.get(source);
    if (box !== undefined) {
      if (line.startsWith('=====')) {
        if (box <= 1) {
          this._box.delete(source);
        } else {
          this._box.set(source, box - 1);
        }
      }
      return [];
    }
    const held = this._tracebacks.get(source);
    if (!held) {
      if (line.startsWith(ELASTIC)) {
        this._box.set(source, 2); // torchrun's box without a traceback before it
        return [];
      }
      if (line.trim() === TRACEBACK) {
        this._tracebacks.set(source, [line]);
        return [];
      }
      return [line];
    }
    if (line.startsWith(' ') || line.startsWith('\t') || line.trim() === '') {
      held.push(line);
      return [];
    }
    this._tracebacks.delete(source);
    if (line.startsWith(ELASTIC)) {
      this._box.set(source, 2);
      return [];
    }
    return [...held, line];
  }

  private _one(source: string, line: string): ILogRecord[] {
    if (line.startsWith('\r') || isBanner(line)) {
      return [];
    }
    const idx = line.indexOf(PROTOCOL_PREFIX);
    if (idx >= 0) {
      const head = collapseCr(line.slice(0, idx));
      if (head.trim() !== '') {
        this._held.set(source, { source, line: head });
        this._live.set(source, head); // the bar goes on after the record's newline
      }
      return [];
    }
    const out: ILogRecord[] = [];
    const text = collapseCr(line);
    const bar = this._held.get(source);
    if (bar) {
      this._held.delete(source);
      out.push(bar);
      if (text.trim() === '') {
        return out; // the newline that ended the bar's line
      }
    }
    out.push({ source, line: text });
    return out;
  }
}
