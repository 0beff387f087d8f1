import { chartGeometry, MetricSeries } from '../metrics';
import { overlayGeometry, stdoutMetric } from '../overlay';
import { bestTrial, curveObjective, parseSweepPayload } from '../sweepmodel';

describe('bestTrial', () => {
  it('is recomputed only among completed trials with a finite value', () => {
    const trials = [
      { name: 't1', status: 'Running', objective: 0.1 },
      { name: 't2', status: 'Complete', objective: 0.5 },
      { name: 't3', status: 'Failed', objective: 0.05 },
      { name: 't4', status: 'Complete', objective: null }
    ];
    expect(bestTrial(trials, 'minimize')).toBe('t2');
    trials[0].status = 'Complete';
    expect(bestTrial(trials, 'minimize')).toBe('t1');
    expect(bestTrial(trials, 'maximize')).toBe('t2');
    expect(bestTrial([{ name: 'a', status: 'Running', objective: 1 }], 'minimize')).toBeNull();
  });
  it('gives a tie to the earlier trial', () => {
    const trials = [
      { name: 'a', status: 'Complete', objective: 1 },
      { name: 'b', status: 'Complete', objective: 1 }
    ];
    expect(bestTrial(trials, 'minimize')).toBe('a');
    expect(bestTrial(trials, 'maximize')).toBe('a');
  });
});

describe('curveObjective', () => {
  it('reads the lowest value when minimizing and the highest when maximizing', () => {
    const s = new MetricSeries();
    [0.9, 0.2, 0.4].forEach((v, step) => s.add({ step, metrics: { loss: v } }));
    expect(curveObjective(s, 'loss', 'minimize')).toBe(0.2);
    expect(curveObjective(s, 'loss', 'maximize')).toBe(0.9);
    expect(curveObjective(s, 'acc', 'maximize')).toBeNull();
  });
});

describe('parseSweepPayload', () => {
  const good = {
    version: 1,
    name: 's',
    backend: 'local',
    namespace: null,
    status: 'Running',
    objective: { metric: 'loss', direction: 'minimize' },
    trials: [{ name: 't1', job: 'j1', parameters: { lr: '0.1' } }, { bad: true }]
  };
  it('keeps well-formed trials', () => {
    const { payload } = parseSweepPayload(good);
    expect(payload!.trials.map(t => t.job)).toEqual(['j1']);
  });
  it('refuses unknown versions and objectives', () => {
    expect(parseSweepPayload({ ...good, version: 2 }).payload).toBeNull();
    expect(parseSweepPayload({ ...good, objective: { metric: 'loss', direction: 'up' } }).payload).toBeNull();
    expect(parseSweepPayload(null).error).toBe('no payload');
  });
});

describe('overlay', () => {
  it('reads Katib-style name=value stdout lines', () => {
    expect(stdoutMetric('epoch 3: loss=0.25 accuracy=0.9', 'loss')).toBe(0.25);
    expect(stdoutMetric('loss = 1e-3', 'loss')).toBe(0.001);
    expect(stdoutMetric('val_loss=0.5', 'loss')).toBeNull();
    expect(stdoutMetric('loss=', 'loss')).toBeNull();
  });
  it('puts every run on one scale', () => {
    const g = overlayGeometry(
      [
        { key: 'a', points: [{ step: 0, value: 2 }, { step: 1, value: 1 }] },
        { key: 'b', points: [{ step: 0, value: 4 }] }
      ],
      100,
      100,
      0
    );
    expect([g.yMin, g.yMax, g.xMin, g.xMax]).toEqual([1, 4, 0, 1]);
    expect(g.paths.get('a')).toBe('M0,66.67 L100,100');
    expect(g.paths.get('b')).toBe('M0,0');
  });
});

describe('overlayGeometry and chartGeometry', () => {
  it('scale one line the same way (one helper)', () => {
    const points = [
      { step: 3, value: 0.5 },
      { step: 7, value: 0.25 },
      { step: 9, value: 0.75 }
    ];
    const one = chartGeometry(points, 200, 80, 4);
    const over = overlayGeometry([{ key: 'r', points }], 200, 80, 4);
    expect(over.paths.get('r')).toBe(one.path);
    expect([over.xMin, over.xMax, over.yMin, over.yMax]).toEqual([one.xMin, one.xMax, one.yMin, one.yMax]);
  });
  it('give an empty range without points, and "" for a run with none among others', () => {
    expect(overlayGeometry([{ key: 'r', points: [] }]).paths.size).toBe(0);
    expect(chartGeometry([], 10, 10)).toEqual({ path: '', xMin: 0, xMax: 1, yMin: 0, yMax: 1 });
    const g = overlayGeometry([
      { key: 'a', points: [{ step: 1, value: 1 }] },
      { key: 'b', points: [] }
    ]);
    expect(g.paths.get('b')).toBe('');
    expect([g.xMin, g.xMax, g.yMin, g.yMax]).toEqual([0, 2, 0.9, 1.1]);
  });
});
