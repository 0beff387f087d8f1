"""Event waits for tests, with deadlines generous enough for a loaded machine.

A deadline only decides how long a broken test takes to fail; a working test returns as soon as
its condition holds. So every wait here is long (`DEADLINE`, 300 s; scaled by
`$KF_TEST_DEADLINE_SCALE`), and every failure says which run and which condition it was
waiting for. scripts/test-under-load.sh runs tests next to a CPU hog to keep this honest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

#: Seconds a test waits for anything before it fails.
DEADLINE = 300.0 * float(os.environ.get("KF_TEST_DEADLINE_SCALE", "1") or "1")


def wait_until(
    cond: Callable[[], bool], what: str = "condition", timeout: float = DEADLINE, poll: float = 0.02
) -> None:
    """Poll `cond()` until it holds; fail naming `what` (say which run) after `timeout` s."""
    start = time.monotonic()
    end = start + timeout
    while True:
        if cond():
            return
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)
