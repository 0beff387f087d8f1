"""Helpers shared by the local-backend tests (real processes; the process table via psutil)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from kf_jupyter.backends.local.backend import LocalBackend
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.backends.local.warm.pool import stop_all
from kf_jupyter.client import TrainerClient

from . import waits
from .waits import DEADLINE


def job_processes(name: str, named: str | None = None) -> list[psutil.Process]:
    """Live processes started for job `name`: they carry KF_JUPYTER_JOB_NAME in their env, or
    (a warm node or rank, forked from the pool: /proc shows the pool's environment) hold a
    file of the job's folder open for writing, its log; with `named`, only those whose process
    name is that (read here, where a process that has just exited is skipped, not raised from
    the caller's `p.name()`)."""
    folder = f"/jobs/{name}/"
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == os.getpid():  # this test reading the job's files is not the job
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if named is not None and p.name() != named:
                continue
            if p.environ().get("KF_JUPYTER_JOB_NAME") == name:
                found.append(p)
            elif any(folder in f.path and f.mode != "r" for f in p.open_files()):
                # the job's supervisor writes there too, and stays while a job is suspended
                if not any(a.endswith("/supervisor.py") for a in p.cmdline()):
                    found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def supervisor_alive(backend: LocalBackend, name: str) -> bool:
    """The job's supervisor process is still running."""
    import json

    st = json.loads((backend.jobs_dir / name / "status.json").read_text())
    pid = st.get("supervisor_pid")
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_no_orphans(name: str, timeout: float = 60.0) -> None:
    """No process of job `name` is alive (waits up to `timeout` for them to go)."""
    end = time.monotonic() + timeout
    left = job_processes(name)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = job_processes(name)
    assert not left, [(p.pid, p.cmdline()[:3]) for p in left]


def wait_until(cond, timeout: float = DEADLINE, what: str = "condition") -> None:
    """Poll `cond()` every 50 ms until it holds (tests/waits.py: generous, names `what`)."""
    waits.wait_until(cond, what=what, timeout=timeout, poll=0.05)


@pytest.fixture(name="client")
def client_fixture(tmp_path: Path) -> TrainerClient:
    """A TrainerClient on the local backend with a fresh state dir; deletes leftover jobs."""
    c = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    yield c
    for job in c.list_jobs():
        c.delete_job(job.name)
    # A warm pool lives as long as this test process: stop it with the test's state dir.
    stop_all(tmp_path / "state")
