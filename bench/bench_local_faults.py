"""What the fault handling of the local supervisor costs: prints figures (not a test).

Side by side in one run, rounds interleaved: a no-op 2-process job, train() -> Complete, with
  before  the supervisor as it was before issue 8 part B (git show BASE:.../supervisor.py)
  after   the current supervisor (child subreaper, 128 KiB reserve, ENOSPC-safe writes,
          adopted-orphan reaping)
and the supervisor's own CPU time while a 2-process job sleeps 3 s (psutil, read at 2.5 s).
Usage:
  .venv/bin/python bench/bench_local_faults.py [--runs 15] [--base 2de0b28]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))


def noop():
    return 0


def sleeper():
    import time

    time.sleep(3)


def idle_cpu(client, supervisor_file: str) -> float:
    """CPU seconds the supervisor used during the first 2.5 s of a sleeping 2-process job."""
    import json

    import psutil

    from kf_jupyter import JAXTrainer
    from kf_jupyter.backends.local import backend as lb

    lb.sv.__file__ = supervisor_file
    name = client.train(JAXTrainer(func=sleeper, num_nodes=2, initialize_distributed=False))
    t0 = time.monotonic()
    client.wait_for_job_status(name, {"Running"}, timeout=60)
    st = json.loads((client.backend.jobs_dir / name / "status.json").read_text())
    proc = psutil.Process(st["supervisor_pid"])
    time.sleep(max(0.0, 2.5 - (time.monotonic() - t0)))
    cpu = proc.cpu_times()
    client.wait_for_job_status(name, timeout=60)
    client.delete_job(name)
    return float(cpu.user + cpu.system)


def one_job(client, supervisor_file: str) -> float:
    """Seconds from train() to Complete, with the given supervisor script."""
    from kf_jupyter import JAXTrainer
    from kf_jupyter.backends.local import backend as lb

    lb.sv.__file__ = supervisor_file  # the path train() starts; the helpers stay current
    t0 = time.perf_counter()
    name = client.train(JAXTrainer(func=noop, num_nodes=2, initialize_distributed=False))
    client.wait_for_job_status(name, timeout=120)
    took = time.perf_counter() - t0
    client.delete_job(name)
    return took


def main() -> int:
    """Run the rounds and print medians and the paired ratio."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--base", default="2de0b28")
    args = ap.parse_args()
    from kf_jupyter.backends.local import supervisor as sv
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.client import TrainerClient

    current = sv.__file__
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "supervisor_before.py"
        old.write_text(
            subprocess.run(
                ["git", "show", f"{args.base}:kf_jupyter/backends/local/supervisor.py"],
                cwd=REPO,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        client = TrainerClient(LocalBackendConfig(state_dir=Path(tmp) / "state"))
        one_job(client, current)  # warm caches
        before, after = [], []
        for _ in range(args.runs):
            before.append(one_job(client, str(old)))
            after.append(one_job(client, current))
        idle_before, idle_after = [], []
        for _ in range(3):
            idle_before.append(idle_cpu(client, str(old)))
            idle_after.append(idle_cpu(client, current))
        sv.__file__ = current
    mb, ma = statistics.median(before), statistics.median(after)
    paired = statistics.median(a / b for a, b in zip(after, before))
    print(f"no-op 2-process job, train() -> Complete, {args.runs} interleaved rounds")
    print(f"  before (supervisor at {args.base}): median {mb * 1000:.0f} ms")
    print(f"  after  (current supervisor):        median {ma * 1000:.0f} ms")
    print(f"  ratio after/before: medians {ma / mb:.2f}, paired {paired:.2f}")
    print("supervisor CPU during 2.5 s of a sleeping 2-process job (start included), median of 3")
    print(f"  before {statistics.median(idle_before) * 1000:.0f} ms, "
          f"after {statistics.median(idle_after) * 1000:.0f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
