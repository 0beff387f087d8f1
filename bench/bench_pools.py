"""Many warm pools against the caps (issue 21): the pool count cap, the memory cap and
least-recently-used eviction, observed on real pool processes (not a test).

Pools are told apart the way real jobs tell them apart: an import-time variable
(`PYTHONHASHSEED`) keys a pool of its own, as a job with its own `PYTHONHASHSEED` gets one.

Part 1, the count cap (`warm_max_pools`): start pools 0, 1, 2; run a real warm job on pool 0
(it becomes the most recently used); start pool 3: pool 1, the least recently used, must be
the one stopped, and a job on pool 0 must still start warm.
Part 2, the memory cap (`warm_max_memory_mib`: a new pool beside two running ones): start pools one
after another; the pools' memory together (USS) stays under the cap at every step, the oldest
going first.
Part 3: the memory of one idle pool of each installed framework (the cost of `%load_ext`).

    .venv/bin/python bench/bench_pools.py [--framework xgboost] [--pools 6]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def one():
    return 1


def main() -> None:
    """Run the benchmark and print what it saw."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", default="xgboost", choices=("torch", "jax", "xgboost"))
    ap.add_argument("--pools", type=int, default=6)
    args = ap.parse_args()

    from kf_jupyter import JAXTrainer, TorchTrainer, TrainerClient, XGBoostTrainer
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.backends.local.warm import pool as warm_pool
    from kf_jupyter.config import RuntimeConfig

    fw = args.framework
    trainer = {
        "torch": lambda: TorchTrainer(func=one, num_proc_per_node=1),
        "jax": lambda: JAXTrainer(func=one, initialize_distributed=False),
        "xgboost": lambda: XGBoostTrainer(func=one, num_nodes=1),
    }[fw]
    tmp = Path(tempfile.mkdtemp(prefix="kf-bench-pools-"))
    seed0 = os.environ.get("PYTHONHASHSEED")

    def start(client: TrainerClient, seed: int) -> warm_pool.Pool:
        os.environ["PYTHONHASHSEED"] = str(seed)
        try:
            pool = client.backend.prestart_pool(fw)
        finally:
            if seed0 is None:
                os.environ.pop("PYTHONHASHSEED", None)
            else:
                os.environ["PYTHONHASHSEED"] = seed0
        assert pool is not None
        end = time.monotonic() + 300
        while time.monotonic() < end:
            meta = warm_pool._read_meta(pool.meta) or {}
            if meta.get("state") == "ready" and pool.socket.exists():
                return pool
            time.sleep(0.05)
        raise SystemExit(f"pool {seed} did not become ready: {pool.log}")

    def alive(state: Path) -> dict[str, dict]:
        return {p["key"]: p for p in warm_pool.list_pools(state) if p["alive"]}

    def mib(pools: dict[str, dict]) -> float:
        return sum(warm_pool.pool_bytes(p) for p in pools.values()) / 2**20

    load = lambda: f"load {os.getloadavg()[0]:.1f}"  # noqa: E731
    try:
        # ---------------------------------------------------------------- part 1: count + LRU
        state = tmp / "count"
        client = TrainerClient(LocalBackendConfig(state_dir=str(state), cwd=str(tmp)))
        keys = {}
        for seed in range(3):
            keys[seed] = start(client, seed).key
            time.sleep(0.05)  # distinct times of last use
        job = client.train(trainer(), runtime_config=RuntimeConfig(env={"PYTHONHASHSEED": "0"}))
        warm0 = client.wait_for_job_status(job, timeout=300).warm
        before = set(alive(state))
        keys[3] = start(client, 3).key
        after = alive(state)
        gone = sorted(before - set(after))
        job = client.train(trainer(), runtime_config=RuntimeConfig(env={"PYTHONHASHSEED": "0"}))
        warm0_again = client.wait_for_job_status(job, timeout=300).warm
        name = {v: f"pool {k}" for k, v in keys.items()}
        print(f"\n{fw} pools, {os.cpu_count()} cores, {load()}\n")
        print("1. count cap warm_max_pools=3; pools 0, 1, 2 started, a job run on pool 0, pool 3")
        print(f"   job on pool 0 started warm: {warm0}")
        print(f"   stopped for pool 3: {[name.get(k, k) for k in gone]}   expected: ['pool 1']")
        print(f"   running: {sorted(name.get(k, k) for k in after)}")
        print(f"   a job on pool 0 after that started warm: {warm0_again}")
        warm_pool.stop_all(state)

        # ---------------------------------------------------------------- part 2: memory cap
        state = tmp / "memory"
        probe = TrainerClient(LocalBackendConfig(state_dir=str(state), cwd=str(tmp)))
        start(probe, 100)
        one_pool = mib(alive(state))
        warm_pool.stop_all(state)
        # Room for a new pool (counted at NEW_POOL_MIB until it runs) beside two running ones.
        cap = round(warm_pool.NEW_POOL_MIB[fw] + one_pool * 2.2)
        cfg = LocalBackendConfig(
            state_dir=str(state), cwd=str(tmp), warm_max_pools=100, warm_max_memory_mib=cap
        )
        client = TrainerClient(cfg)
        print(
            f"\n2. memory cap warm_max_memory_mib={cap} (one idle {fw} pool: {one_pool:.0f} MiB "
            f"USS; a new one is counted at {warm_pool.NEW_POOL_MIB[fw]:.0f} MiB until it runs)"
        )
        print(f"   {'started':>8} {'running':>8} {'together':>9} {'cap':>6}  stopped")
        keys = {}
        over = 0
        for seed in range(args.pools):
            before = set(alive(state))
            keys[seed] = start(client, 200 + seed).key
            now = alive(state)
            total = mib(now)
            over += total > cap
            gone = [f"pool {k}" for k, v in keys.items() if v in before - set(now)]
            print(f"   {'pool ' + str(seed):>8} {len(now):>8} {total:>6.0f} MiB {cap:>6}  {gone}")
        print(f"   steps over the cap: {over} of {args.pools}   expected: 0")
        warm_pool.stop_all(state)

        # ---------------------------------------------------------------- part 3: one of each
        state = tmp / "each"
        client = TrainerClient(LocalBackendConfig(state_dir=str(state), cwd=str(tmp)))
        print("\n3. one idle pool of each installed framework (what %load_ext starts)")
        for each in ("torch", "jax", "xgboost"):
            if importlib.util.find_spec(each) is None:
                continue
            pool = client.backend.prestart_pool(each, make_room=False)
            if pool is None:
                print(f"   {each:8} not started (caps)")
                continue
            end = time.monotonic() + 300
            while not pool.socket.exists() and time.monotonic() < end:
                time.sleep(0.05)
            info = next(p for p in warm_pool.list_pools(state) if p["key"] == pool.key)
            print(
                f"   {each:8} RSS {info['rss_bytes'] / 2**20:6.0f} MiB   USS "
                f"{(info['uss_bytes'] or 0) / 2**20:6.0f} MiB"
            )
        print(f"   ({load()})")
        warm_pool.stop_all(state)
    finally:
        for sub in ("count", "memory", "each"):
            warm_pool.stop_all(tmp / sub)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
