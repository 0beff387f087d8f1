"""A job's cause is its first failure, even when that rank said nothing (issue 39).

Under mpirun (and torchrun), a rank that dies without a traceback (a crash, `os._exit`) makes
its peers fail next with errors of their own ("Connection closed by peer"). Those are reported
with a traceback, the first one was not: the cause the cell shows must still be the rank that
failed first, as mpirun's own report names it, not its peers' secondary errors.
"""

from __future__ import annotations

import pytest

from kf_jupyter import MPITrainer

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401

pytestmark = pytest.mark.slow


def rank1_dies_silently(folder: str) -> None:
    import os
    import signal
    import time

    from mpi4py import MPI

    rank = MPI.COMM_WORLD.Get_rank()
    marker = os.path.join(folder, "rank1.pid")
    if rank == 1:
        print("rank 1 loads its shard", flush=True)
        with open(marker + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(marker + ".tmp", marker)
        time.sleep(0.3)
        os._exit(3)  # a crash: no traceback, no report
    # Rank 0 talks to rank 1 until it is gone, then fails as a collective does when its peer
    # died. It ignores mpirun's SIGTERM for that moment, as a rank inside a C call would.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while not os.path.exists(marker):
        time.sleep(0.01)
    with open(marker) as fh:
        pid = int(fh.read())
    while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z":
        time.sleep(0.01)
    time.sleep(0.1)
    raise ConnectionError("[gloo] Connection closed by peer [127.0.0.1]:23456")


def test_a_rank_that_dies_silently_first_is_the_cause_not_its_peers_error(client, tmp_path) -> None:
    name = client.train(
        MPITrainer(func=rank1_dies_silently, func_args={"folder": str(tmp_path)}, num_nodes=1)
    )
    job = client.wait_for_job_status(name, {"Complete", "Failed"}, timeout=300)
    assert job.status == "Failed"
    assert job.failure is not None
    # before: "Rank 0 failed: ConnectionError: [gloo] Connection closed by peer ..."
    assert job.failure.source == "Rank 1", job.failure
    assert "exit code 3" in job.failure.exc_type
    assert any("rank 1 loads its shard" in line for line in job.failure.traceback)
    assert job.message.startswith("Rank 1 failed"), job.message
    assert_no_orphans(name)
