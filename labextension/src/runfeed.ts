/**
 * One job's status and curves over the page's one update socket (api.streamHub()):
 * a `job` subscription (its record, until it ends) and a `logs` one (its
 * report markers, and Katib-style `name=value` stdout lines of the metrics
 * asked for). The sweep view and the compare panel hold one RunFeed per job,
 * all on the same socket. The log is followed only once the job has left
 * Created (a sweep's queued trials print nothing yet, issue 38); the hub sends a
 * few log subscriptions at a time and shares the job ones (stream.ts).
 */
import * as api from './api';
import { IJob } from './jobs';
import { MetricSeries, parseReport } from './metrics';
import { stdoutMetric } from './overlay';
import { numericMetrics } from './progress';
import { IJobSubscription, ISubscription } from './stream';

/** Log lines replayed per job (a finished job's whole report history, in practice). */
export const FEED_TAIL = 20000;

export class RunFeed {
  /** Curves from report() markers. */
  readonly series = new MetricSeries();
  job: IJob | null = null;
  error = '';

  constructor(
    readonly target: api.ITarget,
    readonly name: string,
    private readonly _stdoutMetrics: string[],
    private readonly _changed: () => void
  ) {}

  start(): void {
    const hub = api.streamHub();
    this._jobSub = hub.watchJob(this.target, this.name, { intervalMs: 1000 }, {
      onJob: job => {
        this.job = job;
        this.error = '';
        if (job.status !== 'Created') {
          this._followLogs();
        }
        this._changed();
      },
      onError: (err, final) => {
        this.error = final ? `no job ${this.name} on this server` : err.message;
        this._changed();
      }
    });
  }

  /** Whether the job's log is followed (tests). */
  get followsLogs(): boolean {
    return this._logSub !== null;
  }

  private _followLogs(): void {
    if (this._logSub || !this._jobSub) {
      return;
    }
    this._logSub = api.streamHub().watchLogs(this.target, this.name, FEED_TAIL, {
      onStart: () => {
        this.series.clear(); // a (re)subscription replays the tail
        this._stdout.clear();
        this._stdoutSteps = 0;
      },
      onRecords: records => {
        for (const rec of records) {
          this._line(rec.line);
        }
        this._changed();
      },
      onEnd: () => this._changed(),
      onError: () => undefined // the job subscription reports what is wrong
    });
  }

  /**
   * The curves to draw: report() markers; a metric no marker gave comes from
   * stdout `name=value` lines; one only the record has (trainerStatus) is its
   * latest value as one point.
   */
  curves(): MetricSeries {
    const out = new MetricSeries();
    const names = new Set(this.series.names());
    for (const n of names) {
      for (const p of this.series.points(n)) {
        out.add({ step: p.step, metrics: { [n]: p.value } });
      }
    }
    for (const n of this._stdout.names()) {
      if (!names.has(n)) {
        names.add(n);
        for (const p of this._stdout.points(n)) {
          out.add({ step: p.step, metrics: { [n]: p.value } });
        }
      }
    }
    const recorded = numericMetrics(this.job?.trainer_status);
    delete recorded.current_step;
    delete recorded.step;
    delete recorded.total_steps;
    for (const [n, v] of Object.entries(recorded)) {
      if (!names.has(n)) {
        out.add({ step: 0, metrics: { [n]: v } });
      }
    }
    return out;
  }

  close(): void {
    this._jobSub?.close();
    this._logSub?.close();
    this._jobSub = null;
    this._logSub = null;
  }

  private _line(line: string): void {
    const report = parseReport(line);
    if (report) {
      this.series.add(report);
      return;
    }
    let found = false;
    for (const m of this._stdoutMetrics) {
      const v = stdoutMetric(line, m);
      if (v !== null) {
        this._stdout.add({ step: this._stdoutSteps, metrics: { [m]: v } });
        found = true;
      }
    }
    if (found) {
      this._stdoutSteps++;
    }
  }

  private _jobSub: IJobSubscription | null = null;
  private _logSub: ISubscription | null = null;
  private _stdout = new MetricSeries();
  private _stdoutSteps = 0;
}
