"""The supervisor host (issue 21): a job's supervisor is forked from a process that has done its
imports and made the job's certificate ahead, instead of being started as a new process, and it
is still the same supervisor: the kernel's environment, umask and limits at submit time, the
same events and status, its own certificate per job, cancel, and it outlives the host.

Real processes: a real host, real supervisors, real ranks (JAXTrainer without distributed
initialisation: one plain Python process per node, no framework import).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from kf_jupyter import JAXTrainer, TrainerClient
from kf_jupyter.backends.local import supervisor_host
from kf_jupyter.options import Warm

from .test_local_support import assert_no_orphans, client_fixture, wait_until  # noqa: F401


def what_i_see(gate=None):
    import os
    import resource
    import time

    while gate and not os.path.exists(gate):
        time.sleep(0.02)
    umask = os.umask(0)
    os.umask(umask)
    return {
        "probe": os.environ.get("KFJ_HOST_PROBE"),
        "umask": umask,
        "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
        "ca": os.environ.get("KUBEFLOW_TRAINER_SERVER_CA_CERT"),
    }


def wait_for_file(path):
    import os
    import time

    print("waiting", flush=True)
    while not os.path.exists(path):
        time.sleep(0.02)
    return "released"


def _job(func, **kw):
    return JAXTrainer(func=func, num_nodes=1, initialize_distributed=False, **kw)


def _host_ready(client: TrainerClient) -> int:
    client.backend.prestart_supervisor_host()
    sock, record = supervisor_host.host_for(client.backend.state_dir)
    wait_until(lambda: sock.exists(), what="the supervisor host to listen")
    return int(json.loads(record.read_text())["pid"])


def _supervisor_parent(client: TrainerClient, name: str) -> str:
    st = json.loads((client.backend.jobs_dir / name / "status.json").read_text())
    try:
        return " ".join(psutil.Process(int(st["supervisor_pid"])).parent().cmdline())
    except (psutil.Error, AttributeError):
        return "<gone>"


def _reasons(client: TrainerClient, name: str) -> list[str]:
    return [e.reason for e in client.get_job_events(name)]


def test_a_supervisor_forked_from_the_host_has_the_kernels_state_at_submit(
    client, monkeypatch, tmp_path
):
    """Failed before: every supervisor was a new process (its parent the kernel, or init)."""
    host = _host_ready(client)
    # Changed after the host started: the supervisor must still see the kernel's values now.
    monkeypatch.setenv("KFJ_HOST_PROBE", "set after the host started")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lower = min(soft, 1000)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lower, hard))
    old_umask = os.umask(0o027)
    try:
        gate = tmp_path / "gate"
        name = client.train(_job(what_i_see, func_args={"gate": str(gate)}), options=[Warm(False)])
        parent = _supervisor_parent(client, name)
        gate.write_text("go")
        job = client.wait_for_job_status(name, timeout=120)
    finally:
        os.umask(old_umask)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "local/supervisor_host.py" in parent, parent
    st = json.loads((client.backend.jobs_dir / name / "status.json").read_text())
    assert psutil.Process(host).is_running()
    seen = client.get_job_result(name)
    assert seen["probe"] == "set after the host started"
    assert seen["umask"] == 0o027
    assert seen["nofile"] == [lower, hard]
    # Its own certificate, in its own folder.
    assert seen["ca"] and Path(seen["ca"]).is_relative_to(client.backend.jobs_dir / name)
    assert job.status == "Complete" and st["reason"] == "AllJobsCompleted"

    # A second job: another certificate, and the same events as a supervisor started as a
    # process (the host stopped: the fallback path).
    second = client.train(_job(what_i_see), options=[Warm(False)])
    client.wait_for_job_status(second, timeout=120)
    ca2 = client.get_job_result(second)["ca"]
    assert Path(ca2).read_bytes() != Path(seen["ca"]).read_bytes()
    supervisor_host.stop(client.backend.state_dir)
    plain = client.train(_job(what_i_see), options=[Warm(False)])
    assert "local/supervisor_host.py" not in _supervisor_parent(client, plain)
    client.wait_for_job_status(plain, timeout=120)
    assert _reasons(client, second) == _reasons(client, plain)


def _forked_ahead(host: int) -> list[int]:
    """The host's children that wait for a job (forked ahead): their pids."""
    out = []
    for p in psutil.Process(host).children():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and supervisor_host.AHEAD_TITLE in " ".join(
                p.cmdline()
            ):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def _supervisor_pid(client: TrainerClient, name: str) -> int:
    st = json.loads((client.backend.jobs_dir / name / "status.json").read_text())
    return int(st["supervisor_pid"])


def test_the_next_supervisor_is_forked_ahead_and_still_takes_the_kernels_state_at_submit(
    client, monkeypatch
):
    """Failed before: each job's supervisor was forked when the job came (issue 21). The one
    forked ahead had the last job's environment set: it must still run with the kernel's
    environment of its own submit (a value changed, a variable removed), and go with the host."""
    host = _host_ready(client)
    monkeypatch.setenv("KFJ_HOST_PROBE", "first")
    first = client.train(_job(what_i_see), options=[Warm(False)])
    client.wait_for_job_status(first, timeout=120)
    assert client.get_job_result(first)["probe"] == "first"
    seen = []
    for value in ("second", None):
        wait_until(lambda: len(_forked_ahead(host)) == 1, what="a supervisor forked ahead")
        (waiting,) = _forked_ahead(host)
        if value is None:
            monkeypatch.delenv("KFJ_HOST_PROBE")
        else:
            monkeypatch.setenv("KFJ_HOST_PROBE", value)
        name = client.train(_job(what_i_see), options=[Warm(False)])
        assert _supervisor_pid(client, name) == waiting
        job = client.wait_for_job_status(name, timeout=120)
        assert job.status == "Complete"
        seen.append(client.get_job_result(name)["probe"])
        assert _reasons(client, name) == _reasons(client, first)
    assert seen == ["second", None]
    wait_until(lambda: len(_forked_ahead(host)) == 1, what="a supervisor forked ahead")
    (waiting,) = _forked_ahead(host)
    assert supervisor_host.stop(client.backend.state_dir) == 1
    assert not psutil.pid_exists(waiting), "the supervisor forked ahead outlived its host"


