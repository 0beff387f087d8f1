"""Job-list benchmark (issue 21): the local job list with thousands of finished jobs (not a test).

Writes N synthetic finished jobs (default 10,000; every third Failed with a root cause) through
the store's own writers (tests/store_jobs.py: status.json, events.jsonl, the index journal),
then measures, in one run so every figure shares the machine's load:

  scan          every job folder read (what list_jobs did before the index; the index's rebuild)
  first list    list_jobs() in a fresh process, the index on disk (import time not counted)
  poll          list_jobs() again in the same process (nothing changed; median)
  poll +1       list_jobs() after another process wrote one more finished job (median)
  get_job       one old finished job (median)
  jobs route    list_jobs_json(), the body of the server's `jobs` route the sidebar polls:
                fresh process and poll
  %kf_jobs      the magic in a fresh IPython shell (newest 100 rows; text output)

Target: every figure but `scan` under 100 ms at 10,000 jobs.

    .venv/bin/python bench/bench_job_list.py [--jobs 10000] [--polls 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

FRESH = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from kf_jupyter.backends.local.backend import LocalBackend
from kf_jupyter.backends.local.config import LocalBackendConfig
b = LocalBackend(LocalBackendConfig(state_dir=sys.argv[2], warm=False))
what = sys.argv[3]
t, c = time.perf_counter(), time.process_time()
if what == "list":
    n = len(b.list_jobs())
elif what == "json":
    n = len(json.loads("{\"jobs\": " + b.list_jobs_json() + "}")["jobs"])
elif what == "scan":
    n = len(b.scan_jobs())
elif what == "magic":
    os.environ["KF_JUPYTER_STATE_DIR"] = sys.argv[2]
    from IPython.core.interactiveshell import InteractiveShell
    from kf_jupyter.magics.core import KubeflowMagics
    import contextlib, io
    sh = InteractiveShell.instance()
    sh.register_magics(KubeflowMagics(shell=sh))
    t, c = time.perf_counter(), time.process_time()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sh.run_line_magic("kf_jobs", "")
    n = out.getvalue().count("\n")
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": time.process_time() - c, "n": n}))
"""


def fresh(state: Path, what: str) -> tuple[float, float, int]:
    out = subprocess.run(
        [sys.executable, "-c", FRESH, str(REPO), str(state), what],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "KF_JUPYTER_STATE_DIR": str(state)},
    ).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return float(data["seconds"]), float(data["cpu"]), int(data["n"])


def timed(fn, n: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `n` calls."""
    times, cpus = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(times), statistics.median(cpus)


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def main() -> None:
    """Run the benchmark and print its table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--polls", type=int, default=20)
    args = ap.parse_args()

    from kf_jupyter.backends.local.backend import LocalBackend
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.types import COMPLETE, FAILED
    from tests.store_jobs import write_job

    with tempfile.TemporaryDirectory(prefix="kf-bench-list-") as tmp:
        state = Path(tmp) / "state"
        t = time.perf_counter()
        base = time.time() - 86400
        for i in range(args.jobs):
            write_job(
                state, f"job-{i:05d}", created=base + i, finish=FAILED if i % 3 == 0 else COMPLETE
            )
        print(f"wrote {args.jobs} finished jobs in {time.perf_counter() - t:.1f} s ({load()})")
        rows: list[tuple[str, float, float, str]] = []

        def add(what: str, wall_cpu: tuple[float, float]) -> None:
            rows.append((what, wall_cpu[0], wall_cpu[1], load()))

        scan, scan_cpu, n = fresh(state, "scan")
        assert n == args.jobs, n
        add("scan (no index: every folder read; the rebuild)", (scan, scan_cpu))
        add("first list ever (builds the index)", fresh(state, "list")[:2])
        first = fresh(state, "list")
        assert first[2] == args.jobs, first
        add("list_jobs(), fresh process", first[:2])
        b = LocalBackend(LocalBackendConfig(state_dir=str(state), warm=False))
        b.list_jobs()
        add("list_jobs() again, nothing changed", timed(b.list_jobs, args.polls))
        extra = [0]

        def one_more() -> None:
            extra[0] += 1
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
                    "from tests.store_jobs import write_job; "
                    "write_job(Path(sys.argv[2]), sys.argv[3])",
                    str(REPO),
                    str(state),
                    f"more-{extra[0]}",
                ],
                check=True,
            )

        polls, cpus = [], []
        for _ in range(max(3, args.polls // 4)):
            one_more()
            t, c = time.perf_counter(), time.process_time()
            jobs = b.list_jobs()
            polls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
            assert jobs[-1].name == f"more-{extra[0]}", jobs[-1].name
        add(
            "list_jobs() after another process wrote a job",
            (statistics.median(polls), statistics.median(cpus)),
        )
        add("get_job (an old finished job)", timed(lambda: b.get_job("job-00042"), args.polls))
        add("jobs route body, first call ever (builds its cache)", fresh(state, "json")[:2])
        add("jobs route body, fresh process", fresh(state, "json")[:2])
        b.list_jobs_json()
        add("jobs route body, poll (the sidebar)", timed(b.list_jobs_json, args.polls))
        one_more()
        add("jobs route body, poll after a new job", timed(b.list_jobs_json, 1))
        add("%kf_jobs, fresh shell (newest 100 rows)", fresh(state, "magic")[:2])

        print(f"\n{args.jobs} finished jobs; target: < 100 ms (all but the scan)\n")
        print(f"{'what':52} {'wall s':>8} {'cpu s':>8} {'x scan':>8}  machine")
        for what, sec, cpu, ld in rows:
            print(f"{what:52} {sec:8.4f} {cpu:8.4f} {sec / scan:8.4f}  {ld}")


if __name__ == "__main__":
    main()
