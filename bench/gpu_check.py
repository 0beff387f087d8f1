"""The real-GPU check of the local backend's GPUs (issue 24), for a machine with NVIDIA GPUs.

    .venv/bin/python bench/gpu_check.py [--rounds 3]

It needs torch with CUDA and at least one GPU (two for the per-node check). It prints:
1. the GPUs nvidia-smi lists;
2. a 1x1 NCCL all_reduce on CUDA, cold (Warm(False)) and warm (from the pool), train() ->
   Complete per round, and the warm/cold ratio (paired per round);
3. with 2+ GPUs, a 2-node x 1-GPU job: CUDA_VISIBLE_DEVICES per node, distinct devices, and
   torch's view (device_count 1, the device's UUID is the one given), NCCL all_reduce across
   the two nodes;
4. an over-request (one more GPU than exist) refused at train();
5. the warm pool process has not loaded the CUDA driver (no libcuda.so in its maps).
Exit code 0 when every check passed. The figures go in docs/local-backend.md ("GPUs").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def allreduce() -> dict[str, Any]:
    """One NCCL all_reduce of (rank + 1) over every rank, on this rank's CUDA device."""
    import json
    import os
    import time

    import torch
    import torch.distributed as dist

    t0 = time.time()
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    x = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    out = {
        "rank": dist.get_rank(),
        "world": dist.get_world_size(),
        "sum": float(x.item()),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "device_count": torch.cuda.device_count(),
        "uuid": str(torch.cuda.get_device_properties(local).uuid),
        "seconds": round(time.time() - t0, 3),
    }
    print("GPUCHECK " + json.dumps(out), flush=True)
    dist.destroy_process_group()
    return out


def ranks(client: Any, name: str) -> list[dict[str, Any]]:
    """The GPUCHECK lines of a job's logs."""
    return [
        json.loads(r.line.split("GPUCHECK ", 1)[1])
        for r in client.backend.iter_log_records(name)
        if "GPUCHECK " in r.line
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from kf_jupyter import TorchTrainer, TrainerClient
    from kf_jupyter.backends.local import gpus as gpu
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.errors import JobFailedError, ValidationError
    from kf_jupyter.options import Warm

    devices = gpu.discover()
    print(f"nvidia-smi lists {len(devices)} GPU(s):")
    for d in devices:
        print(f"  {gpu.device_label(d)}  {d['uuid']}  {d['memory_mib']} MiB")
    if not devices:
        print("no GPU: nothing to check here")
        return 2
    ok = True
    state = Path(tempfile.mkdtemp(prefix="kfj-gpu-check-"))
    client = TrainerClient(LocalBackendConfig(state_dir=state))
    one = TorchTrainer(func=allreduce, num_nodes=1, resources_per_node={"gpu": 1})

    def run(trainer: Any, options: list[Any]) -> tuple[float, str]:
        t0 = time.perf_counter()
        name = client.train(trainer, options=options)
        try:
            client.wait_for_job_status(name, timeout=600)
        except JobFailedError as exc:
            print(f"  job {name} FAILED: {exc}")
        return time.perf_counter() - t0, name

    print("\n1x1 NCCL all_reduce on CUDA, train() -> Complete:")
    # A job's environment has TORCH_DIST_INIT_BARRIER=1 and the pool is keyed on it: the same
    # here, so the pool started now is the one the warm jobs use.
    os.environ.setdefault("TORCH_DIST_INIT_BARRIER", "1")
    pool = client.backend.prestart_pool("torch")
    end = time.monotonic() + 180
    while pool is not None and time.monotonic() < end:
        meta = json.loads(pool.meta.read_text()) if pool.meta.exists() else {}
        if meta.get("state") == "ready" and pool.socket.exists():
            break
        time.sleep(0.2)
    cold_t, warm_t = [], []
    for r in range(args.rounds):
        c, cname = run(one, [Warm(False)])
        w, wname = run(one, [])
        wjob = client.get_job(wname)
        got = ranks(client, cname) + ranks(client, wname)
        good = all(g["sum"] == 1.0 and g["device_count"] == 1 for g in got) and len(got) == 2
        ok &= good
        cold_t.append(c)
        warm_t.append(w)
        print(
            f"  round {r + 1}: cold {c:.2f} s, warm {w:.2f} s (started warm: {wjob.warm}), "
            f"ratio {w / c:.2f}, all_reduce {'ok' if good else 'WRONG'}; rank init+all_reduce "
            f"{[g['seconds'] for g in got]} s"
        )
    ratios = sorted(w / c for w, c in zip(warm_t, cold_t))
    print(
        f"  median cold {statistics.median(cold_t):.2f} s, warm {statistics.median(warm_t):.2f}"
        f" s, paired ratio median {statistics.median(ratios):.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]"
    )

    if len(devices) >= 2:
        print("\n2 nodes x 1 GPU, NCCL all_reduce across the nodes:")
        two = TorchTrainer(func=allreduce, num_nodes=2, resources_per_node={"gpu": 1})
        t, name = run(two, [])
        got = sorted(ranks(client, name), key=lambda g: g["rank"])
        job = client.get_job(name)
        for g in got:
            print(
                f"  rank {g['rank']}: CUDA_VISIBLE_DEVICES={g['CUDA_VISIBLE_DEVICES']} "
                f"device_count={g['device_count']} torch uuid={g['uuid']} sum={g['sum']}"
            )
        cvd = [g["CUDA_VISIBLE_DEVICES"] for g in got]
        good = (
            len(got) == 2
            and len(set(cvd)) == 2
            and all(g["sum"] == 3.0 and g["device_count"] == 1 for g in got)
            and all(str(g["CUDA_VISIBLE_DEVICES"]).endswith(g["uuid"]) for g in got)
        )
        ok &= good
        print(
            f"  {t:.2f} s, devices per node {job.gpus and {k: [d['index'] for d in v] for k, v in job.gpus.items()}}: {'ok' if good else 'WRONG'}"
        )
    else:
        print("\n(one GPU: the 2-node check needs two)")

    print("\nover-request:")
    try:
        client.train(TorchTrainer(func=allreduce, resources_per_node={"gpu": len(devices) + 1}))
        print("  NOT refused")
        ok = False
    except ValidationError as exc:
        print(f"  refused: {exc}")

    print("\nwarm pool and CUDA:")
    for meta in (state / "warm").glob("*.json"):
        pid = json.loads(meta.read_text()).get("pid")
        if pid:
            maps = Path(f"/proc/{pid}/maps").read_text()
            clean = "/libcuda.so" not in maps
            ok &= clean
            print(f"  pool {pid}: libcuda.so {'not loaded (ok)' if clean else 'LOADED'}")
    for job in client.list_jobs():
        client.delete_job(job.name)
    from kf_jupyter.backends.local.warm.pool import stop_all

    stop_all(state)
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
