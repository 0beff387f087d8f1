"""Another local user cannot make train() fail through the warm pool's socket folder (issue 20).

With XDG_RUNTIME_DIR unset the pool's sockets live in `<tmp>/kf-jupyter-<uid>`; the user nobody
creates that folder first (as anyone can in a sticky /tmp). Before, every train() raised a raw
OSError with no cold fallback. Now the job picks another private folder (and starts warm), or,
when nobody has taken every candidate, starts cold and says why in its events.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer
from kf_jupyter.backends.local.warm import pool as warm_pool

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401
from .test_warm import _wait_ready


def adds(a, b):
    return a + b


@pytest.fixture
def hostile_tmp(tmp_path: Path, monkeypatch: Any) -> Path:
    """A sticky, world-writable temp folder (like /tmp) as the job's `<tmp>`, XDG unset."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as the unprivileged user nobody")
    base = Path(tempfile.mkdtemp(prefix="kfj-tmp-", dir="/tmp"))
    os.chmod(base, 0o1777)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(base))
    monkeypatch.setattr(tempfile, "tempdir", None)  # recomputed from TMPDIR
    yield base
    shutil.rmtree(base, ignore_errors=True)


def as_nobody_mkdir(path: Path) -> None:
    subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "mkdir", "-m", "0777",
         str(path)],
        check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert path.stat().st_uid == 65534


@pytest.mark.reliability(
    scenario="another local user pre-creates <tmp>/kf-jupyter-<uid> (XDG_RUNTIME_DIR unset) "
    "before train()",
    area="local",
)
def test_a_hijacked_socket_folder_does_not_fail_the_job(client: Any, hostile_tmp: Path) -> None:
    as_nobody_mkdir(hostile_tmp / f"kf-jupyter-{os.getuid()}")
    pool = _wait_ready(client, "jax")  # the kernel's prestart takes the same path
    assert pool.socket.parent == hostile_tmp / f"kf-jupyter-{os.getuid()}-1"
    name = client.train(JAXTrainer(func=adds, func_args={"a": 2, "b": 3}, num_nodes=1))
    job = client.wait_for_job_status(name, timeout=180)
    assert client.get_job_result(name) == 5
    # it found a private folder of its own (never the other user's) and started warm
    st = pool.socket.parent.stat()
    assert st.st_uid == os.getuid() and st.st_mode & 0o077 == 0
    assert job.warm is True, [e.message for e in client.get_job_events(name)]
    assert not any((hostile_tmp / f"kf-jupyter-{os.getuid()}").iterdir())
    assert_no_orphans(name)


def test_when_every_private_folder_is_taken_the_job_starts_cold_and_says_why(
    client: Any, hostile_tmp: Path
) -> None:
    for folder in warm_pool.socket_dir_candidates():
        if str(folder).startswith(str(hostile_tmp)):
            as_nobody_mkdir(folder)
    assert client.backend.prestart_pool("jax") is None  # no pool, no exception
    name = client.train(JAXTrainer(func=adds, func_args={"a": 2, "b": 5}, num_nodes=1))
    job = client.wait_for_job_status(name, timeout=180)
    assert client.get_job_result(name) == 7
    assert job.warm is False
    cold = [e.message for e in client.get_job_events(name) if e.reason == "ColdStart"]
    assert cold and "not a folder of this user" in cold[0], cold
    assert str(hostile_tmp) in cold[0]
    assert_no_orphans(name)
