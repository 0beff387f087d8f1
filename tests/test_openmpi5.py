"""Issue 19 item 6: the MPI job paths run under Open MPI 5, the MPI of the deepspeed image.

Debian gives Open MPI 4.1 (`mpirun` on PATH); scripts/setup.sh installs Open MPI 5 from PyPI
(requirements/openmpi5.txt) into `.venv/opt/openmpi5`, and these tests put it first on PATH:
its `mpirun` (PRRTE) starts the ranks and sets the library path, so mpi4py's ranks load its
`libmpi.so.40`. Under 5, mpirun reports a failed rank in another form (`[prterun-HOST-PID@1,1]`,
its signal line wrapped), which the local backend did not read: a rank ended by `os._exit` or a
signal was not named (the two failure tests failed before).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import MPITrainer, RuntimeConfig
from kf_jupyter.backends.local.supervisor import failed_rank
from kf_jupyter.errors import JobFailedError
from kf_jupyter.types import COMPLETE

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401

OMPI5 = Path(sys.prefix) / "opt" / "openmpi5"

# What Open MPI 5.0.11's prterun printed here for a rank ended by os._exit(3) and by SIGKILL.
PRTE_EXIT = """\
--------------------------------------------------------------------------
prterun detected that one or more processes exited with non-zero status,
thus causing the job to be terminated. The first process to do so was:

   Process name: [prterun-vm-16578@1,1]
   Exit code:    3
--------------------------------------------------------------------------
"""
PRTE_SIGNAL = """\
--------------------------------------------------------------------------
prterun noticed that process rank 1 with PID 16614 on node vm exited on
signal 9 (Killed).
--------------------------------------------------------------------------
"""
# Open MPI 4.1.4's for the same two.
ORTE_EXIT = """\
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[41213,1],1]
  Exit code:    3
"""
ORTE_SIGNAL = (
    "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(PRTE_EXIT, (1, 3)), (PRTE_SIGNAL, (1, -9)), (ORTE_EXIT, (1, 3)), (ORTE_SIGNAL, (1, -9))],
    ids=["5-exit", "5-signal", "4-exit", "4-signal"],
)
def test_mpirun_failure_reports_of_both_versions_name_the_rank(tmp_path, text, expected) -> None:
    assert failed_rank(str(tmp_path), {"launcher": text}) == expected


@pytest.fixture(scope="session")
def openmpi5() -> Path:
    """The bin folder of Open MPI 5 (installed by scripts/setup.sh)."""
    mpirun = OMPI5 / "bin" / "mpirun"
    out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, check=False)
    assert "Open MPI) 5." in out.stdout, (
        f"Open MPI 5 is not at {OMPI5}: run `bash scripts/setup.sh` (requirements/openmpi5.txt)"
    )
    return mpirun.parent


@pytest.fixture
def on_openmpi5(openmpi5: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Open MPI 5's mpirun first on PATH for this test (local jobs and the harness's pods)."""
    monkeypatch.setenv("PATH", f"{openmpi5}{os.pathsep}{os.environ.get('PATH', '')}")
    return openmpi5


def mpi5_probe() -> dict:
    import os

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    seen = comm.gather([os.environ.get("OMPI_COMM_WORLD_RANK"), os.environ.get("GREETING")])
    return {
        "library": MPI.Get_library_version().split(",")[0],
        "size": comm.Get_size(),
        "sum": comm.allreduce(comm.Get_rank() + 1),
        "seen": seen,
    }


@pytest.mark.slow
def test_local_mpi_job_runs_under_openmpi5(client, on_openmpi5) -> None:
    name = client.train(
        MPITrainer(func=mpi5_probe, num_nodes=2, num_proc_per_node=2),
        runtime_config=RuntimeConfig(env={"GREETING": "hi"}),
    )
    client.wait_for_job_status(name, timeout=240)
    result = client.get_job_result(name)
    assert result["library"] == "Open MPI v5.0.11"
    assert (result["size"], result["sum"]) == (4, 10)
    assert result["seen"] == [[str(r), "hi"] for r in range(4)]
    assert_no_orphans(name)


def mpi5_rank_one_exits() -> None:
    import os

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 1:
        os._exit(3)
    comm.Barrier()


def mpi5_rank_one_killed() -> None:
    import os
    import signal

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    comm.Barrier()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("func", "how"),
    [(mpi5_rank_one_exits, "exit code 3"), (mpi5_rank_one_killed, "killed by signal 9 (SIGKILL)")],
    ids=["exit", "signal"],
)
def test_local_mpi_failure_under_openmpi5_names_the_rank(client, on_openmpi5, func, how) -> None:
    name = client.train(MPITrainer(func=func, num_nodes=1, num_proc_per_node=2))
    with pytest.raises(JobFailedError):
        client.wait_for_job_status(name, timeout=240)
    job = client.get_job(name)
    assert job.failure is not None, job.message
    assert (job.failure.source, job.failure.exc_type) == ("Rank 1", how), job.message
    assert_no_orphans(name)


@pytest.fixture
def k8s_backend(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig

    cfg = KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    return KubernetesBackend(cfg)


@pytest.mark.slow
def test_harness_mpi_launcher_runs_under_openmpi5(k8s_backend, on_openmpi5) -> None:
    """The one-script command on `deepspeed-distributed` (`runLauncherAsNode`): `mpirun
    --hostfile` over the launcher and one node pod, `-x GREETING` to the rank on the node pod."""
    name = k8s_backend.train(
        MPITrainer(func=mpi5_probe, num_nodes=2, num_proc_per_node=2),
        runtime_config=RuntimeConfig(env={"GREETING": "hi"}),
    )
    job = k8s_backend.wait_for_job_status(name, timeout=240)
    assert job.status == COMPLETE
    result = k8s_backend.get_job_result(name)
    assert result["library"] == "Open MPI v5.0.11"
    # num_nodes=2 with the launcher as a node: 1 node pod + the launcher, 2 slots each
    assert (result["size"], result["sum"]) == (4, 10)
    assert result["seen"] == [[str(r), "hi"] for r in range(4)]
