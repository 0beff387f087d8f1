"""Sweep benchmark (issue 25): prints figures, side by side in one run (not a test).

An 8-trial random sweep of a small torch DDP function (gloo, one process per trial: a linear
model trained for 30 steps, `loss=` printed), run two ways per round, interleaved so both share
the machine's load:

  sweep   `OptimizerClient().optimize(...)` with `TrialConfig(num_trials=8, parallel_trials=2)`
          on the local backend: optimize() -> the sweep is Complete (trials started warm, 2 at a
          time; the torch pool is started once before the rounds, as `%load_ext kf_jupyter`
          does in a notebook)
  cold    the same 8 parameter values run one by one with plain `torchrun --nproc-per-node 1`
          (the same function in a script): the cold path a user would otherwise take

Printed: each variant's wall time per round (median [min-max]) and the paired ratio
sweep / cold. Also checks that both found the same best learning rate.

    .venv/bin/python bench/bench_sweep.py [--rounds 3] [--trials 8] [--parallel 2]
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


def train_fn(learning_rate, steps="30"):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.1 * torch.randn(256, 1)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=float(learning_rate))
    for step in range(int(steps)):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if dist.get_rank() == 0 and step % 10 == 9:
            print(f"step={step} loss={loss.item():.6f}", flush=True)
    dist.destroy_process_group()


def write_script(tmp: Path) -> Path:
    src = textwrap.dedent(inspect.getsource(train_fn))
    script = tmp / "train.py"
    script.write_text(
        src + "\n\nif __name__ == '__main__':\n    import sys\n\n    train_fn(sys.argv[1])\n"
    )
    return script


def run_cold(script: Path, lrs: list[str], tmp: Path) -> tuple[float, dict[str, float]]:
    """The trials one by one, each a plain `torchrun --nproc-per-node 1` (cold)."""
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, TMPDIR=str(tmp), PATH=bindir + os.pathsep + os.environ["PATH"])
    losses = {}
    t0 = time.perf_counter()
    for lr in lrs:
        out = subprocess.run(
            [os.path.join(bindir, "torchrun"), "--nproc-per-node", "1", str(script), lr],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise SystemExit(f"plain torchrun failed:\n{out.stderr[-2000:]}")
        vals = [float(w[5:]) for w in out.stdout.split() if w.startswith("loss=")]
        losses[lr] = min(vals)
    return time.perf_counter() - t0, losses


def run_sweep(client, trials: int, parallel: int, seed: int) -> tuple[float, object]:
    from kf_jupyter.sdk import CustomTrainer, TrainJobTemplate
    from kf_jupyter.sdk.optimizer import Objective, RandomSearch, Search, TrialConfig

    t0 = time.perf_counter()
    name = client.optimize(
        trial_template=TrainJobTemplate(
            runtime="torch-distributed", trainer=CustomTrainer(func=train_fn, num_nodes=1)
        ),
        search_space={"learning_rate": Search.loguniform(1e-3, 3e-1)},
        objectives=[Objective(metric="loss", direction="minimize")],
        algorithm=RandomSearch(random_state=seed),
        trial_config=TrialConfig(num_trials=trials, parallel_trials=parallel),
    )
    job = client.wait_for_job_status(name, timeout=1800, polling_interval=1)
    return time.perf_counter() - t0, job


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--parallel", type=int, default=2)
    args = ap.parse_args()

    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.backends.local.warm.pool import stop_all
    from kf_jupyter.client import TrainerClient
    from kf_jupyter.sdk.optimizer import OptimizerClient
    from kf_jupyter.sweeps.local import cpu_budget
    from kf_jupyter.trainers import TorchTrainer

    tmp = Path(tempfile.mkdtemp(prefix="kf-bench-sweep-"))
    state = tmp / "state"
    cfg = LocalBackendConfig(state_dir=state, cwd=tmp)
    script = write_script(tmp)
    client = OptimizerClient(cfg)
    print(f"CPUs for trials: {cpu_budget()}; load average {os.getloadavg()[0]:.1f}")
    try:
        # The torch pool, started once (as %load_ext kf_jupyter does), ready after one job.
        tc = TrainerClient(cfg)
        tc.backend.prestart_pool("torch")
        warm_up = tc.train(TorchTrainer(func=train_fn, func_args={"learning_rate": "0.01"}))
        tc.wait_for_job_status(warm_up, timeout=600)
        sweep_t, cold_t, ratios = [], [], []
        for r in range(args.rounds):
            seed = 100 + r
            s, job = run_sweep(client, args.trials, args.parallel, seed)
            if job.status != "Complete":
                raise SystemExit(f"sweep ended {job.status}: {job.message}")
            lrs = [t.parameters["learning_rate"] for t in job.trials]
            warm = sum(bool(tc.get_job(t.trainjob.name).warm) for t in job.trials)
            c, losses = run_cold(script, lrs, tmp)
            best = client.get_best_results(job.name)
            assert best is not None
            cold_best = min(losses, key=losses.get)
            same = best.parameters["learning_rate"] == cold_best
            sweep_t.append(s)
            cold_t.append(c)
            ratios.append(s / c)
            print(
                f"round {r + 1}: sweep {s:.2f} s ({warm}/{len(job.trials)} trials warm), "
                f"cold one by one {c:.2f} s, ratio {s / c:.2f}; best lr {best.parameters['learning_rate']}"
                f" ({'same as' if same else 'DIFFERS from'} the cold runs' {cold_best})"
            )
            client.delete_job(job.name)
        print()
        print(f"| {args.trials} trials | wall time, s (median [min-max]) |")
        print("| --- | --- |")
        print(f"| sweep, {args.parallel} in parallel, warm | {fmt(sweep_t)} |")
        print(f"| one by one, plain torchrun (cold) | {fmt(cold_t)} |")
        print(f"| ratio sweep / cold (paired per round) | {fmt(ratios)} |")
    finally:
        stop_all(state)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
