/**
 * The live job monitor inside a notebook cell's output: a MIME renderer of
 * `application/vnd.kf-jupyter.job+json` (what a training cell displays).
 *
 * It talks to the server extension's authenticated routes, not to the kernel,
 * so its rank filter and Cancel work while the cell that follows the job
 * blocks the kernel (ipykernel delivers widget messages of a busy cell only
 * when it ends). Status and logs arrive over the page's one update socket
 * (api.streamHub(), kf-jupyter/api/stream), shared by every monitor and job
 * panel; Cancel: `POST jobs/{name}/cancel`, which refuses an ended job;
 * Suspend/Resume: `POST jobs/{name}/suspend|resume`.
 * The rank filter is applied in the browser. When the job ends the kernel
 * replaces this output with a static rendering (plain HTML); a reopened
 * notebook whose job still runs re-attaches here by the job's name.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import * as api from './api';
import { MetricsChart } from './chart';
import { h } from './dom';
import { FollowTracker } from './follow';
import { formatDuration, IJob, IJobEvent, startupText } from './jobs';
import { ISubscription, IJobSubscription } from './stream';
import {
  canCancel,
  failureText,
  IJobPayload,
  JOB_MIME_TYPE,
  labelKey,
  parsePayload,
  statusLabel
} from './livepayload';
import { LiveLines } from './livelines';
import { ILogRecord, PROTOCOL_PREFIX, ReadableLog, sortSources } from './logparse';
import { MetricSeries, parseReport } from './metrics';
import { sourceClass } from './palette';
import { RingBuffer } from './ringbuffer';

/** Lines kept in the monitor's log view. */
export const LIVE_MAX_LINES = 1000;
/** Status poll period while the job runs. */
const POLL_MS = 1000;
const ALL = '';
const RESULT_MARK = '##kf-jupyter:result ';

export type OpenPanel = (target: api.ITarget, name: string) => void;

export class LiveMonitor extends Widget implements IRenderMime.IRenderer {
  constructor(private readonly _openPanel: OpenPanel | null = null) {
    super();
    this.addClass('kf-LiveMonitor');
    this._lines = new RingBuffer<ILogRecord>(LIVE_MAX_LINES);
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const { payload, error } = parsePayload(model.data[JOB_MIME_TYPE]);
    if (!payload) {
      this.node.textContent = `kf-jupyter: cannot show this job monitor (${error}).`;
      return;
    }
    if (this._payload && this._payload.name === payload.name) {
      return; // same job: keep the live view (outputs are re-rendered on some model changes)
    }
    this._stop();
    this._payload = payload;
    this._target = { backend: payload.backend, namespace: payload.namespace };
    this._build(payload);
    this._watch();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._follow?.scroll();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    this._follow?.scroll();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._resize?.disconnect();
    this._stop();
    super.dispose();
  }

  private _stop(): void {
    this._jobSub?.close();
    this._jobSub = null;
    this._logSub?.close();
    this._logSub = null;
    if (this._flushHandle) {
      cancelAnimationFrame(this._flushHandle);
      this._flushHandle = 0;
    }
  }

  // ---------------------------------------------------------------- layout

