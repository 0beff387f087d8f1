"""Local backend benchmark: prints figures (not a test). Side by side, medians of several runs.

Same one-all-reduce function everywhere:
  plain      `torchrun --nproc-per-node 2 script.py` (the floor)
  ours 1x2   kf-jupyter local backend, TrainerClient.train() -> Complete
  ours 2x2   the same on 2 nodes x 2 processes
  ours pkgs  1x2 with RuntimeConfig(packages_to_install=[a package not installed]): 2nd+ runs
  sdk        Kubeflow SDK 0.5.0 local backend (LocalProcessBackendConfig), train() -> Complete

Rounds interleave the variants so they share the machine's load. Targets: ours 1x2 <= 1.15 x
plain; sdk >= 5 x ours. Usage:
  .venv/bin/python bench/bench_local.py [--runs 5] [--sdk-runs 2] [--no-sdk]
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

PKG = "inflection"  # tiny pure-python wheel, not in the project's environment


def allreduce():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    print("sum", t.item(), "world", dist.get_world_size())
    dist.destroy_process_group()


def noop():
    return 0


def run_noop_plain(script: Path) -> None:
    subprocess.run([sys.executable, str(script)], check=True, stdout=subprocess.DEVNULL)


def run_noop_ours(client) -> None:
    from kf_jupyter import JAXTrainer

    name = client.train(JAXTrainer(func=noop, initialize_distributed=False))
    client.wait_for_job_status(name, timeout=600)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_plain(script: Path, tmp: Path) -> None:
    env = dict(os.environ, TMPDIR=str(tmp))
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    subprocess.run(
        [os.path.join(bindir, "torchrun"), "--nproc-per-node", "2", str(script)],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def run_ours(client, nodes: int, rc=None) -> None:
    from kf_jupyter import TorchTrainer

    name = client.train(
        TorchTrainer(func=allreduce, num_nodes=nodes, num_proc_per_node=2), runtime_config=rc
    )
    client.wait_for_job_status(name, timeout=600)


def run_sdk(client) -> None:
    from kubeflow.trainer import CustomTrainer

    # Pin the CPU wheel: the SDK installs "torch" into a fresh venv on every job.
    trainer = CustomTrainer(func=allreduce, packages_to_install=["torch==2.13.0+cpu"])
    name = client.train(runtime=client.get_runtime("torch-distributed"), trainer=trainer)
    job = client.wait_for_job_status(
        name, status={"Complete", "Failed"}, timeout=1800, polling_interval=1
    )
    if job.status != "Complete":
        logs = "\n".join(client.get_job_logs(name))
        raise SystemExit(f"SDK job failed:\n{logs[-3000:]}")


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sdk-runs", type=int, default=2)
    ap.add_argument("--no-sdk", action="store_true")
    args = ap.parse_args()

    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.client import TrainerClient
    from kf_jupyter.config import RuntimeConfig

    work = Path(tempfile.mkdtemp(prefix="kfj-bench-"))
    try:
        script = work / "allreduce.py"
        script.write_text(textwrap.dedent(inspect.getsource(allreduce)) + "\nallreduce()\n")
        noop_script = work / "noop.py"
        noop_script.write_text(textwrap.dedent(inspect.getsource(noop)) + "\nnoop()\n")
        tmp = work / "tmp"
        tmp.mkdir()
        ours = TrainerClient(LocalBackendConfig(state_dir=work / "state"))
        rc = RuntimeConfig(packages_to_install=[PKG])
        sdk = None
        if not args.no_sdk:
            from kubeflow.trainer import LocalProcessBackendConfig
            from kubeflow.trainer import TrainerClient as SDKClient

            sdk = SDKClient(backend_config=LocalProcessBackendConfig())

        # Warm-up: page cache, and the one-time build of the layered package env.
        run_plain(script, tmp)
        first_pkg = timed(lambda: run_ours(ours, 1, rc))

        times: dict[str, list[float]] = {
            k: [] for k in ("plain", "1x2", "2x2", "pkgs", "sdk", "noop-plain", "noop-ours")
        }
        for i in range(args.runs):
            times["noop-plain"].append(timed(lambda: run_noop_plain(noop_script)))
            times["noop-ours"].append(timed(lambda: run_noop_ours(ours)))
            times["plain"].append(timed(lambda: run_plain(script, tmp)))
            times["1x2"].append(timed(lambda: run_ours(ours, 1)))
            times["pkgs"].append(timed(lambda: run_ours(ours, 1, rc)))
            times["2x2"].append(timed(lambda: run_ours(ours, 2)))
            if sdk is not None and i < args.sdk_runs:
                times["sdk"].append(timed(lambda: run_sdk(sdk)))
            print(
                f"round {i + 1}: "
                + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in times.items() if len(v) > i),
                flush=True,
            )

        plain, one, two, pkgs, sdk_t = (
            med(times[k]) for k in ("plain", "1x2", "2x2", "pkgs", "sdk")
        )
        print()
        print(
            f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; medians of "
            f"{args.runs} runs (SDK: {len(times['sdk'])})"
        )
        print(f"plain torchrun --nproc-per-node 2      {plain:6.2f} s")
        print(
            f"kf-jupyter local 1x2 (train->Complete) {one:6.2f} s   = {one / plain:.3f} x plain   (target <= 1.15)"
        )
        print(f"kf-jupyter local 2x2                   {two:6.2f} s   = {two / plain:.3f} x plain")
        print(
            f"kf-jupyter 1x2 + packages, first run   {first_pkg:6.2f} s   (builds the layered env once)"
        )
        print(
            f"kf-jupyter 1x2 + packages, later runs  {pkgs:6.2f} s   = +{pkgs - one:.2f} s over no packages (target < 1 s)"
        )
        npl, nours = med(times["noop-plain"]), med(times["noop-ours"])
        print(
            f"fixed overhead (no-op function, 1 process): python3 script {npl * 1000:.0f} ms, "
            f"ours train->Complete {nours * 1000:.0f} ms (+{(nours - npl) * 1000:.0f} ms)"
        )
        paired = [o / p for o, p in zip(times["1x2"], times["plain"])]
        print(
            f"paired per-round ratio ours 1x2 / plain: median {med(paired):.3f} "
            f"(rounds: {', '.join(f'{r:.2f}' for r in paired)})"
        )
        if times["sdk"]:
            print(
                f"Kubeflow SDK 0.5.0 local (1 process)   {sdk_t:6.2f} s   = {sdk_t / one:.1f} x ours 1x2   (target >= 5)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