def test_a_job_outlives_its_host_and_still_cancels_and_leaves_nothing(client, tmp_path):
    _host_ready(client)
    gate = tmp_path / "gate"
    name = client.train(_job(wait_for_file, func_args={"path": str(gate)}), options=[Warm(False)])
    assert "local/supervisor_host.py" in _supervisor_parent(client, name)
    # It reads as the process a kernel would start (who looks for a job's processes by its
    # folder, as `ps` users and the reliability tests do, finds it).
    st = json.loads((client.backend.jobs_dir / name / "status.json").read_text())
    cmdline = [a for a in psutil.Process(int(st["supervisor_pid"])).cmdline() if a]
    assert cmdline[1:] == ["-I", str(Path(supervisor_host.__file__).parent / "supervisor.py"),
                           str(client.backend.jobs_dir / name)], cmdline  # fmt: skip
    wait_until(lambda: client.get_job(name).status == "Running", what="the job to run")
    assert supervisor_host.stop(client.backend.state_dir) == 1
    assert client.get_job(name).status == "Running"
    client.backend.cancel_job(name)
    job = client.get_job(name)
    assert (job.status, job.reason) == ("Failed", "Cancelled")
    assert_no_orphans(name)

    # And one that completes after its host is gone.
    _host_ready(client)
    gate2 = tmp_path / "gate2"
    done = client.train(_job(wait_for_file, func_args={"path": str(gate2)}), options=[Warm(False)])
    wait_until(lambda: client.get_job(done).status == "Running", what="the job to run")
    client.suspend_job(done)
    assert client.get_job(done).status == "Suspended"
    client.resume_job(done)
    wait_until(lambda: client.get_job(done).status == "Running", what="the job to run again")
    supervisor_host.stop(client.backend.state_dir)
    gate2.write_text("go")
    client.wait_for_job_status(done, timeout=120)
    assert client.get_job_result(done) == "released"
    assert_no_orphans(done)


@pytest.mark.slow
def test_the_host_ends_with_its_owner_and_one_runs_per_process(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    script = textwrap.dedent(
        f"""
        import json, time
        from kf_jupyter.backends.local import supervisor_host
        from kf_jupyter.backends.local.config import LocalBackendConfig
        from kf_jupyter import TrainerClient

        pids = []
        for state in ({str(a)!r}, {str(b)!r}):
            c = TrainerClient(LocalBackendConfig(state_dir=state))
            c.backend.prestart_supervisor_host()
            sock, record = supervisor_host.host_for(c.backend.state_dir)
            end = time.monotonic() + 120
            while not sock.exists() and time.monotonic() < end:
                time.sleep(0.05)
            pids.append(json.loads(record.read_text())["pid"])
        import psutil
        end = time.monotonic() + 30
        while psutil.pid_exists(pids[0]) and time.monotonic() < end:
            try:
                if psutil.Process(pids[0]).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.05)
        assert psutil.Process(pids[1]).is_running()
        print("first host gone", flush=True)
        print(json.dumps(pids), flush=True)
        """
    )
    path = tmp_path / "owner.py"
    path.write_text(script)
    out = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0 and "first host gone" in out.stdout, out.stderr[-2000:]
    pids = json.loads(out.stdout.strip().splitlines()[-1])

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    end = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)
    for state in (a, b):
        assert not list((state / "warm").glob(f"*{supervisor_host.SUFFIX}"))


@pytest.mark.reliability(
    scenario="a silent same-user connection (and one that sent half a length) to the supervisor "
    "host's socket: the next train() is served at once, the silent ones are dropped at their "
    "deadline",
    area="local",
)
def test_a_silent_connection_to_the_host_delays_no_job(client):
    """Failed before (issue 38): the host read one connection at a time with a 10 s timeout,
    so a connection of the same user that sent nothing held every train() for ~9.8 s."""
    import socket

    host = _host_ready(client)
    sock, _record = supervisor_host.host_for(client.backend.state_dir)
    silent, partial = (socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2))
    try:
        silent.connect(str(sock))
        partial.connect(str(sock))
        partial.sendall(b"\x00\x00")  # half a length, then nothing
        start = time.monotonic()
        name = client.train(_job(what_i_see), options=[Warm(False)])
        took = time.monotonic() - start
        # Served by the host while both silent connections still wait for their answer.
        assert "local/supervisor_host.py" in _supervisor_parent(client, name)
        for conn in (silent, partial):
            conn.setblocking(False)
            with pytest.raises(BlockingIOError):
                conn.recv(1)
        assert took < supervisor_host.REQUEST_SECONDS, took
        assert client.wait_for_job_status(name, timeout=120).status == "Complete"
        # The silent ones are answered and closed at their deadline; the host runs on.
        for conn in (silent, partial):
            conn.setblocking(True)
            conn.settimeout(supervisor_host.REQUEST_SECONDS + 20)
            answer = supervisor_host._recv_json(conn)
            assert "no whole request in time" in answer["error"]
            assert conn.recv(1) == b""
        assert psutil.Process(host).is_running()
    finally:
        silent.close()
        partial.close()
