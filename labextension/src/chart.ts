/** A plain-SVG line chart per metric (no chart library). */
import { h, s } from './dom';
import { IJob } from './jobs';
import { chartGeometry, formatMetric, MetricSeries } from './metrics';
import { progressLabel, progressText } from './progress';

const W = 320;
const H = 120;
const PAD = 6;

export class MetricsChart {
  readonly node: HTMLDivElement;

  constructor() {
    this.node = h('div', { className: 'kf-charts', role: 'group', 'aria-label': 'Reported metrics' });
    this._empty = h(
      'div',
      { className: 'kf-empty' },
      'No metrics reported yet (call kf_jupyter.report(step=..., loss=...) in the training function).'
    );
    this._progress = h('progress', { className: 'kf-progress', max: '1', 'aria-label': 'Training progress' });
    this._progressLabel = h('span', { className: 'kf-progress-label' });
    this._progressRow = h('div', { className: 'kf-progress-row', hidden: true }, this._progress, this._progressLabel);
    this._grid = h('div', { className: 'kf-chart-grid' });
    this.node.append(this._progressRow, this._empty, this._grid);
  }

  /**
   * The job's record: its progress (trainer_status), when it has one, is the
   * number shown, the one the sidebar and the job panel show too (issue 22);
   * the log's report markers give it only to a job without a recorded one.
   */
  setJob(job: IJob): void {
    this._job = job;
    this._renderProgress();
  }

  private _renderProgress(): void {
    const job = this._job;
    const recorded = job?.trainer_status?.progress_percentage;
    let value: number | null = null;
    let label = '';
    if (typeof recorded === 'number') {
      value = Math.min(1, Math.max(0, recorded / 100));
      label = progressText(job!.trainer_status, job!.status);
    } else if (this._series?.progress !== null && this._series?.progress !== undefined) {
      value = this._series.progress;
      label = progressLabel(value * 100, null, job?.status);
    }
    this._progressRow.hidden = value === null;
    if (value !== null) {
      this._progress.value = value;
      this._progressLabel.textContent = label;
    }
  }

  render(series: MetricSeries): void {
    this._series = series;
    this._renderProgress();
    const names = series.names();
    this._empty.hidden = names.length > 0;
    this._grid.textContent = '';
    for (const name of names) {
      const pts = series.points(name);
      const g = chartGeometry(pts, W, H, PAD);
      const svg = s('svg', {
        viewBox: `0 0 ${W} ${H}`,
        preserveAspectRatio: 'none',
        class: 'kf-chart-svg',
        role: 'img',
        'aria-label': `${name}: ${pts.length} points, last ${formatMetric(series.last(name) ?? NaN)}`
      });
      svg.append(
        s('rect', { x: 0, y: 0, width: W, height: H, class: 'kf-chart-bg' }),
        s('line', { x1: PAD, y1: H - PAD, x2: W - PAD, y2: H - PAD, class: 'kf-chart-axis' }),
        s('line', { x1: PAD, y1: PAD, x2: PAD, y2: H - PAD, class: 'kf-chart-axis' })
      );
      const path = s('path', { d: g.path, class: 'kf-chart-line', 'vector-effect': 'non-scaling-stroke' });
      svg.append(path);
      if (pts.length === 1) {
        const m = /^M([\d.-]+),([\d.-]+)/.exec(g.path);
        if (m) {
          svg.append(s('circle', { cx: m[1], cy: m[2], r: 3, class: 'kf-chart-dot' }));
        }
      }
      const last = series.last(name);
      const card = h(
        'figure',
        { className: 'kf-chart' },
        h(
          'figcaption',
          {},
          h('span', { className: 'kf-chart-name' }, name),
          h('span', { className: 'kf-chart-last' }, last === undefined ? '' : formatMetric(last))
        ),
        h(
          'div',
          { className: 'kf-chart-body' },
          h('div', { className: 'kf-chart-y' }, h('span', {}, formatMetric(g.yMax)), h('span', {}, formatMetric(g.yMin))),
          svg
        ),
        h(
          'div',
          { className: 'kf-chart-x' },
          h('span', {}, `step ${formatMetric(pts[0]?.step ?? 0)}`),
          h('span', {}, `step ${formatMetric(pts[pts.length - 1]?.step ?? 0)}`)
        )
      );
      this._grid.append(card);
    }
  }

  private _job: IJob | null = null;
  private _series: MetricSeries | null = null;
  private _empty: HTMLDivElement;
  private _progress: HTMLProgressElement;
  private _progressLabel: HTMLSpanElement;
  private _progressRow: HTMLDivElement;
  private _grid: HTMLDivElement;
}
