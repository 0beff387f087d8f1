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
t = time.perf_counter()
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
    t = time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sh.run_line_magic("kf_jobs", "")
    n = out.getvalue().count("\n")
print(json.dumps({"seconds": time.perf_counter() - t, "n": n}))
"""


def fresh(state: Path, what: str) -> tuple[float, int]:
    out = subprocess.run(
        [sys.executable, "-c", FRESH, str(REPO), str(state), what],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "KF_JUPYTER_STATE_DIR": str(state)},
    ).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return float(data["seconds"]), int(data["n"])


def timed(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


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
        rows: list[tuple[str, float, str]] = []

        scan, n = fresh(state, "scan")
        assert n == args.jobs, n
        rows.append(("scan (no index: every folder read; the rebuild)", scan, load()))
        first_ever, n = fresh(state, "list")  # builds and writes the index
        rows.append(("first list ever (builds the index)", first_ever, load()))
        first, n = fresh(state, "list")
        assert n == args.jobs, n
        rows.append(("first list, fresh process", first, load()))
        b = LocalBackend(LocalBackendConfig(state_dir=str(state), warm=False))
        b.list_jobs()
        rows.append(("poll, nothing changed", timed(b.list_jobs, args.polls), load()))
        extra = [0]

        def one_more() -> None:
            extra[0] += 1
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
                    "from tests.store_jobs import write_job; write_job(Path(sys.argv[2]), sys.argv[3])",
                    str(REPO),
                    str(state),
                    f"more-{extra[0]}",
                ],
                check=True,
            )

        polls = []
        for _ in range(max(3, args.polls // 4)):
            one_more()
            t = time.perf_counter()
            jobs = b.list_jobs()
            polls.append(time.perf_counter() - t)
            assert jobs[-1].name == f"more-{extra[0]}", jobs[-1].name
        rows.append(("poll after another process wrote a job", statistics.median(polls), load()))
        rows.append(
            (
                "get_job (an old finished job)",
                timed(lambda: b.get_job("job-00042"), args.polls),
                load(),
            )
        )
        js, n = fresh(state, "json")
        rows.append(("jobs route body, fresh process", js, load()))
        rows.append(("jobs route body, poll", timed(b.list_jobs_json, args.polls), load()))
        magic, n = fresh(state, "magic")
        rows.append(("%kf_jobs, fresh shell (newest 100 rows)", magic, load()))

        print(f"\n{args.jobs} finished jobs; target: < 100 ms (all but the scan)\n")
        print(f"{'what':52} {'seconds':>9} {'x scan':>8}  machine")
        for what, sec, ld in rows:
            print(f"{what:52} {sec:9.4f} {sec / scan:8.4f}  {ld}")


if __name__ == "__main__":
    main()
