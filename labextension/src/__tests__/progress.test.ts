import { isFinished, statusKey } from '../jobs';
import { MetricSeries, parseReport } from '../metrics';
import { formatEta, numericMetrics, progressLabel, progressText, TrainerStatusFeed } from '../progress';

describe('progress texts', () => {
  it('formats the ETA for a narrow column', () => {
    expect([null, 5, 65, 7800].map(formatEta)).toEqual(['', '5s', '1m 05s', '2h 10m']);
  });
  it('says progress and ETA, either alone, or nothing', () => {
    expect(progressText({ progress_percentage: 45, estimated_remaining_seconds: 185 })).toBe('45% \u00b7 ETA 3m 05s');
    expect(progressText({ progress_percentage: 7 })).toBe('7%');
    expect(progressText({ estimated_remaining_seconds: 30 })).toBe('ETA 30s');
    expect(progressText(null)).toBe('');
  });
  it('keeps only numeric metrics', () => {
    expect(numericMetrics({ metrics: { loss: '0.5', note: 'warm-up', empty: '', inf: 'Infinity' } })).toEqual({ loss: 0.5 });
  });
});

describe('TrainerStatusFeed', () => {
  const at = (s: number): string => `2026-12-01T10:00:${String(s).padStart(2, '0')}Z`;

  it('adds one point per update, at the reported step', () => {
    const series = new MetricSeries();
    const feed = new TrainerStatusFeed(series);
    expect(feed.add({ progress_percentage: 20, metrics: { loss: '2', current_step: '2', total_steps: '10' }, last_updated_time: at(1) })).toBe(true);
    expect(feed.add({ progress_percentage: 20, metrics: { loss: '2', current_step: '2', total_steps: '10' }, last_updated_time: at(1) })).toBe(false);
    feed.add({ progress_percentage: 40, metrics: { loss: '1.5', current_step: '4' }, last_updated_time: at(6) });
    expect(series.names()).toEqual(['loss']);
    expect(series.points('loss')).toEqual([{ step: 2, value: 2 }, { step: 4, value: 1.5 }]);
    expect(series.progress).toBe(0.4);
  });

  it('takes a last status that shares its whole second with the one before', () => {
    // lastUpdatedTime keeps whole seconds: a short job's first report and its last (sent at
    // exit) share it; the feed must not keep the first as the job's final state.
    const series = new MetricSeries();
    const feed = new TrainerStatusFeed(series);
    feed.add({ progress_percentage: 3, metrics: { loss: '0.66', step: '0' }, last_updated_time: at(7) });
    expect(feed.add({ progress_percentage: 100, metrics: { loss: '0.2', step: '29' }, last_updated_time: at(7) })).toBe(true);
    expect(series.progress).toBe(1);
    expect(series.points('loss')).toEqual([{ step: 0, value: 0.66 }, { step: 29, value: 0.2 }]);
  });

  it('leaves to the log report lines what they carry', () => {
    const series = new MetricSeries();
    series.add(parseReport('##kf-jupyter:report {"step": 5, "progress": 0.5, "metrics": {"loss": 1.0}}')!);
    const feed = new TrainerStatusFeed(series);
    feed.add({ progress_percentage: 45, metrics: { loss: '1.2', lr: '0.01', step: '5' }, last_updated_time: at(1) });
    expect(series.points('loss')).toEqual([{ step: 5, value: 1 }]);
    expect(series.points('lr')).toEqual([{ step: 5, value: 0.01 }]);
    expect(series.progress).toBe(0.5);
  });
});

describe('Suspended', () => {
  it('is a known status with its own badge, not a finished one', () => {
    expect(statusKey('Suspended')).toBe('suspended');
    expect(isFinished('Suspended')).toBe(false);
  });
});

describe('one way to write progress (issue 22)', () => {
  it('no ETA on a suspended or ended job, never 100% with an ETA', () => {

    expect(progressLabel(45, 185, 'Running')).toBe('45% \u00b7 ETA 3m 05s');
    expect(progressLabel(100, 0, 'Running')).toBe('100%');
    expect(progressLabel(100, 4, 'Running')).toBe('100%');
    expect(progressLabel(45, 185, 'Suspended')).toBe('45%');
    expect(progressLabel(45, 185, 'Complete')).toBe('45%');
    expect(progressLabel(45, 185, 'Failed')).toBe('45%');
  });
});
