/**
 * Main-area panel of one job: status, live logs (streamed, bounded), a
 * metrics chart, and events.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import * as api from './api';
import { MetricsChart } from './chart';
import { h, setBadge, statusBadge } from './dom';
import { trainerIcon } from './icon';
import {
  displayStatus,
  failureText,
  formatAge,
  formatDuration,
  formatNodes,
  formatTime,
  IJob,
  IJobEvent,
  isFinished,
  statusKey,
  startupText
} from './jobs';
import { LiveLines } from './livelines';
import { ILogRecord, PROTOCOL_PREFIX, ReadableLog, sortSources } from './logparse';
import { LogQueue } from './logqueue';
import { IReport, MetricSeries, parseReport } from './metrics';
import { progressText, TrainerStatusFeed } from './progress';
import { RingBuffer } from './ringbuffer';
import { sourceClass } from './palette';
import { messageOf } from './sidebar';
import { IJobSubscription, ISubscription } from './stream';

/** At most this many log lines are kept in the DOM. */
export const MAX_LOG_LINES = 2000;
const ALL = '__all__';

/** A streamed record waiting for the next frame, with whether it is a report line. */
interface IQueued {
  rec: ILogRecord;
  isReport: boolean;
}

/** How often the panel's relative times ("3s ago") are brought up to date. */
const AGE_REFRESH_MS = 5000;

/** A relative time ("3s" + suffix) that the panel's timer keeps current. */
function ageNode(time: string | null | undefined, suffix = ''): HTMLSpanElement {
  const el = h('span', { className: 'kf-age' }, formatAge(time, Date.now()) + suffix);
  if (time) {
    el.dataset.time = time;
  }
  el.dataset.suffix = suffix;
  return el;
}

export class JobPanel extends Widget {
  constructor(
    readonly target: api.ITarget,
    readonly jobName: string,
    readonly maxLines = MAX_LOG_LINES
  ) {
    super();
    this.addClass('kf-JobPanel');
    this._lines = new RingBuffer<ILogRecord>(maxLines);
    this._pending = new LogQueue<IQueued>(maxLines);
    this._build();
    // Relative times ("3s ago") keep counting after the job ended and polling stopped.
    this._ageTimer = window.setInterval(() => this._updateAges(), AGE_REFRESH_MS);
  }

  get records(): ILogRecord[] {
    return this._lines.toArray();
  }

  get metrics(): MetricSeries {
    return this._metrics;
  }

  /** Read the job now (the Refresh command). */
  refresh(): Promise<void> {
    this._jobSub?.refresh();
    return Promise.resolve();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    window.clearInterval(this._ageTimer);
    this._jobSub?.close();
    this._jobSub = null;
    this._logSub?.close();
    this._logSub = null;
    if (this._flushHandle) {
      cancelAnimationFrame(this._flushHandle);
    }
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (!this._started) {
      this._started = true;
      this._watch();
    }
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._scrollIfFollowing();
  }

  // ---------------------------------------------------------------- layout

