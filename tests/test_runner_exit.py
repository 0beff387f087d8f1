"""The runner ends a finished job cleanly even when a destructor crashes at interpreter teardown
(torch 2.13's CPU build aborts a DDP rank that way about one run in seven on this machine), and
still does what a normal exit does: waits for non-daemon threads and runs atexit handlers."""

from __future__ import annotations

import pytest

from kf_jupyter import MPITrainer, TrainerClient
from kf_jupyter.backends.local.config import LocalBackendConfig

pytestmark = pytest.mark.slow


def crashes_at_teardown() -> str:
    import atexit
    import os
    import sys
    import threading
    import time

    class AbortsWhenDestroyed:
        def __del__(self) -> None:
            os.abort()  # what a C++ destructor calling std::terminate amounts to

    sys.modules["__main__"].kept_until_teardown = AbortsWhenDestroyed()
    atexit.register(lambda: print("atexit handler ran", flush=True))

    def late() -> None:
        time.sleep(0.3)
        print("non-daemon thread finished", flush=True)

    threading.Thread(target=late).start()
    return "done"


def test_finished_job_survives_a_crash_at_teardown(tmp_path) -> None:
    client = TrainerClient(LocalBackendConfig(state_dir=tmp_path))
    name = client.train(MPITrainer(func=crashes_at_teardown, num_proc_per_node=1))
    job = client.wait_for_job_status(name, {"Complete", "Failed"}, timeout=120)
    logs = "\n".join(client.get_job_logs(name))
    assert job.status == "Complete", job.message
    assert client.get_job_result(name) == "done"
    assert "non-daemon thread finished" in logs
    assert "atexit handler ran" in logs
    assert logs.index("non-daemon thread finished") < logs.index("atexit handler ran")
