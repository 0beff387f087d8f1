import { katibPairs, stdoutMetric } from '../overlay';

/** Katib's filter as a plain regular expression (quadratic on long runs): the reference. */
function reference(line: string): [string, string][] {
  const re = /([\w|-]+)\s*=\s*([+-]?\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?)/g;
  const out: [string, string][] = [];
  for (let m = re.exec(line); m; m = re.exec(line)) {
    out.push([m[1], m[2]]);
  }
  return out;
}

function longLines(n: number): string[] {
  return ['-'.repeat(n), '|'.repeat(n), '-|'.repeat(n / 2), '9'.repeat(n), 'deadbeef'.repeat(n / 8), 'x_'.repeat(n / 2)];
}

describe('katibPairs (issue 38: linear-time name=value parsing)', () => {
  for (const n of [8000, 32000]) {
    it(`parses ${n}-character runs of name characters in milliseconds`, () => {
      for (const line of longLines(n)) {
        for (const tail of ['', ' loss=0.25']) {
          const start = Date.now();
          const value = stdoutMetric(line + tail, 'loss');
          const took = Date.now() - start;
          expect(took).toBeLessThan(150);
          expect(value).toBe(tail ? 0.25 : null);
        }
      }
    });
  }

  it('reads normal lines as Katib\'s filter reads them', () => {
    const lines = [
      'epoch=3 loss=0.25 accuracy=0.91',
      'loss = -1.5e-3',
      'a=1b=2',
      'a=b=3',
      '--- loss=0.5 ---',
      'x|y-z=.5E+2',
      'no metrics here',
      'loss==2'
    ];
    for (const line of lines) {
      expect(katibPairs(line)).toEqual(reference(line));
    }
    expect(katibPairs('a=b=3')).toEqual([
      ['a', ''],
      ['b', '3']
    ]);
  });

  it('matches the filter on random short lines', () => {
    let seed = 38;
    const rand = (): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const alphabet = 'ab_|-= \t.+e9E0\u00e9\n';
    for (let i = 0; i < 20000; i++) {
      let line = '';
      const len = Math.floor(rand() * 24);
      for (let j = 0; j < len; j++) {
        line += alphabet[Math.floor(rand() * alphabet.length)];
      }
      expect(katibPairs(line)).toEqual(reference(line));
    }
  });
});
