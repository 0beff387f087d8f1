"""Real frameworks on the local backend: torch (gloo), mpi4py, JAX and XGBoost, as a cluster runs them."""

from __future__ import annotations

import pytest

from kf_jupyter import JAXTrainer, MPITrainer, RuntimeConfig, TorchTrainer, XGBoostTrainer
from kf_jupyter.errors import JobFailedError

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401

pytestmark = pytest.mark.slow


def torch_allreduce():
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    out = {
        "world": dist.get_world_size(),
        "sum": t.item(),
        "node_rank": int(os.environ["GROUP_RANK"]),
        "pet_nnodes": os.environ["PET_NNODES"],
    }
    dist.destroy_process_group()
    return out


def torch_rank_three_raises():
    import time

    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 3:
        raise ValueError("rank three is broken")
    time.sleep(120)


def mpi_allreduce():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    total = comm.allreduce(comm.Get_rank() + 1)
    return {"size": comm.Get_size(), "sum": total}


def jax_psum():
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    x = jnp.array([float(jax.process_index() + 1)])
    total = multihost_utils.process_allgather(x).sum()
    return {
        "processes": jax.process_count(),
        "devices": len(jax.devices()),
        "sum": float(total),
    }


def xgb_train():
    import numpy as np
    import xgboost as xgb
    from xgboost import collective

    rank = collective.get_rank()
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(400, 5))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(float)
    booster = xgb.train(
        {"objective": "binary:logistic", "tree_method": "hist", "max_depth": 3},
        xgb.DMatrix(x, label=y),
        num_boost_round=5,
    )
    dump = booster.get_dump()
    import hashlib

    digest = hashlib.sha256("".join(dump).encode()).hexdigest()
    print("model", digest, flush=True)
    return {"world": collective.get_world_size(), "model": digest}


def test_torch_two_nodes_two_procs(client):
    name = client.train(TorchTrainer(func=torch_allreduce, num_nodes=2, num_proc_per_node=2))
    client.wait_for_job_status(name, timeout=240)
    assert client.get_job_result(name) == {
        "world": 4,
        "sum": 10.0,
        "node_rank": 0,
        "pet_nnodes": "2",
    }
    logs = {p.name for p in (client.backend.jobs_dir / name / "logs").iterdir()}
    assert logs == {"node-0.log", "node-1.log"} | {f"rank-{r}.log" for r in range(4)}
    # torchrun's scratch trees stay inside the job folder.
    assert list((client.backend.jobs_dir / name / "tmp").glob("torchelastic_*"))
    assert_no_orphans(name)


def test_torch_rank_failure_names_rank_and_leaves_no_orphans(client):
    name = client.train(
        TorchTrainer(func=torch_rank_three_raises, num_nodes=2, num_proc_per_node=2)
    )
    with pytest.raises(JobFailedError, match="Rank 3 failed"):
        client.wait_for_job_status(name, timeout=240)
    job = client.get_job(name)
    assert "ValueError: rank three is broken" in job.message
    assert "exit code 1" in job.message
    assert_no_orphans(name)


def test_mpi_two_by_two_allreduce(client):
    name = client.train(MPITrainer(func=mpi_allreduce, num_nodes=2, num_proc_per_node=2))
    client.wait_for_job_status(name, timeout=240)
    assert client.get_job_result(name) == {"size": 4, "sum": 10}
    logs = {p.name for p in (client.backend.jobs_dir / name / "logs").iterdir()}
    assert logs == {"launcher.log"} | {f"rank-{r}.log" for r in range(4)}
    assert_no_orphans(name)


def test_jax_two_process_psum(client):
    rc = RuntimeConfig(env={"JAX_PLATFORMS": "cpu"})
    name = client.train(JAXTrainer(func=jax_psum, num_nodes=2), runtime_config=rc)
    client.wait_for_job_status(name, timeout=240)
    assert client.get_job_result(name) == {"processes": 2, "devices": 2, "sum": 3.0}
    assert_no_orphans(name)


def test_xgboost_two_workers_train_and_agree(client):
    name = client.train(XGBoostTrainer(func=xgb_train, num_nodes=2))
    client.wait_for_job_status(name, timeout=240)
    result = client.get_job_result(name)
    assert result["world"] == 2
    models = [
        r.line.split()[1]
        for r in client.backend.iter_log_records(name)
        if r.line.startswith("model ")
    ]
    assert len(models) == 2 and models[0] == models[1] == result["model"]
    assert_no_orphans(name)
