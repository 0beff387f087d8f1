import { ISocket, StreamHub } from '../stream';

class FakeSocket implements ISocket {
  readyState = 0;
  sent: Record<string, unknown>[] = [];
  onopen: ((ev: unknown) => void) | null = null;
  onclose: ((ev: unknown) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  send(data: string): void {
    this.sent.push(JSON.parse(data));
  }
  close(): void {
    this.readyState = 3;
  }
  reply(msg: Record<string, unknown>): void {
    this.onmessage?.({ data: JSON.stringify(msg) });
  }
}

const socket = new FakeSocket();
const hub = new StreamHub(() => socket);
jest.mock('../api', () => ({ streamHub: () => hub }));

// after the mock: RunFeed takes the page's hub from '../api'
import { RunFeed } from '../runfeed';

describe('RunFeed', () => {
  beforeAll(() => jest.useFakeTimers());
  afterAll(() => {
    jest.runOnlyPendingTimers(); // the hub's idle close
    jest.useRealTimers();
  });

  it("follows a trial's log only once its job has left Created", () => {
    const feeds = Array.from({ length: 150 }, (_, i) => new RunFeed({ backend: 'local' }, `trial-${i}`, ['loss'], () => undefined));
    feeds.forEach(f => f.start());
    socket.readyState = 1;
    socket.onopen?.({});
    const jobSubs = socket.sent.filter(m => m.op === 'job');
    expect(jobSubs).toHaveLength(150); // every trial's record is followed
    expect(socket.sent.filter(m => m.op === 'logs')).toHaveLength(0);
    // the sweep runs 4 trials; the other 146 wait (Created): no log stream for them
    jobSubs.forEach((m, i) => socket.reply({ id: m.id, type: 'job', job: { name: m.job, status: i < 4 ? 'Running' : 'Created' } }));
    expect(feeds.filter(f => f.followsLogs)).toHaveLength(4);
    expect(socket.sent.filter(m => m.op === 'logs').map(m => m.job)).toEqual(['trial-0', 'trial-1', 'trial-2', 'trial-3']);
    const logs = socket.sent.filter(m => m.op === 'logs');
    socket.reply({ id: logs[0].id, type: 'records', records: [{ source: 'node-0', line: 'loss=0.5' }] });
    expect(feeds[0].curves().points('loss').map(p => p.value)).toEqual([0.5]);
    feeds.forEach(f => f.close());
  });
});
