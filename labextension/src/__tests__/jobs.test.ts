import {
  failureText,
  filterJobs,
  formatAge,
  formatDuration,
  displayStatus,
  formatNodes,
  formatTime,
  groupRuntimes,
  IJob,
  isFinished,
  startupText,
  queryString,
  sortJobs,
  statusKey
} from '../jobs';

const jobs: IJob[] = [
  { name: 'mnist-a1', status: 'Running', framework: 'torch', backend: 'local', creation_time: '2026-01-01T10:00:00Z' },
  { name: 'jax-b2', status: 'Complete', framework: 'jax', backend: 'kubernetes', creation_time: '2026-01-01T12:00:00Z' },
  { name: 'xgb-c3', status: 'Failed', framework: 'xgboost', runtime: 'xgboost-distributed', creation_time: '2026-01-01T11:00:00+00:00' },
  { name: 'pending', status: 'Created', framework: 'torch', creation_time: null }
];

describe('filterJobs', () => {
  it('returns everything for an empty query', () => {
    expect(filterJobs(jobs, '  ').map(j => j.name)).toEqual(jobs.map(j => j.name));
  });
  it('matches any field, case-insensitively', () => {
    expect(filterJobs(jobs, 'TORCH').map(j => j.name)).toEqual(['mnist-a1', 'pending']);
    expect(filterJobs(jobs, 'kubernetes').map(j => j.name)).toEqual(['jax-b2']);
    expect(filterJobs(jobs, 'distributed').map(j => j.name)).toEqual(['xgb-c3']);
  });
  it('requires every term', () => {
    expect(filterJobs(jobs, 'torch running').map(j => j.name)).toEqual(['mnist-a1']);
    expect(filterJobs(jobs, 'torch failed')).toEqual([]);
  });
  it('supports field:value terms', () => {
    expect(filterJobs(jobs, 'status:complete').map(j => j.name)).toEqual(['jax-b2']);
    expect(filterJobs(jobs, 'name:x').map(j => j.name)).toEqual(['jax-b2', 'xgb-c3']);
    expect(filterJobs(jobs, 'framework:jax').map(j => j.name)).toEqual(['jax-b2']);
  });
  it('does not mutate its input', () => {
    const copy = jobs.slice();
    filterJobs(jobs, 'torch');
    expect(jobs).toEqual(copy);
  });
});

describe('sortJobs', () => {
  it('sorts newest first, unknown times last', () => {
    expect(sortJobs(jobs).map(j => j.name)).toEqual(['jax-b2', 'xgb-c3', 'mnist-a1', 'pending']);
  });
  it('breaks ties by name', () => {
    const t = '2026-01-01T00:00:00Z';
    const s = sortJobs([
      { name: 'b', status: 'Running', creation_time: t },
      { name: 'a', status: 'Running', creation_time: t }
    ]);
    expect(s.map(j => j.name)).toEqual(['a', 'b']);
  });
});

describe('formatAge', () => {
  const now = Date.parse('2026-01-10T00:00:00Z');
  it('formats like kubectl', () => {
    expect(formatAge('2026-01-09T23:59:15Z', now)).toBe('45s');
    expect(formatAge('2026-01-09T23:48:00Z', now)).toBe('12m');
    expect(formatAge('2026-01-09T21:00:00Z', now)).toBe('3h');
    expect(formatAge('2026-01-08T01:00:00Z', now)).toBe('47h');
    expect(formatAge('2026-01-07T00:00:00Z', now)).toBe('3d');
  });
  it('handles offsets, future and bad input', () => {
    expect(formatAge('2026-01-10T01:00:00+01:00', now)).toBe('0s');
    expect(formatAge('2026-01-10T00:05:00Z', now)).toBe('0s');
    expect(formatAge('garbage', now)).toBe('-');
    expect(formatAge(null, now)).toBe('-');
    expect(formatAge(undefined, now)).toBe('-');
  });
});

describe('formatDuration', () => {
  it('formats durations', () => {
    expect(formatDuration('2026-01-01T00:00:00Z', '2026-01-01T00:00:07Z')).toBe('7s');
    expect(formatDuration('2026-01-01T00:00:00Z', '2026-01-01T00:01:05Z')).toBe('1m 5s');
    expect(formatDuration('2026-01-01T00:00:00Z', '2026-01-01T02:03:00Z')).toBe('2h 3m');
    expect(formatDuration('2026-01-01T00:00:00Z', null)).toBe('');
    expect(formatDuration('2026-01-01T00:00:10Z', '2026-01-01T00:00:00Z')).toBe('');
  });
});

