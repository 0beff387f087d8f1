import { isAtBottom } from '../follow';
import { canCancel, failureText, isProtocolLine, labelKey, parsePayload, statusLabel } from '../livepayload';
import { PALETTE, sourceColour, sourceColourIndex } from '../palette';

// The same vectors are checked on the Python side (tests/test_live_monitor.py).
const COLOUR_VECTORS: [string, number][] = [
  ['rank-0', 0],
  ['rank-1', 1],
  ['rank-9', 1],
  ['node-3', 3],
  ['launcher', 2],
  ['', 0]
];

describe('palette', () => {
  it('gives a source the colour of its number, the same in every view', () => {
    for (const [source, index] of COLOUR_VECTORS) {
      expect(sourceColourIndex(source)).toBe(index);
      expect(sourceColour(source)).toBe(PALETTE[index]);
    }
  });
});

describe('payload', () => {
  it('reads what a training cell displays', () => {
    const { payload } = parsePayload({ version: 1, name: 'torch-1a2b3c4d', backend: 'local', namespace: null, runtime: 'torch-distributed' });
    expect(payload).toEqual({ name: 'torch-1a2b3c4d', backend: 'local', namespace: null, runtime: 'torch-distributed' });
    const k8s = parsePayload({ version: 1, name: 'j', backend: 'kubernetes', namespace: 'team-a' }).payload;
    expect(k8s?.namespace).toBe('team-a');
  });

  it('refuses what it cannot trust or does not know', () => {
    expect(parsePayload(null).payload).toBeNull();
    expect(parsePayload({ version: 2, name: 'a' }).error).toMatch(/version 2/);
    expect(parsePayload({ version: 1, name: '../../etc' }).payload).toBeNull();
    expect(parsePayload({ version: 1, name: 'UPPER' }).payload).toBeNull();
  });
});

describe('status', () => {
  it('says Cancelled only when the backend recorded a cancel', () => {
    expect(statusLabel({ status: 'Failed', reason: 'Cancelled' })).toBe('Cancelled');
    expect(statusLabel({ status: 'Failed', reason: 'FailedJobs' })).toBe('Failed');
    expect(statusLabel({ status: 'Complete', reason: 'AllJobsCompleted' })).toBe('Complete');
    expect(labelKey('Cancelled')).toBe('cancelled');
    expect(labelKey('<b>')).toBe('unknown');
  });

  it('offers Cancel only while the job runs', () => {
    expect(canCancel({ status: 'Running' })).toBe(true);
    expect(canCancel({ status: 'Created' })).toBe(true);
    expect(canCancel({ status: 'Complete' })).toBe(false);
    expect(canCancel({ status: 'Failed' })).toBe(false);
    expect(canCancel({ status: 'Deleted' })).toBe(false);
    expect(canCancel(null)).toBe(false);
  });

  it('shows the cause of a failure first', () => {
    const job = {
      name: 'j',
      status: 'Failed',
      reason: 'FailedJobs',
      message: 'rank 1 exited with code 1',
      failure: { source: 'Rank 1', exc_type: 'NameError', message: "name 'x' is not defined", traceback: ['  line 3', '    x'] }
    };
    expect(failureText(job as never)).toBe("Rank 1 failed: NameError: name 'x' is not defined\n  line 3\n    x");
    expect(failureText({ ...job, failure: null } as never)).toBe('FailedJobs: rank 1 exited with code 1');
    expect(failureText({ ...job, reason: 'Cancelled' } as never)).toBe('');
  });
});

describe('log view', () => {
  it('hides protocol lines', () => {
    expect(isProtocolLine('##kf-jupyter:report {"step": 1}')).toBe(true);
    expect(isProtocolLine('step 1 ##kf-jupyter:')).toBe(false);
  });

  it('knows when the view is at its end', () => {
    expect(isAtBottom(1000, 800, 200)).toBe(true);
    expect(isAtBottom(1000, 798, 200)).toBe(true);
    expect(isAtBottom(1000, 500, 200)).toBe(false);
  });
});
