"""Warm-start benchmark (issue 15): prints figures, side by side in one run (not a test).

Per round, interleaved so every variant shares the machine's load:
  plain 1x2 / 2x2   `torchrun` agents run by hand on 127.0.0.1 (the floor a user knows)
  first 1x2         kf-jupyter on a fresh state folder: the pool is started by this job
  warm 1x2 / 2x2    kf-jupyter, second and later jobs (ranks forked from the pool)
  cold/warm jax     JAXTrainer 2 processes, Warm(False) vs warm
  cold/warm xgb     XGBoostTrainer 2 workers, Warm(False) vs warm
The torch job: init_process_group("gloo"), all_reduce, destroy_process_group. Also measured on
warm jobs: submit -> first user log line seen by the log follower the monitor uses, and the last
rank's exit (a timestamp written as its function returns) -> wait_for_job_status returning.
Then 50 consecutive warm jobs: the pool process's RSS and open fds before and after.

Targets: warm whole job <= 0.5x plain torchrun (moonshot 0.3x); first run <= 1.15x; submit to
first line <= 0.5 s; last exit to wait return <= 0.2 s; JAX/XGBoost warm <= 0.5x cold; pool RSS
and fds flat over 50 jobs.

    .venv/bin/python bench/bench_warm.py [--rounds 5] [--soak 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from kf_jupyter.backends.local.ports import free_port

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def ddp(stamp_dir=None):
    import os
    import time

    import torch
    import torch.distributed as dist

    print("first line", flush=True)
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    if stamp_dir:
        with open(os.path.join(stamp_dir, os.environ["RANK"]), "w") as fh:
            fh.write(repr(time.time()))
    return float(t)


def jax_job():
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    return float(multihost_utils.process_allgather(jnp.ones(1)).sum())


def xgb_job():
    import numpy as np
    import xgboost as xgb

    rng = np.random.default_rng(0)
    x = rng.random((200, 4))
    xgb.train({"objective": "reg:squarederror", "nthread": 1}, xgb.DMatrix(x, x[:, 0]), 3)
    return 1


PLAIN = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    """
)


def run_plain(script: Path, nodes: int, tmp: Path) -> float:
    bindir = os.path.dirname(sys.executable)
    env = dict(os.environ, TMPDIR=str(tmp), PATH=bindir + os.pathsep + os.environ["PATH"])
    port = free_port()
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                os.path.join(bindir, "torchrun"),
                "--nnodes",
                str(nodes),
                "--node-rank",
                str(i),
                "--nproc-per-node",
                "2",
                "--master-addr",
                "127.0.0.1",
                "--master-port",
                str(port),
                str(script),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(nodes)
    ]
    for p in procs:
        if p.wait() != 0:
            raise SystemExit("plain torchrun failed")
    return time.perf_counter() - t0


def run_ours(client, trainer, options=()) -> tuple[float, str]:
    t0 = time.perf_counter()
    name = client.train(trainer, options=list(options))
    client.wait_for_job_status(name, timeout=600)
    return time.perf_counter() - t0, name


def warm_latencies(client, nodes: int, tmp: Path) -> tuple[float, float, float]:
    """Of one warm job: submit -> first user line seen by the follower; the last rank's function
    returning -> wait returning (the rank's own exit: atexit handlers, flushes, included); the
    last node process's exit (the supervisor's Exited event) -> wait returning."""
    from kf_jupyter import TorchTrainer

    stamps = Path(tempfile.mkdtemp(dir=tmp))
    first: list[float] = []
    t0 = time.time()
    name = client.train(
        TorchTrainer(
            func=ddp, func_args={"stamp_dir": str(stamps)}, num_nodes=nodes, num_proc_per_node=2
        )
    )

    def follow() -> None:
        for rec in client.iter_log_records(name, follow=True):
            if "first line" in rec.line:
                first.append(time.time())
                return

    th = threading.Thread(target=follow, daemon=True)
    th.start()
    client.wait_for_job_status(name, timeout=600)
    t_wait = time.time()
    th.join(timeout=10)
    returned = max(float(p.read_text()) for p in stamps.iterdir())
    exited = max(
        e.time.timestamp() for e in client.get_job_events(name) if e.reason == "Exited" and e.time
    )
    return (first[0] - t0 if first else float("nan")), t_wait - returned, t_wait - exited


def pool_stats(state: Path) -> tuple[int, int, int]:
    from kf_jupyter.backends.local.warm.pool import list_pools

    pools = [p for p in list_pools(state) if p.get("alive") and p["framework"] == "torch"]
    p = pools[0]
    return int(p["rss_bytes"]), int(p.get("uss_bytes") or 0), int(p["fds"])


