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


def test_a_waker_holds_no_descriptor_after_close(tmp_path: Path, supervisor_stand_in) -> None:
    before = set(os.listdir("/proc/self/fd"))
    waker = JobWaker(tmp_path)
    waker.sleep(0.01)
    waker.close()
    assert set(os.listdir("/proc/self/fd")) <= before
