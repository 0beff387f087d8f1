/**
 * The lab's compare panel: the jobs selected in the sidebar's job list,
 * their metric curves overlaid (one chart per metric, one line per job) and
 * a table of each job's status, duration and last values. Every job is
 * followed over the page's one update socket, so the panel of running jobs
 * keeps drawing; the same view as `%kf_compare` in a notebook.
 */
import { MainAreaWidget } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import * as api from './api';
import { h } from './dom';
import { formatDuration } from './jobs';
import { labelKey, statusLabel } from './livepayload';
import { formatMetric } from './metrics';
import { OverlayCharts, overlayMetrics, swatch } from './overlay';
import { RunFeed } from './runfeed';
import { trainerIcon } from './icon';

export class ComparePanel extends Widget {
  constructor(
    readonly target: api.ITarget,
    readonly jobNames: string[]
  ) {
    super();
    this.addClass('kf-ComparePanel');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', `Comparison of ${jobNames.join(', ')}`);
    this._table = h('table', { className: 'kf-compare-table kf-table' });
    this._charts = new OverlayCharts('None of these jobs has reported a metric yet.');
    const where = `${target.backend}${target.namespace ? ` / ${target.namespace}` : ''}`;
    this.node.append(
      h('h2', { className: 'kf-compare-title' }, `Comparing ${jobNames.length} jobs · ${where}`),
      this._table,
      this._charts.node
    );
    for (const name of jobNames) {
      const feed = new RunFeed(target, name, [], () => this._schedule());
      this._feeds.push(feed);
      feed.start();
    }
    this._render();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    for (const f of this._feeds) {
      f.close();
    }
    if (this._frame) {
      cancelAnimationFrame(this._frame);
    }
    super.dispose();
  }

  private _schedule(): void {
    if (!this._frame) {
      this._frame = requestAnimationFrame(() => {
        this._frame = 0;
        this._render();
      });
    }
  }

  private _render(): void {
    if (this.isDisposed) {
      return;
    }
    const runs = this._feeds.map((f, i) => ({ key: f.name, label: f.name, colour: i, series: f.curves() }));
    const metrics = overlayMetrics(runs);
    const head = h('tr', {}, ...['job', 'status', 'took', ...metrics.map(m => `${m} (last)`)].map(c => h('th', { scope: 'col' }, c)));
    const body = h('tbody');
    this._feeds.forEach((f, i) => {
      const job = f.job;
      const label = job ? statusLabel(job) : f.error ? 'Unknown' : '…';
      const took = job ? formatDuration(job.creation_time, job.completion_time ?? new Date().toISOString()) : '';
      const badge = h('span', { className: `kf-badge kf-badge-${labelKey(label)}`, title: f.error || `Status: ${label}` }, label);
      body.append(
        h(
          'tr',
          { className: 'kf-compare-row', 'data-job': f.name },
          h('td', {}, swatch(i), h('code', {}, f.name)),
          h('td', {}, badge),
          h('td', {}, took),
          ...metrics.map(m => {
            const last = runs[i].series.last(m);
            return h('td', {}, last === undefined ? '' : formatMetric(last));
          })
        )
      );
    });
    this._table.textContent = '';
    this._table.append(h('thead', {}, head), body);
    this._charts.render(runs);
  }

  private _feeds: RunFeed[] = [];
  private _frame = 0;
  private _table: HTMLTableElement;
  private _charts: OverlayCharts;
}

/** The panel in a main-area tab. */
export function createCompareWidget(target: api.ITarget, names: string[]): MainAreaWidget<ComparePanel> {
  const content = new ComparePanel(target, names);
  const widget = new MainAreaWidget({ content });
  widget.id = `kf-jupyter-compare-${Date.now().toString(36)}`;
  widget.title.label = `Compare ${names.length} jobs`;
  widget.title.caption = `Compare ${names.join(', ')}`;
  widget.title.icon = trainerIcon;
  widget.title.closable = true;
  widget.addClass('kf-CompareWidget');
  return widget;
}
