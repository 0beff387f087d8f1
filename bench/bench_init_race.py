"""How often the Kubeflow SDK's torch example fails on a loaded machine, with and without
`TORCH_DIST_INIT_BARRIER=1` (which the local backend sets by default; docs/local-backend.md).

The training function is the SDK's: `init_process_group("gloo")`, print, `destroy_process_group`,
in 2-rank jobs. Without torch's init barrier, a rank that gets through `init_process_group` first
and exits at once can close the gloo mesh while its peer is still connecting. The peer then
fails with "Gloo connectFullMesh failed ... Connection closed by peer". The two settings run
alternately in one run, next to a CPU hog of `--load` busy processes per CPU (0: none), and the
counts are printed.

    .venv/bin/python bench/bench_init_race.py [--jobs 100] [--load 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time

from kf_jupyter import LocalBackendConfig, RuntimeConfig, TorchTrainer, TrainerClient
from kf_jupyter.errors import JobFailedError


def train_func() -> None:
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}")
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=100, help="jobs per setting")
    ap.add_argument("--load", type=int, default=4, help="busy processes per CPU beside the jobs")
    args = ap.parse_args()
    hog = [
        subprocess.Popen(["bash", "-c", "while :; do :; done"])
        for _ in range(args.load * (os.cpu_count() or 1))
    ]
    settings = {"without (TORCH_DIST_INIT_BARRIER=0)": "0", "with (the default)": "1"}
    failed = dict.fromkeys(settings, 0)
    seconds = dict.fromkeys(settings, 0.0)
    try:
        with tempfile.TemporaryDirectory() as state:
            client = TrainerClient(LocalBackendConfig(state_dir=state))
            for _ in range(args.jobs):
                for label, value in settings.items():
                    start = time.monotonic()
                    name = client.train(
                        TorchTrainer(func=train_func, num_nodes=1, num_proc_per_node=2),
                        runtime_config=RuntimeConfig(env={"TORCH_DIST_INIT_BARRIER": value}),
                    )
                    try:
                        client.wait_for_job_status(name, timeout=300)
                    except JobFailedError:
                        failed[label] += 1
                    seconds[label] += time.monotonic() - start
                    client.delete_job(name)
    finally:
        for p in hog:
            p.kill()
            p.wait()
    print(f"{args.jobs} two-rank jobs per setting, {len(hog)} busy processes beside them")
    for label in settings:
        mean = seconds[label] / args.jobs
        print(f"  {label:36s} failed {failed[label]:3d}   mean {mean:.2f} s per job")


if __name__ == "__main__":
    main()
