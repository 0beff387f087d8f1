"""Two DeepSpeed (MPI) jobs at once on one machine each rendezvous on a port of their own
(issue 39).

Real DeepSpeed (requirements/deepspeed.txt, installed apart in .venv/opt/deepspeed) under real
mpirun: the program is DeepSpeed's own launcher convention, `deepspeed.init_distributed()`
under `mpirun`, which finds the world with MPI and sets MASTER_PORT to 29500 unless told
otherwise. On a cluster each pod has its own network; here both jobs took 29500 and one failed
with EADDRINUSE, its cause reported as rank 0's secondary "Connection closed by peer".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kf_jupyter import MPITrainer

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401

DEEPSPEED = Path(__file__).resolve().parents[1] / ".venv" / "opt" / "deepspeed"

pytestmark = pytest.mark.slow


def deepspeed_allreduce() -> dict:
    import os

    import deepspeed
    import torch
    import torch.distributed as dist

    deepspeed.init_distributed(dist_backend="gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    return {"sum": float(t), "port": os.environ["MASTER_PORT"], "world": dist.get_world_size()}


def test_two_deepspeed_jobs_at_once_each_get_their_own_port(client, monkeypatch) -> None:
    assert (DEEPSPEED / "deepspeed" / "__init__.py").exists(), "run scripts/setup.sh"
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(DEEPSPEED), path) if p))
    # The Trainer's default deepspeed runtime: one node is a world of 2 (the launcher is a host).
    names = [
        client.train(
            MPITrainer(func=deepspeed_allreduce, num_nodes=1), runtime="deepspeed-distributed"
        )
        for _ in range(2)
    ]
    results = []
    for name in names:
        job = client.wait_for_job_status(name, {"Complete", "Failed"}, timeout=600)
        assert job.status == "Complete", job.message
        results.append(client.get_job_result(name))
    assert [r["sum"] for r in results] == [2.0, 2.0]
    assert [r["world"] for r in results] == [2, 2]
    ports = [r["port"] for r in results]
    assert len(set(ports)) == 2 and "29500" not in ports, ports
    for name in names:
        assert_no_orphans(name)


def deepspeed_explicit_port(port: int) -> str:
    import os

    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo", distributed_port=port)
    return os.environ["MASTER_PORT"]


def test_a_port_the_program_passes_to_deepspeed_is_kept(client, monkeypatch) -> None:
    from kf_jupyter.backends.local.ports import free_port

    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(DEEPSPEED), path) if p))
    port = free_port()
    name = client.train(
        MPITrainer(func=deepspeed_explicit_port, func_args={"port": port}, num_nodes=1),
        runtime="deepspeed-distributed",
    )
    job = client.wait_for_job_status(name, {"Complete", "Failed"}, timeout=600)
    assert job.status == "Complete", job.message
    assert client.get_job_result(name) == str(port)