  private _build(p: IJobPayload): void {
    this.node.textContent = '';
    this.node.dataset.job = p.name;
    this._badge = h('span', { className: 'kf-badge kf-badge-unknown kf-live-status' }, '…');
    this._elapsed = h('span', { className: 'kf-live-elapsed' });
    this._filter = h('select', { className: 'kf-select jp-mod-styled kf-live-filter', 'aria-label': 'Show logs of' });
    this._filter.append(h('option', { value: ALL }, 'all ranks'));
    this._filter.addEventListener('change', () => this._rebuildLog());
    this._cancel = h(
      'button',
      { className: 'jp-Button jp-mod-styled jp-mod-warn kf-live-cancel', title: 'Stop the job (its record and logs stay)' },
      'Cancel'
    );
    this._cancel.hidden = true; // shown once the backend says the job can be cancelled
    this._cancel.addEventListener('click', () => void this._onCancel());
    this._suspend = h(
      'button',
      { className: 'jp-Button jp-mod-styled kf-live-suspend', type: 'button' },
      'Suspend'
    );
    this._suspend.hidden = true;
    this._suspend.addEventListener('click', () => void this._onSuspend());
    const where = `${p.backend}${p.namespace ? ` / ${p.namespace}` : ''}${p.runtime ? ` · runtime ${p.runtime}` : ''}`;
    const head = h(
      'div',
      { className: 'kf-live-header' },
      h('b', { className: 'kf-live-name', title: p.name }, p.name),
      h('span', { className: 'kf-live-where', title: where }, ` · ${where} · `),
      this._badge,
      ' ',
      this._elapsed,
      h('span', { className: 'kf-live-spacer' }),
      this._filter,
      this._suspend,
      this._cancel
    );
    if (this._openPanel) {
      const open = h('button', { className: 'jp-Button jp-mod-styled kf-live-open', title: 'Open the job panel (logs, events)' }, 'Panel');
      open.addEventListener('click', () => this._openPanel?.(this._target, p.name));
      head.append(open);
    }
    this._notice = h('div', { className: 'kf-live-notice', role: 'status', hidden: true });
    this._failure = h('pre', { className: 'kf-live-failure', role: 'alert', hidden: true });
    this._chart = new MetricsChart();
    this._chart.node.hidden = true;
    this._log = h('div', { className: 'kf-log kf-live-log', role: 'log', tabindex: '0', 'aria-label': `Log of ${p.name}` });
    this._log.append(this._live.node);
    // What happens before the first line (starting ranks, warm or cold, ...): never a silent
    // "Running" over an empty log.
    this._startup = h('div', { className: 'kf-live-startup', role: 'status' });
    this._startup.hidden = true;
    this._result = h('div', { className: 'kf-live-result', role: 'status' });
    this._result.hidden = true;
    this._followBox = h('input', { type: 'checkbox', className: 'kf-live-follow', 'aria-label': 'Follow the end of the log' });
    this._followBox.checked = true;
    this._follow = new FollowTracker(this._log, following => {
      this._followBox.checked = following;
    });
    this._followBox.addEventListener('change', () => this._follow.set(this._followBox.checked));
    // Follow ticked means the view is at the end: a scroll made while the output was not laid
    // out yet (a reload, the notebook opening, a suspend's replay) had no effect and left a
    // ticked Follow over a view at the top. Scroll again whenever the log's size changes.
    if (typeof ResizeObserver !== 'undefined') {
      this._resize = new ResizeObserver(() => this._follow.scroll());
      this._resize.observe(this._log);
    }
    this._logState = h('span', { className: 'kf-log-state' });
    const foot = h(
      'div',
      { className: 'kf-live-footer' },
      h('label', { className: 'kf-label-inline' }, this._followBox, ' Follow'),
      ' ',
      h(
        'a',
        { className: 'kf-link', href: api.fullLogUrl(this._target, p.name), target: '_blank', rel: 'noopener' },
        'Full log'
      ),
      ' ',
      this._logState
    );
    this.node.append(head, this._notice, this._failure, this._result, this._chart.node, this._startup, this._log, foot);
  }

  // ---------------------------------------------------------------- status

  /** Subscribe to the job's record and log over the page's one update socket. */
  private _watch(): void {
    const hub = api.streamHub();
    const name = this._payload!.name;
    this._jobSub = hub.watchJob(this._target, name, { intervalMs: POLL_MS, events: true }, {
      onJob: job => {
        this._showJob(job);
        this._note('');
      },
      onEvents: events => {
        this._events = events;
        this._renderStartup();
      },
      onError: (err, final) => {
        if (final) {
          this._job = null;
          this._setBadge('Deleted');
          this._showControls();
          this._note(
            `The Jupyter server has no job ${name} (deleted, or started with another ` +
              'kubeconfig or job store): this view cannot follow it. The kernel still shows the ' +
              'final state when the cell ends.'
          );
          return;
        }
        this._note(`Status unavailable (${err.message}); retrying.`);
      }
    });
    this._logSub = hub.watchLogs(this._target, name, LIVE_MAX_LINES, {
      onStart: () => {
        this._resetLog(); // a (re)subscription replays the tail
        this._logState.textContent = 'streaming…';
      },
      onRecords: records => {
        for (const rec of records) {
          this._onRecord(rec);
        }
      },
      onEnd: () => {
        for (const held of this._readable.finish()) {
          this._onRecord(held); // a progress bar still held: shown as it was left
        }
        this._logState.textContent = 'job ended; log complete';
      },
      onError: (err, retryMs) => {
        if (err.status === 404) {
          this._logState.textContent = '';
          return;
        }
        this._logState.textContent =
          retryMs === null ? `log stream failed (${err.message})` : `log stream failed (${err.message}); retrying`;
      }
    });
  }

