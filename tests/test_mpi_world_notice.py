"""`%%mpitrain -n 1 -p 2` on the default `deepspeed-distributed` runtime runs 4 ranks (Trainer
v2.3's runLauncherAsNode: one node pod plus the launcher, 2 slots each); the cell says so at
submit, before the job's logs, whenever the world is not nodes × processes (issue 39)."""

from __future__ import annotations

import pytest

from kf_jupyter import MPITrainer, TorchTrainer
from kf_jupyter.backends.local.runtimes import local_runtimes
from kf_jupyter.magics.world import world_notice

from .test_magics import run, shell  # noqa: F401


def _runtime(name: str):
    return next(r for r in local_runtimes() if r.name == name)


def test_the_notice_says_the_world_and_why_only_when_it_differs():
    ds = _runtime("deepspeed-distributed")
    text = world_notice(MPITrainer(func=print, num_nodes=1, num_proc_per_node=2), ds)
    assert text == (
        "kf-jupyter: this job runs 4 processes, not 1 node × 2 processes = 2: runtime "
        "'deepspeed-distributed' runs its MPI launcher as a host too (runLauncherAsNode, "
        "Kubeflow Trainer v2.3), so 1 node pod plus the launcher are 2 hosts with 2 slots "
        "each; for a world of 2 (as mpirun -n 2) use -n 2 -p 1."
    )
    one = world_notice(MPITrainer(func=print, num_nodes=1, num_proc_per_node=1), ds)
    assert one is not None and "runs 2 processes, not 1 node × 1 process = 1" in one
    assert "use -n" not in one  # no MPI runtime here runs a world of 1
    # nodes × processes is the world: nothing to say
    assert world_notice(MPITrainer(func=print, num_nodes=2, num_proc_per_node=1), ds) is None
    assert world_notice(MPITrainer(func=print, num_nodes=3, num_proc_per_node=2), ds) is None
    torch = _runtime("torch-distributed")
    assert world_notice(TorchTrainer(func=print, num_nodes=1, num_proc_per_node=2), torch) is None


MPI_CELL = """\
from mpi4py import MPI

comm = MPI.COMM_WORLD
print("RANK", comm.Get_rank(), "OF", comm.Get_size(), flush=True)
"""


@pytest.mark.slow
def test_mpitrain_says_the_world_at_submit_before_the_logs(shell, capsys):  # noqa: F811
    result, out, err = run(shell, capsys, f"%%mpitrain -n 1 -p 2 --timeout 240\n{MPI_CELL}")
    assert result.success, out + err
    notice = out.index("kf-jupyter: this job runs 4 processes, not 1 node × 2 processes = 2")
    first_log = out.index("RANK ")
    assert notice < first_log, out
    assert "RANK 3 OF 4" in out
    # -n 2 -p 1 is a world of 2, as asked: no notice
    result, out, err = run(shell, capsys, f"%%mpitrain -n 2 -p 1 --timeout 240\n{MPI_CELL}")
    assert result.success, out + err
    assert "RANK 1 OF 2" in out and "this job runs" not in out + err