  private _build(): void {
    this._badge = statusBadge('…', 'unknown');
    this._summary = h('dl', { className: 'kf-summary' });
    this._message = h('div', { className: 'kf-job-message' });
    this._error = h('div', { className: 'kf-error', role: 'alert', hidden: true });
    // a div, not <header>: inside JupyterLab's main area a <header> is a banner landmark nested
    // in another landmark (axe: landmark-banner-is-top-level)
    const head = h(
      'div',
      { className: 'kf-JobPanel-header' },
      h('h2', { className: 'kf-JobPanel-title' }, this.jobName, ' ', this._badge, ' ', this._suspendButton()),
      this._summary,
      this._message,
      this._error
    );

    this._chart = new MetricsChart();
    const metrics = h(
      'section',
      { className: 'kf-section kf-metrics', 'aria-label': 'Metrics' },
      h('h3', { className: 'kf-section-title' }, 'Metrics'),
      this._chart.node
    );

    this._rank = h('select', { className: 'kf-select jp-mod-styled', 'aria-label': 'Show logs of' });
    this._rank.append(h('option', { value: ALL }, 'all sources'));
    this._rank.addEventListener('change', () => this._rebuildLog());
    this._follow = h('input', { type: 'checkbox', checked: true, 'aria-label': 'Follow log' });
    this._follow.checked = true;
    this._follow.addEventListener('change', () => this._scrollIfFollowing());
    const fullLog = h(
      'a',
      {
        className: 'kf-link',
        href: api.fullLogUrl(this.target, this.jobName),
        target: '_blank',
        rel: 'noopener',
        title: 'The whole log, not streamed, in a new tab'
      },
      'Open full log'
    );
    this._logState = h('span', { className: 'kf-log-state', 'aria-live': 'polite' });
    const toolbar = h(
      'div',
      { className: 'kf-log-toolbar' },
      h('label', { className: 'kf-label-inline' }, 'Source ', this._rank),
      h('label', { className: 'kf-label-inline' }, this._follow, ' Follow'),
      fullLog,
      this._logState
    );
    this._log = h('div', {
      className: 'kf-log',
      role: 'log',
      tabindex: '0',
      'aria-label': `Log of ${this.jobName}`
    });
    this._log.append(this._live.node);
    // Only a scroll the user makes toggles "follow": trimming old lines or
    // appending new ones also fires scroll events.
    const markUser = (): void => {
      this._userScrollUntil = Date.now() + 600;
    };
    for (const type of ['wheel', 'pointerdown', 'touchmove', 'keydown']) {
      this._log.addEventListener(type, markUser, { passive: true });
    }
    this._log.addEventListener('scroll', () => {
      if (Date.now() > this._userScrollUntil) {
        return;
      }
      const atBottom = this._log.scrollHeight - this._log.scrollTop - this._log.clientHeight < 4;
      if (this._follow.checked !== atBottom) {
        this._follow.checked = atBottom;
      }
    });
    this._dropped = h('div', { className: 'kf-note', hidden: true });
    // what the job does before its first line (startupText), as in the live monitor
    this._startup = h('div', { className: 'kf-live-startup kf-panel-startup', role: 'status', hidden: true });
    const logs = h(
      'section',
      { className: 'kf-section kf-logs', 'aria-label': 'Logs' },
      h('h3', { className: 'kf-section-title' }, 'Logs'),
      toolbar,
      this._dropped,
      this._startup,
      this._log
    );

    this._events = h('tbody', {});
    const events = h(
      'section',
      { className: 'kf-section kf-events', 'aria-label': 'Events' },
      h('h3', { className: 'kf-section-title' }, 'Events'),
      h(
        'table',
        { className: 'kf-events-table' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Age'), h('th', {}, 'Type'), h('th', {}, 'Reason'), h('th', {}, 'Message'))),
        this._events
      )
    );
    this.node.append(head, metrics, logs, events);
  }

  // ---------------------------------------------------------------- status and events

  /**
   * The job's record and events (every 3 s until it ends) and its log, over
   * the page's one update socket (api.streamHub()), shared with the monitors.
   */
  private _watch(): void {
    const hub = api.streamHub();
    this._jobSub = hub.watchJob(this.target, this.jobName, { intervalMs: 3000, events: true }, {
      onJob: job => {
        this._showError(null);
        this._renderJob(job);
      },
      onEvents: events => this._renderEvents(events),
      onError: err => this._showError(err)
    });
    this._logSub = hub.watchLogs(this.target, this.jobName, this.maxLines, {
      onStart: () => {
        this._resetLog(); // a (re)subscription replays the tail: start over to avoid duplicates
        this._logState.textContent = 'streaming…';
      },
      onRecords: records => {
        for (const rec of records) {
          this._onRecord(rec);
        }
      },
      onEnd: () => {
        this._showHeld();
        this._logState.textContent = 'job ended; log complete';
      },
      onError: (err, retryMs) => {
        this._logState.textContent =
          retryMs === null
            ? `log stream failed (${messageOf(err)})`
            : `log stream failed (${messageOf(err)}); retrying in ${Math.round(retryMs / 1000)} s`;
      }
    });
  }

  /** Suspend / Resume: stop the job's pods or processes and keep the job, or start them again. */
  private _suspendButton(): HTMLButtonElement {
    this._suspend = h('button', {
      className: 'kf-suspend jp-Button jp-mod-styled jp-mod-minimal',
      type: 'button',
      disabled: true
    }, 'Suspend');
    this._suspend.addEventListener('click', () => void this._toggleSuspend());
    return this._suspend;
  }

  private async _toggleSuspend(): Promise<void> {
    const suspend = this._status !== 'Suspended';
    this._suspend.disabled = true;
    try {
      await api.setSuspended(this.target, this.jobName, suspend);
      this._showError(null);
    } catch (e) {
      this._showError(`${suspend ? 'Suspend' : 'Resume'} failed: ${(e as Error).message ?? e}`);
    }
    this._jobSub?.refresh();
  }

  /** The startup phase until the first line arrives; hidden after it and once the job ended. */
  private _renderStartup(): void {
    const text = this._sources.size === 0 ? startupText(this._job, this._lastEvents) : null;
    this._startup.hidden = text === null;
    if (text !== null && this._startup.textContent !== text) {
      this._startup.textContent = text;
    }
  }

  private _renderJob(job: IJob): void {
    this._job = job;
    this._renderStartup();
    this._status = job.status;
    this._suspend.textContent = job.status === 'Suspended' ? 'Resume' : 'Suspend';
    this._suspend.title =
      job.status === 'Suspended'
        ? 'Start the job again (same workspace and environment)'
        : 'Stop the job\'s processes (pods) and keep the job; Resume starts them again';
    // an ended job has nothing to suspend: no greyed button that looks like it could
    this._suspend.hidden = isFinished(job.status) || job.status === 'Deleted';
    this._suspend.disabled = false;
    const label = displayStatus(job);
    setBadge(this._badge, label, statusKey(label));
    const created = job.creation_time
      ? [`${formatTime(job.creation_time)} (`, ageNode(job.creation_time, ' ago'), ')']
      : ['-'];
    const rows: [string, string | (string | Node)[]][] = [
      ['Framework', job.framework || '-'],
      ['Runtime', job.runtime || '-'],
      ['Backend', `${job.backend || this.target.backend}${this.target.namespace ? ` / ${this.target.namespace}` : ''}`],
      ['Shape', formatNodes(job)],
      ['Created', created]
    ];
    const d = formatDuration(job.creation_time, job.completion_time);
    if (d) {
      rows.push(['Duration', d]);
    }
    if (job.steps?.length) {
      // a cancelled job's steps were stopped, not failed: say it as the badge does
      const stepStatus = (st: string): string => (label === 'Cancelled' && st === 'Failed' ? 'Cancelled' : st);
      rows.push(['Steps', job.steps.map(s => `${s.name}: ${stepStatus(s.status)}`).join(', ')]);
    }
    const progress = progressText(job.trainer_status, job.status);
    if (progress) {
      rows.push(['Progress', progress]);
    }
    this._feed.add(job.trainer_status);
    this._chart.setJob(job);
    this._chart.render(this._metrics);
    this._summary.textContent = '';
    for (const [k, v] of rows) {
      this._summary.append(h('dt', {}, k), h('dd', {}, ...(typeof v === 'string' ? [v] : v)));
    }
    this._message.textContent =
      label === 'Cancelled'
        ? job.message || 'The job was cancelled.'
        : failureText(job) ?? [job.reason, job.message].filter(Boolean).join(': ');
    const title = this.parent instanceof MainAreaWidget ? this.parent.title : this.title;
    title.caption = `${this.jobName} (${label})`;
  }

  private _renderEvents(events: IJobEvent[]): void {
    this._lastEvents = events;
    this._renderStartup();
    this._events.textContent = '';
    if (!events.length) {
      this._events.append(h('tr', {}, h('td', { colspan: '4', className: 'kf-empty' }, 'No events.')));
      return;
    }
    for (const ev of events) {
      this._events.append(
        h(
          'tr',
          { className: ev.type === 'Warning' ? 'kf-event-warning' : '' },
          h('td', { title: formatTime(ev.time) }, ageNode(ev.time)),
          h('td', {}, ev.type ?? ''),
          h('td', {}, ev.reason ?? ''),
          h('td', {}, ev.message ?? '')
        )
      );
    }
  }

  /** Bring every relative time in the panel up to now. */
  private _updateAges(): void {
    const now = Date.now();
    for (const el of this.node.querySelectorAll<HTMLElement>('.kf-age')) {
      el.textContent = formatAge(el.dataset.time, now) + (el.dataset.suffix ?? '');
    }
  }

  private _showError(error: unknown): void {
    this._error.hidden = !error;
    this._error.textContent = error ? messageOf(error) : '';
  }

  // ---------------------------------------------------------------- logs

  private _resetLog(): void {
    this._readable = new ReadableLog();
    this._lines.clear();
    this._pending.reset();
    this._metricsChanged = false;
    this._newSource = false;
    this._sources.clear();
    this._metrics.clear();
    this._feed.clear();
    this._log.textContent = '';
    this._live.reset();
    this._log.append(this._live.node);
    this._chart.render(this._metrics);
  }

  /**
   * Take one streamed record. Metrics and sources are updated at once (they
   * are small, and no report may be lost); the line waits in a queue bounded
   * like the view (see logqueue.ts) for the next animation frame.
   */
  private _onRecord(rec: ILogRecord): void {
    // Only what a person reads reaches the log view; reports still feed the chart.
    const at = rec.line.indexOf(PROTOCOL_PREFIX);
    const report: IReport | null = at >= 0 ? parseReport(rec.line.slice(at)) : null;
    if (report) {
      this._metrics.add(report);
      this._metricsChanged = true;
    }
    if (rec.source && !this._sources.has(rec.source)) {
      this._sources.add(rec.source);
      this._newSource = true;
    }
    this._queue(this._readable.push(rec));
  }

  /** A progress bar still held when the log ends is shown as it was left. */
  private _showHeld(): void {
    this._queue(this._readable.finish());
  }

  private _queue(shown: ILogRecord[]): void {
    for (const line of shown) {
      this._pending.push({ rec: line, isReport: false });
    }
    if (!this._flushHandle) {
      this._flushHandle = requestAnimationFrame(() => this._flush());
    }
  }

  /** Apply queued records to the DOM once per frame. */
  private _flush(): void {
    this._flushHandle = 0;
    const batch = this._pending.drain();
    const filter = this._rank.value;
    const frag = document.createDocumentFragment();
    for (const { rec, isReport } of batch) {
      this._lines.push(rec);
      if (filter === ALL || rec.source === filter) {
        frag.append(this._lineNode(rec, isReport));
      }
    }
    this._log.insertBefore(frag, this._live.node);
    this._renderLive();
    this._trimLog();
    if (this._newSource) {
      this._newSource = false;
      this._renderSources();
      this._renderStartup();
    }
    if (this._metricsChanged) {
      this._metricsChanged = false;
      this._chart.render(this._metrics);
    }
    this._renderDropped();
    this._scrollIfFollowing();
  }

  private _lineNode(rec: ILogRecord, isReport: boolean): HTMLDivElement {
    const el = h('div', { className: `kf-log-line${isReport ? ' kf-log-report' : ''}` });
    if (rec.source) {
      const src = h('span', { className: `kf-log-source ${sourceClass(rec.source)}` }, `[${rec.source}] `);
      el.append(src);
    }
    el.append(rec.line);
    return el;
  }

  /** The lines sources are still writing (progress bars), below the finished lines. */
  private _renderLive(): void {
    const filter = this._rank.value;
    this._live.render(
      this._readable.live,
      source => filter === ALL || source === filter,
      rec => this._lineNode(rec, false)
    );
  }

  private _trimLog(): void {
    let extra = this._log.childElementCount - 1 - this.maxLines; // 1: the live lines
    while (extra-- > 0 && this._log.firstChild && this._log.firstChild !== this._live.node) {
      this._log.firstChild.remove();
    }
  }

  private _rebuildLog(): void {
    const filter = this._rank.value;
    const frag = document.createDocumentFragment();
    for (const rec of this._lines.toArray()) {
      if (filter === ALL || rec.source === filter) {
        frag.append(this._lineNode(rec, false));
      }
    }
    this._log.textContent = '';
    this._live.reset();
    this._log.append(frag, this._live.node);
    this._renderLive();
    this._follow.checked = true;
    this._scrollIfFollowing();
  }

  private _renderSources(): void {
    const current = this._rank.value;
    this._rank.textContent = '';
    this._rank.append(h('option', { value: ALL }, 'all sources'));
    for (const src of sortSources(this._sources)) {
      this._rank.append(h('option', { value: src }, src));
    }
    this._rank.value = current === ALL || this._sources.has(current) ? current : ALL;
  }

  private _renderDropped(): void {
    const n = this._lines.dropped + this._pending.dropped;
    this._dropped.hidden = n === 0;
    if (n) {
      this._dropped.textContent = `Showing the last ${this.maxLines} lines (${n} earlier lines hidden); open the full log for all of it.`;
    }
  }

  private _scrollIfFollowing(): void {
    if (!this._follow?.checked || !this.isVisible) {
      return;
    }
    this._log.scrollTop = this._log.scrollHeight;
  }

  private _lines: RingBuffer<ILogRecord>;
  private _pending: LogQueue<IQueued>;
  private _metricsChanged = false;
  private _newSource = false;
  private _flushHandle = 0;
  private _sources = new Set<string>();
  private _startup!: HTMLDivElement;
  private _job: IJob | null = null;
  private _lastEvents: IJobEvent[] = [];
  private _readable = new ReadableLog();
  private _metrics = new MetricSeries();
  private _feed = new TrainerStatusFeed(this._metrics);
  private _jobSub: IJobSubscription | null = null;
  private _logSub: ISubscription | null = null;
  private _started = false;
  private _userScrollUntil = 0;
  private _badge!: HTMLSpanElement;
  private _suspend!: HTMLButtonElement;
  private _status = '';
  private _summary!: HTMLDListElement;
  private _message!: HTMLDivElement;
  private _error!: HTMLDivElement;
  private _chart!: MetricsChart;
  private _rank!: HTMLSelectElement;
  private _follow!: HTMLInputElement;
  private _logState!: HTMLSpanElement;
  private _log!: HTMLDivElement;
  private _ageTimer: number;
  private _live = new LiveLines();
  private _dropped!: HTMLDivElement;
  private _events!: HTMLTableSectionElement;
}

/** Wrap a JobPanel in a MainAreaWidget with the right id, title and icon. */
export function createJobWidget(target: api.ITarget, name: string): MainAreaWidget<JobPanel> {
  const content = new JobPanel(target, name);
  const widget = new MainAreaWidget({ content });
  widget.id = jobWidgetId(target, name);
  widget.title.label = name;
  widget.title.caption = `Kubeflow Trainer job ${name}`;
  widget.title.icon = trainerIcon;
  widget.title.closable = true;
  widget.addClass('kf-JobWidget');
  return widget;
}

export function jobWidgetId(target: api.ITarget, name: string): string {
  const safe = (v: string): string => v.replace(/[^A-Za-z0-9_-]/g, '_');
  return `kf-jupyter-job-${safe(target.backend)}-${safe(target.namespace ?? '')}-${safe(name)}`;
}