  private _showJob(job: IJob): void {
    this._job = job;
    this._setBadge(statusLabel(job));
    this._showControls();
    this._chart.setJob(job);
    if (typeof job.trainer_status?.progress_percentage === 'number') {
      this._chart.node.hidden = false;
    }
    this._elapsed.textContent = formatDuration(job.creation_time, job.completion_time ?? new Date().toISOString());
    const cause = failureText(job);
    this._failure.hidden = !cause;
    this._failure.textContent = cause;
    this._renderStartup();
  }

  /**
   * Until the first line arrives: what the job is doing (the backend's phase from the ranks'
   * own events: starting, warm or cold and why, importing the framework, waiting at rendezvous;
   * see startupText). Hidden once a line arrived and whenever the job is not Created or Running.
   */
  private _renderStartup(): void {
    const text = this._sources.size === 0 ? startupText(this._job, this._events) : null;
    this._startup.hidden = text === null;
    if (text !== null && this._startup.textContent !== text) {
      this._startup.textContent = text;
    }
  }

  /** Cancel and Suspend/Resume only while they can act (hidden, not greyed, otherwise). */
  private _showControls(): void {
    const job = this._job;
    this._cancel.hidden = !canCancel(job);
    this._cancel.disabled = this._cancelling;
    const suspended = job?.status === 'Suspended';
    this._suspend.hidden = !job || !(suspended || job.status === 'Running' || job.status === 'Created');
    this._suspend.disabled = this._suspending;
    if (!this._suspending) {
      this._suspend.textContent = suspended ? 'Resume' : 'Suspend';
    }
    this._suspend.title = suspended
      ? 'Start the job again (its program starts from the beginning unless it resumes from a checkpoint)'
      : "Stop the job's processes and keep the job; Resume starts them again";
  }

  private async _onSuspend(): Promise<void> {
    if (!this._job) {
      return;
    }
    const suspend = this._job.status !== 'Suspended';
    this._suspending = true;
    this._suspend.disabled = true;
    this._suspend.textContent = suspend ? 'Suspending…' : 'Resuming…';
    try {
      await api.setSuspended(this._target, this._payload!.name, suspend);
      this._note('');
    } catch (e) {
      this._note(`${suspend ? 'Suspend' : 'Resume'} failed: ${(e as Error).message ?? e}`);
    } finally {
      this._suspending = false;
      this._jobSub?.refresh();
      this._showControls();
    }
  }

  private _setBadge(label: string): void {
    this._badge.textContent = label;
    this._badge.className = `kf-badge kf-badge-${labelKey(label)} kf-live-status`;
    this._badge.title = `Status (from the backend): ${label}`;
  }

  private _note(text: string): void {
    this._notice.hidden = !text;
    this._notice.textContent = text;
  }

  private async _onCancel(): Promise<void> {
    if (!this._job || !canCancel(this._job)) {
      return;
    }
    this._cancelling = true;
    this._cancel.disabled = true;
    this._cancel.textContent = 'Cancelling…';
    this._suspend.hidden = true;
    try {
      const result = await api.cancelJob(this._target, this._payload!.name);
      this._showJob(result.job);
      this._note(result.cancelled ? '' : result.message);
    } catch (e) {
      this._note(`Cancel failed: ${(e as Error).message ?? e}`);
    } finally {
      this._cancelling = false;
      this._cancel.textContent = 'Cancel';
      this._showControls();
    }
  }

  // ---------------------------------------------------------------- logs

  private _resetLog(): void {
    this._result.hidden = true;
    this._readable = new ReadableLog();
    this._lines.clear();
    this._pending = [];
    this._sources.clear();
    this._metrics.clear();
    this._log.textContent = '';
    this._live.reset();
    this._log.append(this._live.node);
  }

  private _onRecord(rec: ILogRecord): void {
    this._pending.push(rec);
    if (!this._flushHandle) {
      this._flushHandle = requestAnimationFrame(() => this._flush());
    }
  }

