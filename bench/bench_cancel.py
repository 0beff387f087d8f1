"""How fast a Cancel stops a local torch job (what the live monitor's Cancel button calls).

Starts a 1×2 torch job printing 10 lines/s per rank, waits for its output, then calls the local
backend's `cancel_job` (as `POST jobs/{name}/cancel` does) and samples the process table: when
the ranks (processes with LOCAL_RANK) are gone, when torchrun is gone, and when the job's record
says Cancelled. Prints the load average too: on a loaded machine torchrun's own SIGTERM teardown
can run into the supervisor's 2 s grace before SIGKILL.

    .venv/bin/python bench/bench_cancel.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

import psutil

from kf_jupyter import LocalBackendConfig, TorchTrainer, TrainerClient


def _loop() -> None:
    import os
    import time

    rank = os.environ["RANK"]
    for i in range(100000):
        print(f"rank {rank} line {i}", flush=True)
        time.sleep(0.1)


def _kinds(name: str) -> set[str]:
    kinds = set()
    for p in psutil.process_iter(["pid"]):
        try:
            env = p.environ()
            if env.get("KF_JUPYTER_JOB_NAME") != name or p.status() == psutil.STATUS_ZOMBIE:
                continue
            kinds.add("rank" if "LOCAL_RANK" in env else "launcher")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return kinds


def main() -> None:
    """Run the bench and print one line per run."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    client = TrainerClient(LocalBackendConfig(state_dir=tempfile.mkdtemp(prefix="kf-bench-")))
    for run in range(args.runs):
        name = client.train(TorchTrainer(func=_loop, num_nodes=1, num_proc_per_node=2))
        while not any("line 3" in ln for ln in client.get_job_logs(name)):
            time.sleep(0.2)
        t0 = time.monotonic()
        worker = threading.Thread(target=client.backend.cancel_job, args=(name,))
        worker.start()
        gone: dict[str, float] = {}
        while worker.is_alive() or len(gone) < 2:
            kinds = _kinds(name)
            for kind in ("rank", "launcher"):
                if kind not in kinds:
                    gone.setdefault(kind, time.monotonic() - t0)
            time.sleep(0.02)
        worker.join()
        done = time.monotonic() - t0
        job = client.get_job(name)
        print(
            f"run {run}: ranks gone {gone['rank']:.2f} s, torchrun gone {gone['launcher']:.2f} s, "
            f"cancel_job returned {done:.2f} s ({job.status}/{job.reason}); "
            f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        client.delete_job(name)


if __name__ == "__main__":
    main()
