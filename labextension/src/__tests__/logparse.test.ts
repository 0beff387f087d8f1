import { afterBar, collapseCr, parseLogEventData, parseSourcedLine, ReadableLog, sortSources, SseParser } from '../logparse';

describe('parseSourcedLine', () => {
  it('splits "[source] line"', () => {
    expect(parseSourcedLine('[rank-0] hello world')).toEqual({ source: 'rank-0', line: 'hello world' });
    expect(parseSourcedLine('[node-12] x')).toEqual({ source: 'node-12', line: 'x' });
    expect(parseSourcedLine('[launcher] ')).toEqual({ source: 'launcher', line: '' });
  });
  it('keeps brackets inside the line', () => {
    expect(parseSourcedLine('[rank-1] [warn] a [b] c')).toEqual({ source: 'rank-1', line: '[warn] a [b] c' });
  });
  it('treats lines without a prefix as single-source', () => {
    expect(parseSourcedLine('plain line')).toEqual({ source: '', line: 'plain line' });
    expect(parseSourcedLine('[not a source] x')).toEqual({ source: '', line: '[not a source] x' });
    expect(parseSourcedLine('')).toEqual({ source: '', line: '' });
  });
  it('drops a trailing carriage return', () => {
    expect(parseSourcedLine('[rank-0] crlf\r')).toEqual({ source: 'rank-0', line: 'crlf' });
  });
});

describe('parseLogEventData', () => {
  it('parses the server payload', () => {
    expect(parseLogEventData('{"source":"rank-3","line":"step 1"}')).toEqual({ source: 'rank-3', line: 'step 1' });
  });
  it('defaults a missing source', () => {
    expect(parseLogEventData('{"line":"x"}')).toEqual({ source: '', line: 'x' });
  });
  it('rejects malformed payloads', () => {
    expect(parseLogEventData('not json')).toBeNull();
    expect(parseLogEventData('{"source":"rank-0"}')).toBeNull();
    expect(parseLogEventData('null')).toBeNull();
    expect(parseLogEventData('42')).toBeNull();
  });
});

describe('SseParser', () => {
  it('parses whole events', () => {
    const p = new SseParser();
    const evs = p.push('data: {"a":1}\n\nevent: end\ndata: done\n\n');
    expect(evs).toEqual([
      { event: 'message', data: '{"a":1}' },
      { event: 'end', data: 'done' }
    ]);
  });

  it('handles chunk boundaries anywhere', () => {
    const text = 'data: {"source":"rank-0","line":"a"}\r\n\r\n: keep-alive\n\ndata: x\ndata: y\n\nevent: end\n\n';
    const whole = new SseParser().push(text);
    for (let size = 1; size < 9; size++) {
      const p = new SseParser();
      const got = [];
      for (let i = 0; i < text.length; i += size) {
        got.push(...p.push(text.slice(i, i + size)));
      }
      got.push(...p.finish());
      expect(got).toEqual(whole);
    }
    expect(whole).toEqual([
      { event: 'message', data: '{"source":"rank-0","line":"a"}' },
      { event: 'message', data: 'x\ny' },
      { event: 'end', data: '' }
    ]);
  });

  it('waits for \\n after a trailing \\r', () => {
    const p = new SseParser();
    expect(p.push('data: a\r')).toEqual([]);
    expect(p.push('\n\r\n')).toEqual([{ event: 'message', data: 'a' }]);
  });

  it('keeps ids, ignores comments and unknown fields', () => {
    const p = new SseParser();
    expect(p.push(': hi\nretry: 10\nfoo: bar\nid: 7\ndata:no-space\n\n')).toEqual([
      { event: 'message', data: 'no-space', id: '7' }
    ]);
    expect(p.push('\n\n')).toEqual([]);
  });

  it('flushes an unterminated event on finish', () => {
    const p = new SseParser();
    expect(p.push('data: last')).toEqual([]);
    expect(p.finish()).toEqual([{ event: 'message', data: 'last' }]);
    expect(p.finish()).toEqual([]);
  });
});

