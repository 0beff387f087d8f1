"""Real code runs unchanged on the local backend, with the real frameworks (issue 11).

Each test is a training cell or script as published (PyTorch's DDP example shape with argparse,
Kubeflow Trainer's XGBoost example, JAX and torch code that set themselves up), run through a
real IPython shell and the local backend: real torchrun, mpirun, JAX and XGBoost processes.
"""

from __future__ import annotations

import textwrap

import pytest

from kf_jupyter import MPITrainer

from .test_local_support import client_fixture  # noqa: F401
from .test_magics import run, shell  # noqa: F401

pytestmark = pytest.mark.slow

DDP_SCRIPT = '''\
"""DDP training shaped like PyTorch's distributed examples (synthetic data)."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 2)

    def forward(self, x):
        return self.fc(x)


def train(model, loader, optimizer, epoch, rank):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"rank {rank} epoch {epoch} loss {loss.item():.4f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description="PyTorch DDP example")
    parser.add_argument("--epochs", type=int, default=14, help="epochs to train")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--save-model", default=None, help="folder to save the model in")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(256, 20), torch.randint(0, 2, (256,)))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data))
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        loader.sampler.set_epoch(epoch)
        train(model, loader, optimizer, epoch, rank)
    if args.save_model and rank == 0:
        # the whole model is pickled: its class must live in __main__, as under `python`
        torch.save(model.module, os.path.join(args.save_model, "model.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def test_ddp_argparse_script_pasted_into_a_cell(shell, capsys, tmp_path):  # noqa: F811
    cell = f"%%torchtrain -n 1 -p 2 -- --epochs 2 --save-model {tmp_path}\n" + DDP_SCRIPT
    result, out, err = run(shell, capsys, cell)
    assert result.success, out + err
    for rank in (0, 1):
        assert f"[rank-{rank}] rank {rank} epoch 2 loss" in out
    assert "epoch 3" not in out
    assert "unrecognized arguments" not in out + err
    assert (tmp_path / "model.pt").stat().st_size > 0


def test_line_magic_runs_a_script_file_with_its_arguments(shell, capsys, tmp_path, monkeypatch):  # noqa: F811
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    monkeypatch.chdir(tmp_path)
    result, out, err = run(shell, capsys, "%torchtrain train.py -n 1 -p 2 -- --epochs 3")
    assert result.success, out + err
    assert "[rank-1] rank 1 epoch 3 loss" in out and "epoch 4" not in out
    # --help after ` -- ` is the script's: argparse prints its usage and exits 0
    result, out, err = run(shell, capsys, "%torchtrain train.py -n 1 -p 1 -- --help")
    assert result.success, out + err
    assert "usage: train.py [-h] [--epochs EPOCHS]" in out


def test_hydra_program_finds_its_config_by_its_code_file(shell, capsys, tmp_path, monkeypatch):  # noqa: F811
    """PyTorch's minGPT-ddp shape: `@hydra.main(config_path=".")` resolves the folder from the
    code's file, which is the script's own path on every rank, as under torchrun (issue 39)."""
    pytest.importorskip("hydra")
    from .test_scripts import hydra_folder

    script = hydra_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    line = "gpt/main.py -n 1 -p 2 --timeout 240 -- trainer_config.max_epochs=2"
    result, out, err = run(shell, capsys, f"%torchtrain {line}")
    assert result.success, out + err
    for rank in (0, 1):
        assert f"RANK {rank} EPOCHS 2 CODE {script}" in out, out + err


MPI_SCRIPT = """\
import argparse
from mpi4py import MPI

p = argparse.ArgumentParser()
p.add_argument("--greeting")
args = p.parse_args()
comm = MPI.COMM_WORLD
print(args.greeting, comm.Get_rank(), "of", comm.Get_size(), flush=True)
"""


def test_python_api_script_on_mpi(client, tmp_path):
    path = tmp_path / "hello_mpi.py"
    path.write_text(MPI_SCRIPT)
    trainer = MPITrainer(
        script=str(path), script_args=["--greeting", "hi there"], num_nodes=1, num_proc_per_node=2
    )
    name = client.train(trainer)
    client.wait_for_job_status(name, timeout=240)
    lines = [r.line for r in client.backend.iter_log_records(name)]
    # deepspeed-distributed runs the launcher as a node: num_nodes=1 is the launcher plus one
    # node pod, two hosts of 2 slots, 4 ranks, as on a cluster (mpi.go; docs/decisions.md).
    assert {f"hi there {r} of 4" for r in range(4)} <= set(lines), lines


FUTURE_CELL = """\
# Parsed with postponed annotations, as in the file this came from.
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Node:
    value: int
    nxt: Node | None = None


print("sum", Node(1, Node(2)).nxt.value + 1, flush=True)
"""


@pytest.mark.parametrize("ending", ["", "return Node(5).value\n"])
def test_future_import_cell_runs_locally(shell, capsys, ending):  # noqa: F811
    result, out, err = run(shell, capsys, "%%torchtrain -n 1 -p 1 -o job\n" + FUTURE_CELL + ending)
    assert result.success, out + err
    assert "[rank-0] sum 3" in out
    assert shell.user_ns["job"].result == (5 if ending else None)


# -- code that does its own framework set-up ---------------------------------------------------

# Shaped like kubeflow/trainer examples/xgboost/distributed-training/xgboost-distributed.ipynb
# (synthetic data from numpy instead of sklearn).
KUBEFLOW_XGBOOST = """\
import os

import numpy as np
import xgboost as xgb
from xgboost import collective as coll
from xgboost.tracker import RabitTracker

rank = int(os.environ["DMLC_TASK_ID"])
world_size = int(os.environ["DMLC_NUM_WORKER"])
tracker_uri = os.environ["DMLC_TRACKER_URI"]
tracker_port = int(os.environ["DMLC_TRACKER_PORT"])
print(f"Worker {rank}/{world_size} starting...", flush=True)

tracker = None
if rank == 0:
    tracker = RabitTracker(host_ip="0.0.0.0", n_workers=world_size, port=tracker_port)
    tracker.start()

with coll.CommunicatorContext(
    dmlc_tracker_uri=tracker_uri,
    dmlc_tracker_port=tracker_port,
    dmlc_task_id=str(rank),
):
    rng = np.random.default_rng(42 + rank)
    x = rng.normal(size=(2000, 10))
    y = (x[:, 0] + x[:, 1] > 0).astype(float)
    dtrain = xgb.DMatrix(x, label=y)
    model = xgb.train({"objective": "binary:logistic", "max_depth": 4}, dtrain, num_boost_round=5)
    print(f"Worker {coll.get_rank()}/{coll.get_world_size()} trees {len(model.get_dump())}")

if tracker is not None:
    tracker.wait_for()
print(f"Worker {rank}: Training complete!", flush=True)
"""


@pytest.mark.parametrize("flags", ["", "--no-setup"])
def test_kubeflow_xgboost_example_runs_unchanged(shell, capsys, flags):  # noqa: F811
    result, out, err = run(shell, capsys, f"%%xgboosttrain -n 2 {flags}\n" + KUBEFLOW_XGBOOST)
    assert result.success, out + err
    for rank in (0, 1):
        assert f"Worker {rank}/2 trees 5" in out
        assert f"Worker {rank}: Training complete!" in out
    assert "Address already in use" not in out + err


def test_hidden_own_tracker_collision_names_cause_and_fix(shell, capsys):  # noqa: F811
    # The tracker is looked up by a computed name, so no scan can see it: the built-in set-up
    # runs, and the second tracker on the same port fails. The error must say why and what to do.
    hidden = KUBEFLOW_XGBOOST.replace(
        "from xgboost.tracker import RabitTracker\n",
        "import importlib\nTracker = getattr(importlib.import_module('xgboost.tracker'), "
        "'Rabit' + 'Tracker')\n",
    ).replace("RabitTracker(", "Tracker(")
    assert "RabitTracker" not in hidden and "CommunicatorContext" in hidden
    hidden = hidden.replace(
        "coll.CommunicatorContext(", "getattr(coll, 'Communicator' + 'Context')("
    )
    result, out, err = run(shell, capsys, "%%xgboosttrain -n 2 --timeout 200\n" + hidden)
    assert not result.success
    text = out + err
    # the failure itself (what the cell's error shows first) names the cause and the fixes
    reason = text.split("failed", 1)[1]
    assert "SetupCollisionError: The code starts its own XGBoost RabitTracker" in reason
    assert "'Address already in use'" in reason
    assert "--no-setup" in reason and "setup_collective=False" in reason


JAX_OWN_INIT = textwrap.dedent(
    """\
    import os

    import jax

    {call}
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    total = multihost_utils.process_allgather(jnp.array([jax.process_index() + 1.0])).sum()
    return {{"processes": jax.process_count(), "sum": float(total)}}
    """
)


@pytest.mark.parametrize(
    "call",
    [
        "jax.distributed.initialize()",
        "jax.distributed.initialize(\n"
        "    coordinator_address=os.environ['JAX_COORDINATOR_ADDRESS'],\n"
        "    num_processes=int(os.environ['JAX_NUM_PROCESSES']),\n"
        "    process_id=int(os.environ['JAX_PROCESS_ID']),\n"
        "    initialization_timeout=120,\n"
        ")",
    ],
    ids=["no-arguments", "explicit"],
)
def test_jax_code_that_initializes_itself(shell, capsys, call):  # noqa: F811
    cell = "%%jaxtrain -n 2 --env JAX_PLATFORMS=cpu -o job\n" + JAX_OWN_INIT.format(call=call)
    result, out, err = run(shell, capsys, cell)
    assert result.success, out + err
    assert shell.user_ns["job"].result == {"processes": 2, "sum": 3.0}


@pytest.mark.parametrize("init", ["tcp", "env"])
def test_torch_explicit_init_process_group(shell, capsys, init):  # noqa: F811
    method = (
        "f\"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}\""
        if init == "tcp"
        else '"env://"'
    )
    cell = (
        "%%torchtrain -n 1 -p 2 -o job\n"
        "import os\n"
        "import torch\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group(\n"
        f'    backend="gloo", init_method={method},\n'
        "    rank=int(os.environ['RANK']), world_size=int(os.environ['WORLD_SIZE']),\n"
        ")\n"
        "t = torch.ones(1) * (dist.get_rank() + 1)\n"
        "dist.all_reduce(t)\n"
        "dist.destroy_process_group()\n"
        "return t.item()\n"
    )
    result, out, err = run(shell, capsys, cell)
    assert result.success, out + err
    assert shell.user_ns["job"].result == 3.0
