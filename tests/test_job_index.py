"""The local job list's index (backends/local/index.py): consistent with the job folders.

Jobs are written through the store's writers (tests/store_jobs.py); readers are LocalBackends,
in this process and in others. What a user checks: the list is the folders' truth (new,
finished, deleted, replaced jobs, by any process), and a poll reads only what changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kf_jupyter.backends.local import index as job_index
from kf_jupyter.backends.local.backend import LocalBackend
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.types import COMPLETE, CREATED, FAILED

from .magic_shell import line_magic_output
from .store_jobs import write_job

REPO = Path(__file__).resolve().parent.parent


def backend(state: Path) -> LocalBackend:
    return LocalBackend(LocalBackendConfig(state_dir=str(state), warm=False))


def names(b: LocalBackend) -> list[str]:
    return [j.name for j in b.list_jobs()]


def truth(b: LocalBackend) -> list[tuple]:
    """Every job as read from its folder now (no index), in a comparable form."""
    return [j.to_dict() | {"pids": [s.pid for s in j.steps]} for j in b.scan_jobs()]


def listed(b: LocalBackend) -> list[dict]:
    return [j.to_dict() | {"pids": [s.pid for s in j.steps]} for j in b.list_jobs()]


def test_finished_jobs_are_not_read_again_and_the_list_equals_the_folders(tmp_path):
    state = tmp_path / "state"
    for i in range(20):
        write_job(state, f"done-{i:02d}", created=1000.0 + i, finish=COMPLETE if i % 3 else FAILED)
    write_job(state, "running", created=2000.0, finish="")
    b = backend(state)
    assert listed(b) == truth(b)
    assert b.jobs_index().last["read"] == 21  # the first list ever: every folder
    assert listed(b) == truth(b)
    assert b.jobs_index().last["read"] == 1  # then only the one not finished
    failed = next(j for j in b.list_jobs() if j.name == "done-00")
    assert (
        failed.status == FAILED and failed.failure and failed.failure.message == "boom in done-00"
    )
    assert b.list_jobs_json().startswith('[{"name": "done-00"')


def test_a_fresh_process_reads_only_what_changed_since_the_index_was_written(tmp_path):
    state = tmp_path / "state"
    for i in range(10):
        write_job(state, f"j{i}", created=1000.0 + i)
    first = backend(state)
    assert len(first.list_jobs()) == 10  # builds and writes the index
    write_job(state, "later", created=3000.0)
    fresh = backend(state)  # another process in all but name: nothing shared in memory
    assert names(fresh)[-1] == "later"
    assert fresh.jobs_index().last == {"rebuilt": False, "read": 1, "listed": True}
    assert listed(fresh) == truth(fresh)


@pytest.mark.parametrize("damage", ["lost", "torn", "garbage", "journal-replaced"])
def test_a_lost_or_damaged_index_is_rebuilt_from_the_folders(tmp_path, damage):
    state = tmp_path / "state"
    for i in range(5):
        write_job(state, f"j{i}", created=1000.0 + i)
    b = backend(state)
    b.list_jobs()
    path = job_index.index_dir(state) / job_index.INDEX_NAME
    assert path.exists()
    if damage == "lost":
        path.unlink()
    elif damage == "torn":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        data = bytearray(path.read_bytes())
        data[-5] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        journal = job_index.index_dir(state) / job_index.JOURNAL_NAME
        journal.unlink()
        journal.write_text('"j0"\n')
    write_job(state, "j5", created=1005.0)
    fresh = backend(state)
    assert names(fresh) == [f"j{i}" for i in range(6)]
    assert fresh.jobs_index().last["rebuilt"] is True
    assert listed(fresh) == truth(fresh)


def test_jobs_deleted_replaced_or_removed_by_hand_elsewhere_are_seen(tmp_path):
    state = tmp_path / "state"
    for i in range(6):
        write_job(state, f"j{i}", created=1000.0 + i)
    reader = backend(state)
    assert len(reader.list_jobs()) == 6
    other = backend(state)
    other.delete_job("j1")  # another process deletes
    shutil.rmtree(state / "jobs" / "j2")  # a hand removes a folder
    # Another process deletes j3 and runs a job of the same name, still running.
    other.delete_job("j3")
    write_job(state, "j3", created=5000.0, finish="")
    jobs = {j.name: j for j in reader.list_jobs()}
    assert sorted(jobs) == ["j0", "j3", "j4", "j5"]
    assert jobs["j3"].status == CREATED
    assert listed(reader) == truth(reader)


def test_a_job_written_by_another_process_appears_at_the_next_poll(tmp_path):
    state = tmp_path / "state"
    write_job(state, "mine", created=1000.0)
    b = backend(state)
    assert names(b) == ["mine"]
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
        "from tests.store_jobs import write_job; write_job(Path(sys.argv[2]), 'theirs')"
    )
    subprocess.run([sys.executable, "-c", code, str(REPO), str(state)], check=True)
    assert names(b) == ["mine", "theirs"]
    assert b.jobs_index().last["read"] == 1


def test_a_settled_folder_time_is_trusted_and_a_journal_line_still_wins(tmp_path, monkeypatch):
    state = tmp_path / "state"
    for i in range(4):
        write_job(state, f"j{i}", created=1000.0 + i)
    old = time.time() - 60
    os.utime(state / "jobs", (old, old))  # settled: a poll need not list the folder
    b = backend(state)
    b.list_jobs()
    b.list_jobs()
    assert b.jobs_index().last == {"rebuilt": False, "read": 0, "listed": False}
    # Replaced under the same name with the folder's time put back: only the journal tells.
    shutil.rmtree(state / "jobs" / "j2")
    write_job(state, "j2", created=4000.0, finish=FAILED)
    os.utime(state / "jobs", (old, old))
    jobs = {j.name: j for j in b.list_jobs()}
    assert jobs["j2"].status == FAILED and b.jobs_index().last["read"] == 1


def test_records_survive_the_round_trip_exactly(tmp_path):
    from datetime import UTC, datetime

    from kf_jupyter.failure import Failure
    from kf_jupyter.types import Step, TrainerStatus, TrainJob

    job = TrainJob(
        name="x",
        status=COMPLETE,
        backend="local",
        creation_time=datetime.now(UTC),
        steps=[Step("node-0", COMPLETE, 0, 0, 42)],
        labels={"a": "b"},
        trainer_status=TrainerStatus(50, 10, {"loss": "0.1"}, datetime.now(UTC)),
        failure=Failure("Rank 0", "ValueError", "bad", ["tb"]),
        warm=True,
    )
    back = job_index.decode(job_index.encode(job))
    assert back == job and back is not job


def test_newest_and_the_routes_json_agree_with_the_full_list(tmp_path):
    import json

    state = tmp_path / "state"
    for i in range(12):
        write_job(state, f"j{i:02d}", created=1000.0 + i, finish=COMPLETE if i % 2 else FAILED)
    write_job(state, "older-running", created=500.0, finish="")
    b = backend(state)
    full = b.list_jobs()
    jobs, total = b.newest_jobs(5)
    assert total == 13 and [j.name for j in jobs] == [j.name for j in full[-5:]]
    as_dicts = lambda: [j.to_dict() for j in b.list_jobs()]  # noqa: E731
    assert json.loads(b.list_jobs_json()) == as_dicts()  # a running job older than the rest
    write_job(state, "newest-running", created=5000.0, finish="")
    assert json.loads(b.list_jobs_json()) == as_dicts()  # the running jobs appended
    assert json.loads(b.list_jobs_json()) == as_dicts()  # from the cached body


def test_kf_jobs_shows_the_newest_hundred_and_says_how_many_more(tmp_path, monkeypatch, capsys):
    from kf_jupyter.magics.core import JOBS_SHOWN

    state = tmp_path / "state"
    for i in range(JOBS_SHOWN + 5):
        write_job(state, f"job-{i:03d}", created=1000.0 + i)
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(state))
    out = line_magic_output(capsys, "kf_jobs")
    assert f"The newest {JOBS_SHOWN} of {JOBS_SHOWN + 5} jobs" in out and "--all" in out, out
    assert "job-104" in out and "job-004 " not in out and "job-005" in out
    out = line_magic_output(capsys, "kf_jobs", "--all")
    assert "job-000" in out and "job-104" in out and "The newest" not in out