def fmt(xs: list[float]) -> str:
    return f"min {min(xs):6.2f}  median {statistics.median(xs):6.2f}  max {max(xs):6.2f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--soak", type=int, default=50)
    a = ap.parse_args()

    from kf_jupyter import JAXTrainer, TorchTrainer, TrainerClient, XGBoostTrainer
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.backends.local.warm.pool import stop_all
    from kf_jupyter.options import Warm

    tmp = Path(tempfile.mkdtemp(prefix="kfj-bench-warm-"))
    script = tmp / "plain.py"
    script.write_text(PLAIN)
    state = tmp / "state"
    client = TrainerClient(LocalBackendConfig(state_dir=state))
    t = {k: [] for k in ("plain12", "plain22", "first12", "warm12", "warm22", "coldjax",
                         "warmjax", "coldxgb", "warmxgb", "firstline", "exitwait", "nodewait")}  # fmt: skip

    def torch1x2():
        return TorchTrainer(func=ddp, num_nodes=1, num_proc_per_node=2)

    def torch2x2():
        return TorchTrainer(func=ddp, num_nodes=2, num_proc_per_node=2)

    # Warm the pools once (the first job of each framework starts its pool).
    for tr in (torch1x2(), JAXTrainer(func=jax_job, num_nodes=2)):
        run_ours(client, tr)
    run_ours(client, XGBoostTrainer(func=xgb_job, num_nodes=2))
    for r in range(a.rounds):
        t["plain12"].append(run_plain(script, 1, tmp))
        fresh = TrainerClient(LocalBackendConfig(state_dir=tmp / f"fresh-{r}"))
        t["first12"].append(run_ours(fresh, torch1x2())[0])
        stop_all(tmp / f"fresh-{r}")
        t["warm12"].append(run_ours(client, torch1x2())[0])
        t["plain22"].append(run_plain(script, 2, tmp))
        t["warm22"].append(run_ours(client, torch2x2())[0])
        t["coldjax"].append(
            run_ours(client, JAXTrainer(func=jax_job, num_nodes=2), [Warm(False)])[0]
        )
        t["warmjax"].append(run_ours(client, JAXTrainer(func=jax_job, num_nodes=2))[0])
        t["coldxgb"].append(
            run_ours(client, XGBoostTrainer(func=xgb_job, num_nodes=2), [Warm(False)])[0]
        )
        t["warmxgb"].append(run_ours(client, XGBoostTrainer(func=xgb_job, num_nodes=2))[0])
        fl, ew, nw = warm_latencies(client, 1, tmp)
        t["firstline"].append(fl)
        t["exitwait"].append(ew)
        t["nodewait"].append(nw)
        print(f"round {r + 1}/{a.rounds} done", flush=True)

    def pairs(num: str, den: str) -> list[float]:
        return [x / y for x, y in zip(t[num], t[den], strict=True)]

    print(f"\nwarm-start benchmark, {a.rounds} interleaved rounds, {os.cpu_count()} CPUs (seconds)")
    for k, label in (
        ("plain12", "plain torchrun 1x2"),
        ("first12", "kf-jupyter 1x2, first job (starts the pool)"),
        ("warm12", "kf-jupyter 1x2, warm"),
        ("plain22", "plain torchrun 2x2"),
        ("warm22", "kf-jupyter 2x2, warm"),
        ("coldjax", "JAX 2 processes, cold"),
        ("warmjax", "JAX 2 processes, warm"),
        ("coldxgb", "XGBoost 2 workers, cold"),
        ("warmxgb", "XGBoost 2 workers, warm"),
        ("firstline", "warm: submit -> first user log line"),
        ("exitwait", "warm: last rank's function returns -> wait"),
        ("nodewait", "warm: last node process exits -> wait"),
    ):
        print(f"  {label:46s} {fmt(t[k])}")
    print("paired ratios (per round), median [min-max]:")
    for num, den, label, target in (
        ("warm12", "plain12", "warm 1x2 / plain torchrun 1x2", "<= 0.5 (moonshot 0.3)"),
        ("warm22", "plain22", "warm 2x2 / plain torchrun 2x2", "<= 0.5 (moonshot 0.3)"),
        ("first12", "plain12", "first 1x2 / plain torchrun 1x2", "<= 1.15"),
        ("warmjax", "coldjax", "JAX warm / cold", "<= 0.5"),
        ("warmxgb", "coldxgb", "XGBoost warm / cold", "<= 0.5"),
    ):
        rs = pairs(num, den)
        print(
            f"  {label:36s} {statistics.median(rs):5.2f} [{min(rs):.2f}-{max(rs):.2f}]  target {target}"
        )
    print(
        f"  {'submit -> first line (median s)':36s} {statistics.median(t['firstline']):5.2f}"
        "        target <= 0.5"
    )
    print(
        f"  {'function return -> wait (median s)':36s} {statistics.median(t['exitwait']):5.2f}"
        "        target <= 0.2 (includes the rank's own exit)"
    )
    print(
        f"  {'node process exit -> wait (median s)':36s} {statistics.median(t['nodewait']):5.2f}"
        "        target <= 0.2"
    )

    rss0, uss0, fds0 = pool_stats(state)
    for _ in range(a.soak):
        run_ours(client, torch1x2())
    rss1, uss1, fds1 = pool_stats(state)
    print(
        f"torch pool process over {a.soak} warm jobs: RSS {rss0 / 2**20:.0f} -> {rss1 / 2**20:.0f} MiB, "
        f"USS {uss0 / 2**20:.0f} -> {uss1 / 2**20:.0f} MiB, open fds {fds0} -> {fds1}"
    )
    from kf_jupyter.backends.local.warm.pool import list_pools

    for p in list_pools(state):
        if p.get("alive"):
            print(
                f"  idle pool {p['framework']:8s} pid {p['pid']}: RSS {p['rss_bytes'] / 2**20:.0f} MiB, "
                f"USS {(p.get('uss_bytes') or 0) / 2**20:.0f} MiB, {p['launches']} launches"
            )
    stop_all(state)
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
