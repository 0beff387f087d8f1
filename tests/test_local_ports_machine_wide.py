"""A job's rendezvous port is its own, machine-wide, until the job ends (issue 40).

Several processes (as several kernels, or a kernel and a sweep driver, would be) run many
back-to-back torch jobs at once, cold and warm, drawing their ports from the same few ports
(`KF_JUPYTER_PORT_RANGE`, so that the processes meet often): no job fails on a port. Before the
machine-wide lease, each process only remembered its own picks, and two processes took the same
free port between the check and the store's listen (EADDRINUSE, reported as the rank's failure).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kf_jupyter.backends.local import ports
from kf_jupyter.backends.local import supervisor as sv

from .test_local_support import client_fixture  # noqa: F401

WORKER = textwrap.dedent(
    """
    import json, sys
    from kf_jupyter import TorchTrainer
    from kf_jupyter.client import TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.options import Warm

    def rendezvous():
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        dist.destroy_process_group()

    state, jobs, warm_every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    client = TrainerClient(LocalBackendConfig(state_dir=state))
    out = []
    for i in range(jobs):
        warm = warm_every > 0 and i % warm_every == 0
        name = client.train(
            trainer=TorchTrainer(func=rendezvous, num_nodes=1, num_proc_per_node=1),
            options=[Warm(warm)],
        )
        job = client.wait_for_job_status(name, {"Complete", "Failed"}, timeout=600)
        out.append({"name": name, "status": job.status, "warm": warm,
                    "message": "" if job.status == "Complete" else job.message})
        if job.status == "Complete":
            client.delete_job(name)
    print(json.dumps(out))
    """
)


def _run_workers(tmp_path: Path, n: int, jobs: int, port_range: str, warm_every: int) -> list:
    work = tmp_path / "notebook"  # the jobs' folder (their workspace): nothing else in it
    work.mkdir()
    script = work / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, ports.RANGE_ENV: port_range}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path / f"state-{i}"), str(jobs), str(warm_every)],
            env=env,
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-3000:]
        results.extend(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="3 processes with their own state folders run 6 back-to-back torch jobs each at "
    "once (cold and warm) on 4 ports (KF_JUPYTER_PORT_RANGE): no job fails on a port",
    area="local",
)
def test_jobs_from_several_processes_never_take_each_others_port(tmp_path: Path) -> None:
    # Three processes, each with its own state folder (as two users, or two kernels with their
    # own folders, would have): nothing but the machine is shared. Four ports for three
    # processes: without a machine-wide lease they met on a port in every run we made (1-2
    # failed jobs of 18).
    results = _run_workers(tmp_path, n=3, jobs=6, port_range="23700-23703", warm_every=2)
    assert len(results) == 18
    failed = [r for r in results if r["status"] != "Complete"]
    assert not failed, failed
    assert {r["warm"] for r in results} == {True, False}  # both ways a node starts


def test_a_port_is_leased_until_the_job_and_its_supervisor_let_go() -> None:
    lease = ports.lease_port()
    port = lease.port
    # Another process (here: the same lease asked for again) cannot have it ...
    assert ports._claim(port) is None
    # ... nor once the kernel gave its lease back while the job's supervisor holds the port.
    hold = sv.hold_port(port)
    assert hold is not None and ports.held_by_supervisor(port)
    lease.close()
    assert ports._claim(port) is None
    hold.close()  # the job is over
    again = ports._claim(port)
    assert again is not None
    again.close()


def test_a_narrow_range_is_used_and_a_full_one_says_what_to_do(monkeypatch) -> None:
    with socket.socket() as s:  # a port someone else listens on is never chosen
        s.bind(("0.0.0.0", 0))
        s.listen()
        busy = s.getsockname()[1]
        free = ports.lease_port()
        try:
            monkeypatch.setenv(ports.RANGE_ENV, f"{free.port}-{free.port}")
            with pytest.raises(OSError, match="No port of KF_JUPYTER_PORT_RANGE"):
                ports.lease_port(wait=0.2)  # the only port is leased
        finally:
            free.close()
        got = ports.lease_port()
        assert got.port == free.port
        got.close()
        monkeypatch.setenv(ports.RANGE_ENV, f"{busy}-{busy}")
        with pytest.raises(OSError, match="Widen the range"):
            ports.lease_port(wait=0)
    monkeypatch.setenv(ports.RANGE_ENV, "80-90")
    with pytest.raises(ValueError, match="LO-HI"):
        ports.lease_port()


def test_a_port_taken_by_another_program_is_the_cause_in_one_sentence() -> None:
    torch_line = (
        "torch.distributed.DistStoreError: The server socket has failed to listen on any local "
        "network address. port: 23711, useIpv6: false, code: -98, name: EADDRINUSE, message: "
        "address already in use"
    )
    warm_line = (
        "torchrun (kf-jupyter warm start): OSError: [Errno 98] the store's port 23711 cannot "
        "listen ([Errno 98] Address already in use)"
    )
    for line in (torch_line, warm_line):
        msg = ports.taken_port_message(23711, {"node-0": f"starting\n{line}\n"})
        assert msg is not None and msg.startswith("The job's rendezvous port 23711 was taken")
        assert "run the job again" in msg
    # Another port in use, or a user's own error, is not it.
    assert ports.taken_port_message(23711, {"node-0": torch_line.replace("23711", "24000")}) is None
    assert ports.taken_port_message(23711, {"rank-0": "ValueError: bad lr 23711"}) is None


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="another program listens on a job's rendezvous port before the job does: the job "
    "fails naming the taken port in one sentence, not a rank's EADDRINUSE",
    area="local",
)
def test_a_job_whose_port_another_program_took_fails_saying_so(client, monkeypatch) -> None:
    # Another program listens on the port the job was given, before the job could (the window
    # no lease can close: it is not kf-jupyter).
    from kf_jupyter import TorchTrainer
    from kf_jupyter.options import Warm

    def rendezvous():
        import torch.distributed as dist

        dist.init_process_group("gloo")

    intruder = socket.socket()
    real_lease = ports.lease_port

    def lease_then_taken() -> ports.Lease:
        lease = real_lease()
        intruder.bind(("0.0.0.0", lease.port))
        intruder.listen()
        return lease

    monkeypatch.setattr(ports, "lease_port", lease_then_taken)
    try:
        name = client.train(
            trainer=TorchTrainer(func=rendezvous, num_nodes=1, num_proc_per_node=1),
            options=[Warm(False)],
        )
        job = client.wait_for_job_status(name, {"Complete", "Failed"}, timeout=300)
    finally:
        port = intruder.getsockname()[1]
        intruder.close()
    assert job.status == "Failed"
    assert job.message.startswith(f"The job's rendezvous port {port} was taken by another program")
    assert job.failure is not None and job.failure.source == "The job's rendezvous"
    assert "Nothing in your code failed" in job.failure.message