describe('small helpers', () => {
  it('statusKey and isFinished', () => {
    expect(statusKey('Running')).toBe('running');
    expect(statusKey('Weird')).toBe('unknown');
    expect(isFinished('Complete')).toBe(true);
    expect(isFinished('Failed')).toBe(true);
    expect(isFinished('Running')).toBe(false);
  });
  it('formatNodes writes the shape in words, as the kernel does', () => {
    expect(formatNodes({ name: 'a', status: 'Running', num_nodes: 2, num_proc_per_node: 4 })).toBe(
      '2 nodes \u00d7 4 processes'
    );
    expect(formatNodes({ name: 'a', status: 'Running', num_nodes: 1, num_proc_per_node: 2 })).toBe(
      '1 node \u00d7 2 processes'
    );
    expect(formatNodes({ name: 'a', status: 'Running', num_nodes: 1, num_proc_per_node: '1' })).toBe(
      '1 node \u00d7 1 process'
    );
    expect(formatNodes({ name: 'a', status: 'Running', num_nodes: 2, num_proc_per_node: 'auto' })).toBe('2 nodes');
    expect(formatNodes({ name: 'a', status: 'Running' })).toBe('-');
  });
  it('displayStatus says Cancelled for a cancelled job, with its own badge key', () => {
    expect(displayStatus({ status: 'Failed', reason: 'Cancelled' })).toBe('Cancelled');
    expect(displayStatus({ status: 'Failed', reason: 'Error' })).toBe('Failed');
    expect(statusKey('Cancelled')).toBe('cancelled');
    expect(statusKey('Suspended')).toBe('suspended');
  });
  it('formatTime writes no raw ISO timestamp', () => {
    const t = formatTime('2026-12-01T23:14:05Z');
    expect(t).not.toMatch(/\d{4}-\d\d-\d\dT/);
    expect(t).toMatch(/\d\d:\d\d:\d\d/);
    expect(formatTime(null)).toBe('-');
  });
  it('queryString skips empty values and encodes', () => {
    expect(queryString({ backend: 'local', namespace: null, follow: true, tail: 1000, x: '' })).toBe(
      '?backend=local&follow=1&tail=1000'
    );
    expect(queryString({ namespace: 'a b&c' })).toBe('?namespace=a%20b%26c');
    expect(queryString({})).toBe('');
  });
});

describe('groupRuntimes', () => {
  it('groups by framework, sorted, unknown framework last', () => {
    const g = groupRuntimes([
      { name: 'torch-distributed', framework: 'torch', image: 'pytorch', num_nodes: 1 },
      { name: 'mystery', framework: null },
      { name: 'deepspeed', framework: 'deepspeed' },
      { name: 'a-torch', framework: 'torch' }
    ]);
    expect(g.map(x => x.framework)).toEqual(['deepspeed', 'torch', 'other']);
    expect(g[1].runtimes.map(r => r.name)).toEqual(['a-torch', 'torch-distributed']);
  });
});

describe('failureText', () => {
  it('puts the root cause first', () => {
    const job = {
      name: 'j',
      status: 'Failed',
      failure: { source: 'Rank 1', exc_type: 'NameError', message: "name 'x' is not defined", traceback: ['  File "<training cell>", line 6'] }
    };
    expect(failureText(job)).toBe("Rank 1 failed: NameError: name 'x' is not defined\n  File \"<training cell>\", line 6");
    expect(failureText({ name: 'j', status: 'Complete' })).toBeUndefined();
  });
});

describe('startupText', () => {
  const job = (status: string, phase?: string): IJob => ({ name: 'j', status, phase });

  it("shows the backend's phase until the first line, and says there is no output yet", () => {
    expect(startupText(job('Running', 'Waiting for all 4 ranks at rendezvous (3/4 there)'), [])).toBe(
      'Waiting for all 4 ranks at rendezvous (3/4 there). No output yet.'
    );
    expect(startupText(job('Created', 'Starting 2 ranks (warm)'), [])).toBe('Starting 2 ranks (warm). No output yet.');
  });

  it('never shows a phase for a job that ended or is suspended', () => {
    for (const status of ['Complete', 'Failed', 'Suspended', 'Deleted']) {
      expect(startupText(job(status, 'rank 1: importing torch…'), [])).toBeNull();
    }
    expect(startupText(null, [])).toBeNull();
  });

  it('without a phase says only what the record and the latest event say', () => {
    const events = [
      { reason: 'Created', message: 'job j created' },
      { reason: 'Started', message: 'process node-0 pid 7' },
      { reason: 'Exited', message: 'process node-0 exited with code 0' }
    ];
    expect(startupText(job('Running'), events)).toBe('Running · Started: process node-0 pid 7. No output yet.');
    expect(startupText(job('Created'), [])).toBe('Waiting to start. No output yet.');
    expect(startupText(job('Running', '  '), [])).toBe('Running. No output yet.');
  });
});
