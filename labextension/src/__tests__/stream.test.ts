import { ISocket, MAX_LOGS, StreamHub } from '../stream';

class FakeSocket implements ISocket {
  readyState = 0;
  sent: Record<string, unknown>[] = [];
  closed = false;
  onopen: ((ev: unknown) => void) | null = null;
  onclose: ((ev: unknown) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  send(data: string): void {
    this.sent.push(JSON.parse(data));
  }
  close(): void {
    this.closed = true;
    this.readyState = 3;
  }
  open(): void {
    this.readyState = 1;
    this.onopen?.({});
  }
  drop(): void {
    this.readyState = 3;
    this.onclose?.({});
  }
  reply(msg: Record<string, unknown>): void {
    this.onmessage?.({ data: JSON.stringify(msg) });
  }
}

function logHandlers() {
  return {
    starts: 0,
    records: [] as string[],
    ended: null as string | null,
    errors: [] as [number, number | null][],
    onStart() {
      this.starts++;
      this.records = [];
    },
    onRecords(recs: { source: string; line: string }[]) {
      this.records.push(...recs.map(r => r.line));
    },
    onEnd(status: string | null) {
      this.ended = status;
    },
    onError(err: { status: number }, retry: number | null) {
      this.errors.push([err.status, retry]);
    }
  };
}

describe('StreamHub', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('carries twelve monitors over one socket and routes each message to its subscriber', () => {
    const sockets: FakeSocket[] = [];
    const hub = new StreamHub(() => {
      const s = new FakeSocket();
      sockets.push(s);
      return s;
    });
    const views = Array.from({ length: 12 }, () => logHandlers());
    const subs = views.map((v, i) => hub.watchLogs({ backend: 'local' }, `job-${i}`, 100, v));
    const jobs: string[] = [];
    hub.watchJob({ backend: 'local' }, 'job-0', { intervalMs: 1000 }, {
      onJob: j => jobs.push(j.status),
      onError: () => undefined
    });
    expect(sockets).toHaveLength(1);
    sockets[0].open();
    const opened = sockets[0].sent.filter(m => m.op === 'logs');
    expect(opened.map(m => m.job)).toEqual(views.map((_, i) => `job-${i}`));
    expect(new Set(sockets[0].sent.map(m => m.id)).size).toBe(13);
    for (const [i, m] of opened.entries()) {
      sockets[0].reply({ id: m.id, type: 'records', records: [{ source: 'node-0', line: `hello ${i}` }] });
    }
    expect(views.map(v => v.records)).toEqual(views.map((_, i) => [`hello ${i}`]));
    const jobId = sockets[0].sent.find(m => m.op === 'job')!.id;
    sockets[0].reply({ id: jobId, type: 'job', job: { name: 'job-0', status: 'Running' } });
    expect(jobs).toEqual(['Running']);
    // closing a view tells the server at once
    subs[3].close();
    expect(sockets[0].sent.at(-1)).toEqual({ op: 'close', id: opened[3].id });
    expect(hub.size).toBe(12);
  });

  it('reconnects after a drop and replays each log from the start', () => {
    const sockets: FakeSocket[] = [];
    const hub = new StreamHub(() => {
      const s = new FakeSocket();
      sockets.push(s);
      return s;
    });
    const v = logHandlers();
    hub.watchLogs({ backend: 'kubernetes', namespace: 'team' }, 'j', 10, v);
    sockets[0].open();
    expect(sockets[0].sent[0]).toMatchObject({ op: 'logs', job: 'j', backend: 'kubernetes', namespace: 'team', tail: 10 });
    const id = sockets[0].sent[0].id;
    sockets[0].reply({ id, type: 'records', records: [{ source: 'a', line: 'x' }] });
    sockets[0].drop();
    expect(v.errors).toHaveLength(1);
    expect(v.errors[0][0]).toBe(0);
    jest.advanceTimersByTime(v.errors[0][1]! + 1);
    expect(sockets).toHaveLength(2);
    sockets[1].open();
    expect(v.starts).toBe(2);
    expect(v.records).toEqual([]);
    sockets[1].reply({ id, type: 'records', records: [{ source: 'a', line: 'x' }] });
    sockets[1].reply({ id, type: 'end', status: 'Complete' });
    expect(v.records).toEqual(['x']);
    expect(v.ended).toBe('Complete');
  });

  it('retries a failed log subscription, gives up on a gone job, and closes when idle', () => {
    const sockets: FakeSocket[] = [];
    const hub = new StreamHub(() => {
      const s = new FakeSocket();
      sockets.push(s);
      return s;
    });
    const v = logHandlers();
    const gone = logHandlers();
    hub.watchLogs({ backend: 'local' }, 'j', 10, v);
    hub.watchLogs({ backend: 'local' }, 'gone', 10, gone);
    sockets[0].open();
    const [a, b] = sockets[0].sent.map(m => m.id);
    sockets[0].reply({ id: a, type: 'error', status: 503, error: 'busy' });
    sockets[0].reply({ id: b, type: 'error', status: 404, error: 'no such job' });
    expect(gone.errors).toEqual([[404, null]]);
    expect(v.errors[0][0]).toBe(503);
    jest.advanceTimersByTime(v.errors[0][1]! + 1);
    expect(sockets[0].sent.filter(m => m.id === a)).toHaveLength(2); // subscribed again
    sockets[0].reply({ id: a, type: 'end', status: 'Complete' });
    jest.advanceTimersByTime(10000);
    expect(sockets[0].closed).toBe(true); // nothing left to follow: the connection is released
  });
  it('sends a few log subscriptions at a time: a 150-trial sweep loses none', () => {
    const sockets: FakeSocket[] = [];
    const hub = new StreamHub(() => {
      const s = new FakeSocket();
      sockets.push(s);
      return s;
    });
    const views = Array.from({ length: 150 }, () => logHandlers());
    const subs = views.map((v, i) => hub.watchLogs({ backend: 'local' }, `trial-${i}`, 100, v));
    sockets[0].open();
    const sentLogs = () => sockets[0].sent.filter(m => m.op === 'logs');
    expect(sentLogs()).toHaveLength(MAX_LOGS);
    expect(hub.logsOpen).toBe(MAX_LOGS);
    // a waiting view closed before its turn costs the server nothing
    subs[149].close();
    expect(sockets[0].sent.some(m => m.op === 'close')).toBe(false);
    // each finished trial's log ends once replayed; the next waiting one is sent, in order
    for (let n = 0; n < 149; n++) {
      const m = sentLogs()[n];
      expect(m.job).toBe(`trial-${n}`);
      sockets[0].reply({ id: m.id, type: 'records', records: [{ source: 'node-0', line: `loss=${n}` }] });
      sockets[0].reply({ id: m.id, type: 'end', status: 'Complete' });
      expect(hub.logsOpen).toBeLessThanOrEqual(MAX_LOGS);
    }
    expect(sentLogs()).toHaveLength(149);
    expect(views.slice(0, 149).map(v => v.records)).toEqual(views.slice(0, 149).map((_, n) => [`loss=${n}`]));
    expect(views.slice(0, 149).every(v => v.ended === 'Complete')).toBe(true);
    expect(views[149].starts).toBe(0);
  });

  it('shares one job subscription among the views of the same job', async () => {
    const sockets: FakeSocket[] = [];
    const hub = new StreamHub(() => {
      const s = new FakeSocket();
      sockets.push(s);
      return s;
    });
    const seen: string[][] = [[], [], []];
    const handles = seen.slice(0, 2).map((out, i) =>
      hub.watchJob({ backend: 'local' }, 'j', { intervalMs: 1000 }, { onJob: j => out.push(`${i}:${j.status}`), onError: () => undefined })
    );
    sockets[0].open();
    const jobs = sockets[0].sent.filter(m => m.op === 'job');
    expect(jobs).toHaveLength(1);
    sockets[0].reply({ id: jobs[0].id, type: 'job', job: { name: 'j', status: 'Running' } });
    expect(seen.slice(0, 2)).toEqual([['0:Running'], ['1:Running']]);
    // a view opened later gets what the others have at once, over the same subscription
    const late = hub.watchJob({ backend: 'local' }, 'j', { intervalMs: 1000 }, { onJob: j => seen[2].push(`2:${j.status}`), onError: () => undefined });
    await Promise.resolve();
    expect(seen[2]).toEqual(['2:Running']);
    expect(sockets[0].sent.filter(m => m.op === 'job')).toHaveLength(1);
    late.refresh();
    expect(sockets[0].sent.at(-1)).toEqual({ op: 'refresh', id: jobs[0].id });
    // the server is told only when the last view closes
    handles[0].close();
    late.close();
    expect(sockets[0].sent.some(m => m.op === 'close')).toBe(false);
    handles[1].close();
    expect(sockets[0].sent.at(-1)).toEqual({ op: 'close', id: jobs[0].id });
  });
});

