"""A daemon that a rank double-forks does not outlive the job, warm or cold (issue 20).

A forked-only process (fork, setsid, fork, no exec) carries the pool's environment in
/proc/PID/environ, not the job's, so the usual orphan check (processes tagged with the job's
name) cannot see it: the daemon writes its pid, and the test checks that pid.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from kf_jupyter import JAXTrainer, TorchTrainer
from kf_jupyter.options import Warm

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401


def spawn_daemon(pid_file: str) -> str:
    """Double-fork a daemon that sleeps for 10 minutes; return once its pid is written."""
    import os
    import time

    if os.fork() == 0:  # child: a new session, then fork again and leave
        os.setsid()
        if os.fork() == 0:
            with open(pid_file + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(pid_file + ".tmp", pid_file)
            time.sleep(600)
        os._exit(0)
    end = time.monotonic() + 30
    while not os.path.exists(pid_file) and time.monotonic() < end:
        time.sleep(0.01)
    return "spawned"


def torch_daemon(pid_file: str) -> str:
    """spawn_daemon from rank 0 of a torch job (a func ships its own source only)."""
    import os
    import time

    if int(os.environ.get("RANK", "0")) == 0:
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                with open(pid_file + ".tmp", "w") as fh:
                    fh.write(str(os.getpid()))
                os.replace(pid_file + ".tmp", pid_file)
                time.sleep(600)
            os._exit(0)
        end = time.monotonic() + 30
        while not os.path.exists(pid_file) and time.monotonic() < end:
            time.sleep(0.01)
    return "spawned"


def _gone(pid: int, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.reliability(
    scenario="a rank double-forks a daemon (fork, setsid, fork) and returns: warm and cold",
    area="local",
)
@pytest.mark.parametrize(
    ("framework", "warm"), [("jax", True), ("jax", False), ("torch", True), ("torch", False)]
)
def test_a_double_forked_daemon_does_not_outlive_the_job(
    client: Any, tmp_path: Path, framework: str, warm: bool
) -> None:
    pid_file = tmp_path / "daemon.pid"
    if framework == "jax":
        trainer: Any = JAXTrainer(
            func=spawn_daemon, func_args={"pid_file": str(pid_file)}, num_nodes=1
        )
    else:
        trainer = TorchTrainer(
            func=torch_daemon, func_args={"pid_file": str(pid_file)}, num_proc_per_node=2
        )
    if warm:
        warm_up(client, trainer)
        pid_file.unlink()
    name = client.train(trainer, options=[] if warm else [Warm(False)])
    job = client.wait_for_job_status(name, timeout=180)
    assert job.warm is warm
    assert client.get_job_result(name) == "spawned"
    pid = int(pid_file.read_text())
    try:
        assert _gone(pid), f"the daemon {pid} outlived the {'warm' if warm else 'cold'} job"
    finally:
        try:
            psutil.Process(pid).kill()  # never leave it to the machine
        except psutil.NoSuchProcess:
            pass
    assert_no_orphans(name)


def warm_up(client: Any, trainer: Any) -> None:
    """Start the pool a job like `trainer` uses (by running one) and wait until it is ready.
    (`prestart_pool` keys a torch pool without the job's TORCH_* variables, so the job would
    start cold beside it.)"""
    import time as _time

    from kf_jupyter.backends.local.warm import pool as warm_pool

    name = client.train(trainer)
    client.wait_for_job_status(name, timeout=300)
    end = _time.monotonic() + 120
    while _time.monotonic() < end:
        pools = [p for p in warm_pool.list_pools(client.backend.state_dir) if p.get("alive")]
        if pools and all(p.get("state") == "ready" for p in pools):
            return
        _time.sleep(0.1)
    raise AssertionError("the warm pool did not become ready in 120 s")
