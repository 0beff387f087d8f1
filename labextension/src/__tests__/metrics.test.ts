import { chartGeometry, formatMetric, MetricSeries, nonFiniteToNull, parseReport } from '../metrics';
import { CELL_TEMPLATES, templateFor } from '../templates';

describe('parseReport', () => {
  it('parses a report line', () => {
    expect(parseReport('##kf-jupyter:report {"step": 3, "progress": 0.3, "metrics": {"loss": 0.1}}')).toEqual({
      step: 3,
      progress: 0.3,
      metrics: { loss: 0.1 }
    });
  });
  it('allows no progress and no metrics; drops non-numeric metrics', () => {
    expect(parseReport('  ##kf-jupyter:report {"step": 1}')).toEqual({ step: 1, metrics: {} });
    expect(parseReport('##kf-jupyter:report {"step": 2, "metrics": {"acc": 0.5, "name": "x", "n": null}}')).toEqual({
      step: 2,
      metrics: { acc: 0.5 }
    });
  });
  it('clamps progress into 0..1', () => {
    expect(parseReport('##kf-jupyter:report {"step": 1, "progress": 1.7}')!.progress).toBe(1);
    expect(parseReport('##kf-jupyter:report {"step": 1, "progress": -2}')!.progress).toBe(0);
  });
  it('rejects other lines', () => {
    expect(parseReport('step 3 loss 0.1')).toBeNull();
    expect(parseReport('##kf-jupyter:result {"step": 1}')).toBeNull();
    expect(parseReport('##kf-jupyter:report not-json')).toBeNull();
    expect(parseReport('##kf-jupyter:report {"progress": 0.5}')).toBeNull();
    expect(parseReport('##kf-jupyter:report [1,2]')).toBeNull();
    expect(parseReport('##kf-jupyter:reportx {"step": 1}')).toBeNull();
  });
});

describe('MetricSeries', () => {
  it('collects series by name, last report per step wins', () => {
    const m = new MetricSeries();
    m.add({ step: 1, progress: 0.1, metrics: { loss: 1, acc: 0.1 } });
    m.add({ step: 0, metrics: { loss: 2 } });
    m.add({ step: 1, metrics: { loss: 0.9 } });
    m.add({ step: 2, progress: 0.2, metrics: { loss: 0.5 } });
    expect(m.names()).toEqual(['acc', 'loss']);
    expect(m.points('loss')).toEqual([
      { step: 0, value: 2 },
      { step: 1, value: 0.9 },
      { step: 2, value: 0.5 }
    ]);
    expect(m.last('loss')).toBe(0.5);
    expect(m.progress).toBe(0.2);
    expect(m.lastStep).toBe(2);
    expect(m.points('nope')).toEqual([]);
  });
  it('stays bounded', () => {
    const m = new MetricSeries(100);
    for (let i = 0; i < 1000; i++) {
      m.add({ step: i, metrics: { loss: i } });
    }
    const pts = m.points('loss');
    expect(pts.length).toBeLessThanOrEqual(100);
    expect(pts[0].step).toBe(0);
    expect(pts[pts.length - 1].step).toBe(999);
  });
});

describe('chartGeometry', () => {
  it('maps points into the box, y up', () => {
    const g = chartGeometry(
      [
        { step: 0, value: 0 },
        { step: 10, value: 1 }
      ],
      110,
      60,
      5
    );
    expect(g.path).toBe('M5,55 L105,5');
    expect([g.xMin, g.xMax, g.yMin, g.yMax]).toEqual([0, 10, 0, 1]);
  });
  it('handles a single point and empty input', () => {
    const g = chartGeometry([{ step: 3, value: 2 }], 100, 100, 0);
    expect(g.path).toBe('M50,50');
    expect(chartGeometry([], 100, 100).path).toBe('');
  });
});

describe('formatMetric', () => {
  it('uses 3 significant digits or exponent', () => {
    expect(formatMetric(0.123456)).toBe('0.123');
    expect(formatMetric(12345)).toBe('12300');
    expect(formatMetric(0)).toBe('0');
    expect(formatMetric(1e-5)).toBe('1.00e-5');
    expect(formatMetric(2e6)).toBe('2.00e+6');
  });
});

describe('cell templates', () => {
  it('has one template per magic, each starting with its magic', () => {
    expect(CELL_TEMPLATES.map(t => t.magic)).toEqual(['torchtrain', 'mpitrain', 'jaxtrain', 'xgboosttrain']);
    for (const t of CELL_TEMPLATES) {
      expect(t.source.startsWith(`%%${t.magic}`)).toBe(true);
      expect(t.label).toContain(`%%${t.magic}`);
    }
    expect(templateFor('jaxtrain')!.framework).toBe('jax');
    expect(templateFor('nope')).toBeUndefined();
  });
});

describe('report values no number can hold (issue 13)', () => {
  const P = '##kf-jupyter:report ';
  const huge = '9'.repeat(400);
  it('never throws and keeps only finite numbers', () => {
    const lines = [
      `${P}{"step": 1, "metrics": {"loss": ${huge}}}`,
      `${P}{"step": ${huge}, "metrics": {"loss": 1}}`,
      `${P}{"step": 1, "progress": ${huge}, "metrics": {"loss": NaN}}`,
      `${P}{"step": 1, "metrics": {"loss": Infinity, "acc": -Infinity}}`,
      `${P}{"step": 1, "metrics": {"loss": "0.5", "n": true, "o": {"x": 1}, "l": [1]}}`,
      `${P}{"step": 1e999}`,
      `${P}${'['.repeat(100000)}`,
      `${P}{"step": 1, "metrics": {"__proto__": 5, "constructor": 2}}`
    ];
    for (const line of lines) {
      const r = parseReport(line);
      if (r) {
        expect(Number.isFinite(r.step)).toBe(true);
        if (r.progress !== undefined) {
          expect(Number.isFinite(r.progress)).toBe(true);
        }
        for (const v of Object.values(r.metrics)) {
          expect(Number.isFinite(v)).toBe(true);
        }
      }
    }
    expect(parseReport(lines[0])).toEqual({ step: 1, metrics: {} });
    expect(parseReport(lines[1])).toBeNull();
    expect(parseReport(lines[2])).toEqual({ step: 1, metrics: {} });
  });
  it('charts finite extremes with finite coordinates', () => {
    const g = chartGeometry(
      [
        { step: 0, value: -1.7e308 },
        { step: 1, value: 1.7e308 }
      ],
      200,
      100
    );
    expect(g.path).not.toMatch(/NaN|Infinity/);
    expect(formatMetric(1.7e308)).toBe('1.70e+308');
  });
});

describe('nonFiniteToNull', () => {
  it('replaces the tokens outside strings only', () => {
    expect(nonFiniteToNull('{"a": NaN, "b": -Infinity, "c": Infinity, "NaN": "x NaN \\" Infinity"}')).toBe(
      '{"a": null, "b": null, "c": null, "NaN": "x NaN \\" Infinity"}'
    );
    expect(parseReport('##kf-jupyter:report {"step": 2, "metrics": {"loss": NaN, "acc": 0.5}}')).toEqual({
      step: 2,
      metrics: { acc: 0.5 }
    });
  });
});
