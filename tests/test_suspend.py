"""Suspend and resume on the local backend, with real processes: the ranks stop (SIGTERM, grace,
SIGKILL), the job folder and logs stay, and resuming starts the same processes again with the same
workspace and environment, even from another process (a restarted kernel).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer, RuntimeConfig
from kf_jupyter.errors import BackendError
from kf_jupyter.types import COMPLETE, SUSPENDED

from .test_local_support import (
    assert_no_orphans,
    client_fixture,  # noqa: F401  (the `client` fixture)
    job_processes,
    supervisor_alive,
    wait_until,
)

REPO = Path(__file__).resolve().parent.parent


def ticks(gate):
    import os
    import time

    rank = os.environ["JAX_PROCESS_ID"]
    print(f"start rank={rank} cwd={os.getcwd()} env={os.environ['KFJ_T_RUN']}", flush=True)
    i = 0
    while not os.path.exists(gate):
        print(f"tick {i}", flush=True)
        i += 1
        time.sleep(0.1)
    return "done"


def _log(client: Any, name: str) -> list[str]:
    return list(client.get_job_logs(name))


def test_suspend_stops_the_ranks_and_resume_after_a_kernel_restart_starts_them_again(
    client: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    rc = RuntimeConfig(env={"KFJ_T_RUN": "same-env"})
    trainer = JAXTrainer(
        func=ticks, func_args={"gate": str(gate)}, num_nodes=2, initialize_distributed=False
    )
    name = client.train(trainer, runtime_config=rc)
    wait_until(lambda: sum("start rank=" in ln for ln in _log(client, name)) == 2, 60, "both ranks")
    client.suspend_job(name)
    job = client.get_job(name)
    assert job.status == SUSPENDED and job.reason == "Suspended"
    assert {s.status for s in job.steps} == {SUSPENDED}  # stopped, not failed
    assert_no_orphans(name)  # every rank stopped
    assert supervisor_alive(client.backend, name)  # the job is kept
    before = _log(client, name)
    assert any("job suspended at" in ln for ln in before)
    assert client.wait_for_job_status(name, {SUSPENDED}, timeout=5).status == SUSPENDED
    # A new process (a restarted kernel) resumes it: only the state directory is shared.
    code = (
        "from kf_jupyter import TrainerClient\n"
        "from kf_jupyter.backends.local.config import LocalBackendConfig\n"
        f"TrainerClient(LocalBackendConfig(state_dir={str(client.backend.state_dir)!r}))"
        f".resume_job({name!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)
    wait_until(lambda: sum("start rank=" in ln for ln in _log(client, name)) == 4, 60, "restart")
    gate.write_text("")
    job = client.wait_for_job_status(name, timeout=120)
    assert job.status == COMPLETE and client.get_job_result(name) == "done"
    lines = [ln for ln in _log(client, name) if "rank=" in ln or "---- job" in ln]
    for rank in ("0", "1"):
        mine = [
            ln.split("] ", 1)[1]
            for ln in lines
            if ln.startswith(f"[rank-{rank}]") or ln.startswith(f"[node-{rank}]")
        ]
        starts = [ln for ln in mine if ln.startswith("start")]
        assert len(starts) == 2 and starts[0] == starts[1], mine  # same workspace and env
        assert "same-env" in starts[0]
        # the log goes on, with a marker line between the runs
        kinds = ["start" if ln.startswith("start") else ln.split(" at ")[0] for ln in mine]
        assert kinds == [
            "start",
            "[kf-jupyter] ---- job suspended",
            "[kf-jupyter] ---- job resumed",
            "start",
        ], mine
    events = [e.reason for e in client.get_job_events(name)]
    assert "Suspended" in events and "Resumed" in events


def test_suspend_before_the_ranks_start_and_errors(client: Any, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    trainer = JAXTrainer(
        func=ticks, func_args={"gate": str(gate)}, num_nodes=1, initialize_distributed=False
    )
    name = client.train(trainer, runtime_config=RuntimeConfig(env={"KFJ_T_RUN": "x"}))
    client.suspend_job(name)  # right after train(): whether or not the rank has started yet
    assert client.get_job(name).status == SUSPENDED
    assert not job_processes(name)
    client.suspend_job(name)  # again: nothing to do
    client.resume_job(name)
    gate.write_text("")
    assert client.wait_for_job_status(name, timeout=120).status == COMPLETE
    with pytest.raises(BackendError, match="Complete, so it cannot be suspended"):
        client.suspend_job(name)


def test_cancel_a_suspended_job(client: Any, tmp_path: Path) -> None:
    trainer = JAXTrainer(
        func=ticks,
        func_args={"gate": str(tmp_path / "never")},
        num_nodes=1,
        initialize_distributed=False,
    )
    name = client.train(trainer, runtime_config=RuntimeConfig(env={"KFJ_T_RUN": "x"}))
    client.suspend_job(name)
    client.backend.cancel_job(name)
    job = client.get_job(name)
    assert job.status == "Failed" and job.reason == "Cancelled"
    assert_no_orphans(name)


def test_the_monitor_suspend_button_suspends_and_resumes_a_real_job(
    client: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    pytest.importorskip("ipywidgets")
    import comm

    from .test_widgets import CountingComm  # widgets without a kernel (as test_widgets does)

    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: CountingComm(*a, **k))
    from kf_jupyter.widgets.monitor import JobMonitor

    gate = tmp_path / "gate"
    trainer = JAXTrainer(
        func=ticks, func_args={"gate": str(gate)}, num_nodes=1, initialize_distributed=False
    )
    name = client.train(trainer, runtime_config=RuntimeConfig(env={"KFJ_T_RUN": "x"}))
    mon = JobMonitor(client, name, poll_status=False)
    mon._poll()
    mon.suspend_button.click()
    assert client.get_job(name).status == SUSPENDED
    assert "Suspended" in mon.header.value and mon.suspend_button.description == "Resume"
    mon.suspend_button.click()
    assert client.get_job(name).status != SUSPENDED and mon.suspend_button.description == "Suspend"
    gate.write_text("")
    client.wait_for_job_status(name, timeout=120)
    mon._poll()
    mon.flush_stats()
    assert mon.suspend_button.disabled