describe('sortSources', () => {
  it('orders launcher, then numerically by kind', () => {
    expect(sortSources(['rank-10', 'rank-2', 'launcher', 'node-1', 'rank-0', 'rank-2', 'zzz'])).toEqual([
      'launcher',
      'node-1',
      'rank-0',
      'rank-2',
      'rank-10',
      'zzz'
    ]);
  });
});

describe('ReadableLog', () => {
  const feed = (lines: [string, string][]) => {
    const log = new ReadableLog();
    const out = lines.flatMap(([source, line]) => log.push({ source, line }));
    return [...out, ...log.finish()].map(r => `${r.source}|${r.line}`);
  };
  it('hides protocol lines and the torchrun OMP banner', () => {
    expect(
      feed([
        ['node-0', 'W1201 10:03:00.179000 9785 torch/distributed/run.py:874] '],
        ['node-0', 'W1201 10:03:00.179000 9785 torch/distributed/run.py:874] *****'],
        [
          'node-0',
          'W1201 10:03:00.179000 9785 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default'
        ],
        ['rank-0', '##kf-jupyter:report {"step": 1, "metrics": {}}'],
        ['rank-0', 'hello'],
        ['rank-0', '##kf-jupyter:result 7'],
        ['rank-1', '##kf-jupyter:error {"exc_type": "E"}']
      ])
    ).toEqual(['rank-0|hello']);
  });
  it('keeps one line for a progress bar, also when report() lines interrupt it', () => {
    const rep = '##kf-jupyter:report {"step": 1, "metrics": {}}';
    expect(
      feed([
        ['rank-0', '\r 10%|#'],
        ['rank-0', `  0%|  | 0/2${rep}`],
        ['rank-1', 'other'],
        ['rank-0', ` 50%|# | 1/2${rep}`],
        ['rank-0', `100%|##| 2/2${rep}`],
        ['rank-0', ''],
        ['rank-0', 'a\rb\r'],
        ['rank-0', 'done']
      ])
    ).toEqual(['rank-1|other', 'rank-0|100%|##| 2/2', 'rank-0|b', 'rank-0|done']);
  });
  it('holds the line a source is still writing as its live line, until the line ends', () => {
    const rep = '##kf-jupyter:report {"step": 1, "metrics": {}}';
    const log = new ReadableLog();
    const live = (): Record<string, string> => Object.fromEntries(log.live);
    expect(log.push({ source: 'rank-0', line: '\r  0%|  | 0/3' })).toEqual([]);
    expect(live()).toEqual({ 'rank-0': '  0%|  | 0/3' });
    log.push({ source: 'rank-1', line: '\r 33%|# | 1/3\r 66%|##| 2/3' });
    expect(live()).toEqual({ 'rank-0': '  0%|  | 0/3', 'rank-1': ' 66%|##| 2/3' });
    log.push({ source: 'rank-0', line: '\r\r' }); // a blank redraw keeps what was shown
    expect(live()['rank-0']).toBe('  0%|  | 0/3');
    // report() while the bar is drawn: the bar goes on, still live
    expect(log.push({ source: 'rank-0', line: ` 33%|# | 1/3${rep}` })).toEqual([]);
    expect(live()['rank-0']).toBe(' 33%|# | 1/3');
    log.push({ source: 'rank-0', line: '\r 66%|##| 2/3' });
    expect(live()['rank-0']).toBe(' 66%|##| 2/3');
    // the line ends: the finished bar is an ordinary line and the live line goes
    expect(log.push({ source: 'rank-0', line: '\r100%|###| 3/3' })).toEqual([]);
    expect(log.push({ source: 'rank-0', line: ' 66%|##| 2/3\r100%|###| 3/3' })).toEqual([
      { source: 'rank-0', line: ' 33%|# | 1/3' },
      { source: 'rank-0', line: '100%|###| 3/3' }
    ]);
    expect(live()).toEqual({ 'rank-1': ' 66%|##| 2/3' });
    expect(log.finish()).toEqual([]);
    expect(live()).toEqual({});
  });
  it('collapses carriage returns as a terminal shows them', () => {
    expect(collapseCr('a\r b\r')).toBe(' b');
    expect(collapseCr('plain')).toBe('plain');
  });
});

