/**
 * The live view of a hyperparameter sweep in a cell's output: a MIME renderer
 * of `application/vnd.kf-jupyter.sweep+json` (what a `%%torchtrain --sweep`
 * cell displays; kf_jupyter/widgets/sweep.py writes it).
 *
 * A table of trials (parameters, status, objective, duration; the best one
 * marked) and every trial's curves overlaid. Each trial's job is followed
 * over the page's one update socket (api.streamHub()), however many trials
 * there are. The kernel updates the payload as trials start and finish (the
 * output is re-rendered in place: new trials are added, the rest keep their
 * subscriptions). The best trial is recomputed on every update, only among
 * trials that completed with a finite objective value, the rule the kernel's
 * static view follows.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import * as api from './api';
import { h } from './dom';
import { formatDuration, IJob } from './jobs';
import { labelKey, statusLabel } from './livepayload';
import { formatMetric } from './metrics';
import { OverlayCharts, swatch } from './overlay';
import { RunFeed } from './runfeed';
import { bestTrial, curveObjective, ISweepPayload, ITrialPayload, parseSweepPayload, SWEEP_MIME_TYPE } from './sweepmodel';

export { SWEEP_MIME_TYPE } from './sweepmodel';

export class LiveSweep extends Widget implements IRenderMime.IRenderer {
  constructor() {
    super();
    this.addClass('kf-LiveSweep');
  }

  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const { payload, error } = parseSweepPayload(model.data[SWEEP_MIME_TYPE]);
    if (!payload) {
      this.node.textContent = `kf-jupyter: cannot show this sweep (${error}).`;
      return;
    }
    if (!this._payload || this._payload.name !== payload.name) {
      this._stop();
      this._build(payload);
    }
    this._payload = payload;
    const target: api.ITarget = { backend: payload.backend, namespace: payload.namespace };
    for (const t of payload.trials) {
      if (!this._feeds.has(t.job)) {
        const feed = new RunFeed(target, t.job, [payload.objective.metric], () => this._schedule());
        this._feeds.set(t.job, feed);
        feed.start();
      }
    }
    this._render();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._stop();
    super.dispose();
  }

  private _stop(): void {
    for (const f of this._feeds.values()) {
      f.close();
    }
    this._feeds.clear();
    if (this._frame) {
      cancelAnimationFrame(this._frame);
      this._frame = 0;
    }
  }

  private _build(p: ISweepPayload): void {
    this.node.textContent = '';
    this.node.dataset.sweep = p.name;
    this._badge = h('span', { className: 'kf-badge kf-sweep-status' });
    this._counts = h('span', { className: 'kf-sweep-counts' });
    this._best = h('div', { className: 'kf-sweep-best', role: 'status' });
    this._table = h('table', { className: 'kf-sweep-table kf-table' });
    this._charts = new OverlayCharts('No trial has reported a metric yet.');
    const where = `${p.backend}${p.namespace ? ` / ${p.namespace}` : ''}`;
    this.node.append(
      h(
        'div',
        { className: 'kf-live-header' },
        h('b', { className: 'kf-live-name' }, p.name),
        h('span', { className: 'kf-live-where' }, ` · sweep · ${where} · `),
        this._badge,
        ' ',
        this._counts
      ),
      this._best,
      this._table,
      this._charts.node
    );
  }

  private _schedule(): void {
    if (!this._frame) {
      this._frame = requestAnimationFrame(() => {
        this._frame = 0;
        this._render();
      });
    }
  }

  /** The trial's status: its job's record when the page has it, else what the kernel said. */
  private _trialStatus(t: ITrialPayload, job: IJob | null): string {
    if (job) {
      return statusLabel(job);
    }
    return t.status || 'Created';
  }

  private _render(): void {
    const p = this._payload;
    if (!p || this.isDisposed) {
      return;
    }
    const { metric, direction } = p.objective;
    const rows = p.trials.map((t, i) => {
      const feed = this._feeds.get(t.job)!;
      const curves = feed.curves();
      const status = this._trialStatus(t, feed.job);
      // the optimizer's value once the kernel has it; the curve's (same rule) until then
      const objective =
        typeof t.objective === 'number' && Number.isFinite(t.objective)
          ? t.objective
          : curveObjective(curves, metric, direction);
      return { t, i, feed, curves, status, objective };
    });
    const best = bestTrial(
      rows.map(r => ({ name: r.t.name, status: r.status, objective: r.objective })),
      direction
    );
    // the sweep's badge: the kernel's word, except that it is still running while a trial runs
    const running = rows.some(r => r.status === 'Running' || r.status === 'Created');
    const sweepStatus = running && (p.status === 'Complete' || p.status === '') ? 'Running' : p.status || 'Running';
    this._badge.textContent = sweepStatus;
    this._badge.className = `kf-badge kf-badge-${labelKey(sweepStatus)} kf-sweep-status`;
    const counts = new Map<string, number>();
    for (const r of rows) {
      counts.set(r.status, (counts.get(r.status) ?? 0) + 1);
    }
    this._counts.textContent = `${rows.length} trials (${Array.from(counts.entries())
      .sort()
      .map(([s, n]) => `${n} ${s.toLowerCase()}`)
      .join(', ')})`;
    const bestRow = rows.find(r => r.t.name === best);
    this._best.textContent = bestRow
      ? `best ${bestRow.t.name}: ${metric} ${formatMetric(bestRow.objective!)} (${Object.entries(bestRow.t.parameters)
          .map(([k, v]) => `${k}=${v}`)
          .join(', ')})`
      : 'no trial has completed with a value yet';

    const params: string[] = [];
    for (const r of rows) {
      for (const k of Object.keys(r.t.parameters)) {
        if (!params.includes(k)) {
          params.push(k);
        }
      }
    }
    const arrow = direction === 'minimize' ? '↓' : '↑';
    const head = h('tr', {}, ...['trial', ...params, 'status', `${metric} ${arrow}`, 'took'].map(c => h('th', { scope: 'col' }, c)));
    const body = h('tbody');
    for (const r of rows) {
      const isBest = r.t.name === best;
      const nameCell = h('td', {}, swatch(r.i), h('code', {}, r.t.name));
      if (isBest) {
        nameCell.append(' ', h('b', { className: 'kf-best-mark' }, '★ best'));
      }
      let objective = r.objective === null ? '' : formatMetric(r.objective);
      if (r.status === 'Failed') {
        objective = r.objective === null ? 'failed' : `${objective} (failed)`;
      } else if (r.status === 'Complete' && r.objective === null) {
        objective = '—';
      }
      const job = r.feed.job;
      const took = job ? formatDuration(job.creation_time, job.completion_time ?? new Date().toISOString()) : '';
      body.append(
        h(
          'tr',
          {
            className: isBest ? 'kf-trial kf-best' : 'kf-trial',
            'data-trial': r.t.name,
            'data-job': r.t.job,
            'data-status': r.status
          },
          nameCell,
          ...params.map(k => h('td', {}, r.t.parameters[k] ?? '')),
          h('td', {}, h('span', { className: `kf-badge kf-badge-${labelKey(r.status)}` }, r.status)),
          h('td', { className: 'kf-objective' }, objective),
          h('td', {}, took)
        )
      );
    }
    this._table.textContent = '';
    this._table.append(h('thead', {}, head), body);
    this._charts.render(
      rows.map(r => ({
        key: r.t.job,
        label: r.t.name,
        colour: r.i,
        series: r.curves,
        highlight: r.t.name === best
      }))
    );
  }

  private _payload: ISweepPayload | null = null;
  private _feeds = new Map<string, RunFeed>();
  private _frame = 0;
  private _badge!: HTMLSpanElement;
  private _counts!: HTMLSpanElement;
  private _best!: HTMLDivElement;
  private _table!: HTMLTableElement;
  private _charts!: OverlayCharts;
}

/** The renderer factory (rank -20, as the job monitor's). */
export function liveSweepFactory(): IRenderMime.IRendererFactory {
  return {
    safe: true, // renders text only (textContent), reads from this server
    mimeTypes: [SWEEP_MIME_TYPE],
    defaultRank: -20,
    createRenderer: () => new LiveSweep()
  };
}