  private _flush(): void {
    this._flushHandle = 0;
    const batch = this._pending;
    this._pending = [];
    const filter = this._filter.value;
    const frag = document.createDocumentFragment();
    let metricsChanged = false;
    let newSource = false;
    // Only what a person reads reaches the log view (logparse.ts ReadableLog: protocol lines,
    // torchrun's banner and dump hidden, one line per progress bar); reports feed the chart.
    const shown: ILogRecord[] = [];
    for (const raw of batch) {
      const at = raw.line.indexOf(PROTOCOL_PREFIX);
      if (at >= 0 && raw.line.startsWith(RESULT_MARK, at)) {
        // the training function's return value: what the cell gives back, shown once it ended
        this._result.hidden = false;
        this._result.textContent = `Result (rank 0's return value): ${raw.line.slice(at + RESULT_MARK.length)}`;
      }
      if (at >= 0) {
        const report = parseReport(raw.line.slice(at));
        if (report) {
          this._metrics.add(report);
          metricsChanged = true;
        }
      }
      shown.push(...this._readable.push(raw));
      // every source that wrote (a rank showing only a progress bar too) is in the filter
      if (raw.source && !this._sources.has(raw.source)) {
        this._sources.add(raw.source);
        newSource = true;
      }
    }
    for (const rec of shown) {
      this._lines.push(rec);
      if (filter === ALL || rec.source === filter) {
        frag.append(this._lineNode(rec));
      }
    }
    this._log.insertBefore(frag, this._live.node);
    this._renderLive();
    let extra = this._log.childElementCount - 1 - LIVE_MAX_LINES; // 1: the live lines
    while (extra-- > 0 && this._log.firstChild && this._log.firstChild !== this._live.node) {
      this._log.firstChild.remove();
    }
    if (newSource) {
      this._renderSources();
      this._renderStartup();
    }
    if (metricsChanged) {
      this._chart.node.hidden = false;
      this._chart.render(this._metrics);
    }
    this._follow.scroll();
  }

  private _lineNode(rec: ILogRecord): HTMLDivElement {
    const el = h('div', { className: 'kf-log-line' });
    if (rec.source) {
      el.dataset.source = rec.source;
      const src = h('span', { className: `kf-log-source ${sourceClass(rec.source)}` }, `[${rec.source}] `);
      el.append(src);
    }
    el.append(rec.line);
    return el;
  }

  private _rebuildLog(): void {
    const filter = this._filter.value;
    const frag = document.createDocumentFragment();
    for (const rec of this._lines.toArray()) {
      if (filter === ALL || rec.source === filter) {
        frag.append(this._lineNode(rec));
      }
    }
    this._log.textContent = '';
    this._live.reset();
    this._log.append(frag, this._live.node);
    this._renderLive();
    this._follow.set(true);
  }

  /** The lines ranks are still writing (progress bars), below the finished lines. */
  private _renderLive(): void {
    const filter = this._filter.value;
    this._live.render(
      this._readable.live,
      source => filter === ALL || source === filter,
      rec => this._lineNode(rec)
    );
  }

  private _renderSources(): void {
    const current = this._filter.value;
    this._filter.textContent = '';
    this._filter.append(h('option', { value: ALL }, 'all ranks'));
    for (const src of sortSources(this._sources)) {
      this._filter.append(h('option', { value: src }, src));
    }
    this._filter.value = current === ALL || this._sources.has(current) ? current : ALL;
  }

  private _payload: IJobPayload | null = null;
  private _target: api.ITarget = { backend: 'local' };
  private _job: IJob | null = null;
  private _cancelling = false;
  private _suspending = false;
  private _jobSub: IJobSubscription | null = null;
  private _logSub: ISubscription | null = null;
  private _flushHandle = 0;
  private _lines: RingBuffer<ILogRecord>;
  private _readable = new ReadableLog();
  private _pending: ILogRecord[] = [];
  private _sources = new Set<string>();
  private _metrics = new MetricSeries();
  private _badge!: HTMLSpanElement;
  private _elapsed!: HTMLSpanElement;
  private _filter!: HTMLSelectElement;
  private _cancel!: HTMLButtonElement;
  private _suspend!: HTMLButtonElement;
  private _notice!: HTMLDivElement;
  private _failure!: HTMLPreElement;
  private _chart!: MetricsChart;
  private _log!: HTMLDivElement;
  private _live = new LiveLines();
  private _followBox!: HTMLInputElement;
  private _follow!: FollowTracker;
  private _logState!: HTMLSpanElement;
  private _startup!: HTMLDivElement;
  private _events: IJobEvent[] = [];
  private _resize: ResizeObserver | null = null;
  private _result!: HTMLDivElement;
}

/**
 * The renderer factory. Rank -20: ahead of the ipywidget view (-10) that the
 * same output also carries for frontends without this extension.
 */
export function liveMonitorFactory(openPanel: OpenPanel | null): IRenderMime.IRendererFactory {
  return {
    safe: true, // renders text only (textContent), fetches from this server; acts only on a click
    mimeTypes: [JOB_MIME_TYPE],
    defaultRank: -20,
    createRenderer: () => new LiveMonitor(openPanel)
  };
}
