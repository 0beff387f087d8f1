"""`wait_for_job_status` sleeps between two reads of the job's record; the sleep ends when the
record is rewritten or the job's supervisor exits, so a waiter reads a job's end as it is
written, not after the supervisor's clean-up and exit (issue 21)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kf_jupyter.backends.local import supervisor as sv
from kf_jupyter.backends.local.waker import JobWaker

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify, pidfd")


def _record(job_dir: Path, **fields: object) -> None:
    sv.atomic_write_json(str(job_dir / "status.json"), fields)


@pytest.fixture
def supervisor_stand_in(tmp_path: Path):
    """A live process standing for the job's supervisor (its pid and start time recorded)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    _record(
        tmp_path,
        status="Running",
        supervisor_pid=proc.pid,
        supervisor_create_time=sv.process_identity(proc.pid),
    )
    yield proc
    proc.kill()
    proc.wait()


def _later(seconds: float, action) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        action()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_the_sleep_ends_when_the_record_is_rewritten_while_the_supervisor_lives(
    tmp_path: Path, supervisor_stand_in: subprocess.Popen
) -> None:
    waker = JobWaker(tmp_path)
    try:
        waker.sleep(0.01)  # reads the supervisor's pid, as the first sleep of a wait does
        _later(0.3, lambda: _record(tmp_path, status="Complete"))
        start = time.monotonic()
        waker.sleep(20)
        took = time.monotonic() - start
    finally:
        waker.close()
    assert supervisor_stand_in.poll() is None  # the supervisor still runs: the record woke it
    assert took < 10, f"the end was written at 0.3 s; the sleep lasted {took:.1f} s"
    assert json.loads((tmp_path / "status.json").read_text())["status"] == "Complete"


def test_other_files_renamed_into_the_job_folder_do_not_end_the_sleep(
    tmp_path: Path, supervisor_stand_in: subprocess.Popen
) -> None:
    def other() -> None:
        sv.atomic_write_json(str(tmp_path / "trainer-status.json"), {"trainerStatus": {}})

    waker = JobWaker(tmp_path)
    try:
        waker.sleep(0.01)
        _later(0.05, other)
        start = time.monotonic()
        waker.sleep(0.6)
        took = time.monotonic() - start
    finally:
        waker.close()
    assert took >= 0.5, f"a trainer status ended the sleep after {took:.2f} s"


def test_the_sleep_ends_when_the_supervisor_dies_without_a_word(
    tmp_path: Path, supervisor_stand_in: subprocess.Popen
) -> None:
    waker = JobWaker(tmp_path)
    try:
        waker.sleep(0.01)
        _later(0.3, supervisor_stand_in.kill)
        start = time.monotonic()
        waker.sleep(20)
        took = time.monotonic() - start
    finally:
        waker.close()
    assert took < 10, f"the supervisor was killed at 0.3 s; the sleep lasted {took:.1f} s"


def test_waits_one_after_another_hold_one_instance(tmp_path: Path, supervisor_stand_in) -> None:
    """A waker's inotify instance is kept for the next wait, not closed (closing one waits for
    the kernel's RCU grace period: 7-16 ms on the kernel's thread): a hundred waits in a row
    leave at most one more descriptor open than before, and each wait still sees its own job's
    record and not the one before."""
    for i in range(2):
        (tmp_path / f"job-{i}").mkdir()
    before = set(os.listdir("/proc/self/fd"))
    for i in range(100):
        job = tmp_path / f"job-{i % 2}"
        waker = JobWaker(job)
        if i % 10 == 0:  # a rename in the other job's folder is not this waker's
            _record(tmp_path / f"job-{(i + 1) % 2}", status="Running")
            start = time.monotonic()
            waker.sleep(0.3)
            assert time.monotonic() - start >= 0.25
        waker.close()
    assert len(set(os.listdir("/proc/self/fd")) - before) <= 1