describe('ReadableLog folds torchrun dumps', () => {
  it("drops torchrun's ChildFailedError traceback and box, keeps a user's traceback", () => {
    const log = new ReadableLog();
    const lines = [
      'Traceback (most recent call last):',
      '  File "<training cell>", line 6, in kf_train_cell',
      "NameError: name 'x' is not defined",
      'Traceback (most recent call last):',
      '  File "/venv/bin/torchrun", line 6, in <module>',
      'torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ',
      '=====',
      'x FAILED',
      '  rank      : 1 (local_rank: 1)',
      '=====',
      'after'
    ];
    const out = lines.flatMap(line => log.push({ source: 'node-0', line })).map(r => r.line);
    expect(out).toEqual([...lines.slice(0, 3), 'after']);
  });
});

describe('a print after a progress bar update (issue 22)', () => {
  it('keeps the bar as the live line and shows the printed line clean', () => {
    const log = new ReadableLog();
    const bar = ' 47%|████▋     | 18/38 [00:18<00:12]';
    const next = ' 50%|█████     | 19/38 [00:19<00:11]';
    expect(log.push({ source: 'rank-0', line: `\r${bar}` })).toEqual([]);
    expect(log.live.get('rank-0')).toBe(bar);
    const shown = log.push({ source: 'rank-0', line: `${next}rank 0 step 19 loss 0.5` });
    expect(shown.map(r => r.line)).toEqual(['rank 0 step 19 loss 0.5']);
    expect(log.live.get('rank-0')).toBe(next);
    // the bar's last state ends its line: shown once, the live line gone
    const done = '100%|██████████| 38/38 [00:38<00:00]';
    expect(log.push({ source: 'rank-0', line: done }).map(r => r.line)).toEqual([done]);
    expect(log.live.has('rank-0')).toBe(false);
    // an ordinary line after an ordinary line is untouched
    expect(log.push({ source: 'rank-0', line: 'plain | line 100%' }).map(r => r.line)).toEqual(['plain | line 100%']);
  });

  it('cuts a tqdm bar at its ] when the next state has another width', () => {
    const log = new ReadableLog();
    const bar = 'epoch 1 rank 0:   0%|          | 0/300 [00:00<?, ?it/s]'; // tqdm's first state
    const next = 'epoch 1 rank 0:  13%|█▎        | 40/300 [00:03<00:25, 10.12it/s]';
    const slower = 'epoch 1 rank 0:  14%|█▎        | 41/300 [00:04<53:10, 12.34s/it]';
    expect(next.length).not.toBe(bar.length);
    expect(log.push({ source: 'rank-0', line: `\r${bar}` })).toEqual([]);
    const shown = log.push({ source: 'rank-0', line: `${next}rank 0 step 40 loss` });
    expect(shown.map(r => r.line)).toEqual(['rank 0 step 40 loss']);
    expect(log.live.get('rank-0')).toBe(next);
    expect(afterBar(next, `${slower}[rank 0] step 41`)).toBe('[rank 0] step 41');
    expect(afterBar(bar, slower)).toBeNull();
    expect(afterBar(next, `${slower}x`)).toBe('x');
  });

  it('does not take a growing bar without a [...] block for a bar and a print', () => {
    expect(afterBar('5/6 |######', '6/6 |#######')).toBeNull();
    expect(afterBar('5/6 |######', '6/6 |######rank 0 step 6')).toBe('rank 0 step 6');
  });
});
