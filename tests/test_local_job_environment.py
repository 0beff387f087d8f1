"""A local job's environment is the kernel's `os.environ`, whichever way its supervisor starts.

The clean-clone runs once showed a warm and a cold rank differing by LINES and COLUMNS: a C
library in the kernel (readline sets them when imported) changed the process's C-level environ
behind `os.environ`; the supervisor host gives a job the kernel's `os.environ`, but a supervisor
started as a process (no host yet, or warm pools off) inherited the C-level one.
"""

from __future__ import annotations

import ctypes
import os

import pytest

from kf_jupyter import TorchTrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.client import TrainerClient

from .waits import DEADLINE

pytestmark = pytest.mark.slow


def read_env():
    import os

    return {k: os.environ.get(k) for k in ("KFJ_C_LEVEL_ONLY", "KFJ_SET_IN_PYTHON")}


@pytest.mark.parametrize("warm", [False, True], ids=["supervisor-as-process", "supervisor-host"])
def test_a_job_sees_the_kernels_os_environ_not_what_a_c_library_set(tmp_path, warm):
    libc = ctypes.CDLL(None)
    libc.setenv(b"KFJ_C_LEVEL_ONLY", b"set by a C library", 1)
    os.environ["KFJ_SET_IN_PYTHON"] = "set by the notebook"
    try:
        assert "KFJ_C_LEVEL_ONLY" not in os.environ  # what the user sees in the kernel
        client = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state", warm=warm))
        if warm:
            client.backend.prestart_supervisor_host()
        names = [client.train(TorchTrainer(func=read_env)) for _ in range(2)]
        for name in names:
            client.wait_for_job_status(name, timeout=DEADLINE)
            assert client.get_job_result(name) == {
                "KFJ_C_LEVEL_ONLY": None,
                "KFJ_SET_IN_PYTHON": "set by the notebook",
            }
    finally:
        libc.unsetenv(b"KFJ_C_LEVEL_ONLY")
        os.environ.pop("KFJ_SET_IN_PYTHON", None)
        from kf_jupyter.backends.local.warm.pool import stop_all

        stop_all(tmp_path / "state")
