"""Local-backend faults (issue 8, part B), each run several times: real processes, real signals,
a real full filesystem (a tmpfs mounted for the test), real concurrent launchers.

After every scenario: zero processes of the job left (the process table is searched for the
job's folder in each command line and environment) and every line written before the fault
still on disk. "Written" is proved by a ledger: each rank prints a numbered line (flushed, so it
reached its log file) and only then appends the same line to a ledger file outside the job
folder; the ledger must be a prefix of the rank's log afterwards.

Covered elsewhere, and listed in docs/reliability.md: a rank raising (tests/test_local_backend.py
and test_local_frameworks.py), delete/cancel mid-run, the deadline, the supervisor SIGKILLed, a
gated job surviving its kernel (tests/test_local_backend.py).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from kf_jupyter import JAXTrainer, MPITrainer, TorchTrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.client import TrainerClient
from kf_jupyter.errors import BackendError, JobFailedError
from kf_jupyter.options import Warm

from . import waits
from .waits import DEADLINE

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
RUNS = 3


# ----------------------------------------------------------------------------- what ranks run


def numbered(ledger_dir, n=100_000, period=0.02, tag="line"):
    """Rank body: print n numbered lines, each then appended to this rank's ledger."""
    import os
    import time

    names = ("RANK", "OMPI_COMM_WORLD_RANK", "JAX_PROCESS_ID")
    rank = next(int(os.environ[v]) for v in names if v in os.environ)
    with open(os.path.join(ledger_dir, f"rank-{rank}.pid"), "w") as fh:
        fh.write(str(os.getpid()))
    with open(os.path.join(ledger_dir, f"rank-{rank}.ledger"), "w") as led:
        for i in range(n):
            line = f"rank {rank} {tag} {i}"
            print(line, flush=True)  # in the log file now ...
            led.write(line + "\n")  # ... and only then in the ledger
            led.flush()
            time.sleep(period)
    return {"rank": rank, "lines": n}


def fill_the_disk(ledger_dir):
    """Rank body: rank 1 prints once and sleeps; rank 0 prints until the disk is full."""
    import os
    import time

    rank = int(os.environ["JAX_PROCESS_ID"])
    with open(os.path.join(ledger_dir, f"rank-{rank}.ledger"), "w") as led:
        if rank == 1:
            print("rank 1 waiting", flush=True)
            led.write("rank 1 waiting\n")
            led.flush()
            time.sleep(120)  # must be stopped by the supervisor, not left behind
        other = os.path.join(ledger_dir, "rank-1.ledger")
        while not os.path.exists(other) or os.path.getsize(other) == 0:
            time.sleep(0.01)
        for i in range(10**7):
            line = f"rank 0 line {i} " + "x" * 200
            print(line, flush=True)
            led.write(line + "\n")
            led.flush()


# ----------------------------------------------------------------------------- checks


def leftovers(job_dir: Path) -> list[psutil.Process]:
    """Live processes of the job: its folder appears in their command line or environment, or
    they hold a file in it open for writing (a warm rank, forked from the pool, keeps the pool's own
    environment in /proc but has its log open, as `lsof` shows)."""
    key = str(job_dir)
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == os.getpid():
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if (
                key in " ".join(p.cmdline())
                or any(key in v for v in p.environ().values())
                or any(f.path.startswith(key + "/") and f.mode != "r" for f in p.open_files())
            ):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def assert_no_leftovers(job_dir: Path, timeout: float = 60.0) -> None:
    """No process of the job is alive (they get `timeout` seconds to go)."""
    end = time.monotonic() + timeout
    left = leftovers(job_dir)
    while left and time.monotonic() < end:
        time.sleep(0.1)
        left = leftovers(job_dir)
    desc = []
    for p in left:
        try:
            desc.append((p.pid, p.cmdline()[:3]))
        except psutil.Error:
            continue
    assert not desc, f"processes of {job_dir.name} left behind: {desc}"


def read_lines(path: Path) -> list[str]:
    """The complete lines of a file."""
    data = path.read_bytes().decode("utf-8", "replace")
    return data.split("\n")[:-1]  # an unterminated last piece was not fully written


def assert_ledger_kept(ledger_dir: Path, job_dir: Path, ranks: int, at_least: int = 1) -> int:
    """Every ledger line (printed before the fault) is in the rank's log, in order, no gaps.

    Returns the number of lines checked.
    """
    checked = 0
    for r in range(ranks):
        path = ledger_dir / f"rank-{r}.ledger"
        ledger = read_lines(path) if path.exists() else []  # a rank stopped before it began
        log = read_lines(job_dir / "logs" / f"rank-{r}.log") if ledger else []
        assert len(ledger) >= at_least, (r, ledger[-3:])
        assert log[: len(ledger)] == ledger, (
            f"rank {r}: {len(ledger)} lines printed before the fault, log holds "
            f"{len(log)}; first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(ledger, log)) if a != b), len(log))}"
        )
        checked += len(ledger)
    return checked


def wait_until(
    cond: Callable[[], bool], timeout: float = DEADLINE, what: str = "condition"
) -> None:
    """Poll `cond()` every 20 ms until it holds (tests/waits.py: generous, names `what`)."""
    waits.wait_until(cond, what=what, timeout=timeout)


def ledger_len(ledger_dir: Path, rank: int) -> int:
    """Lines in a rank's ledger so far."""
    try:
        return (ledger_dir / f"rank-{rank}.ledger").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def status_of(job_dir: Path) -> dict[str, Any]:
    """The job's status.json."""
    return json.loads((job_dir / "status.json").read_text())


def figures(record_property: Callable[[str, Any], None], **values: Any) -> None:
    """Attach figures to the test report (docs/reliability.md shows them)."""
    for key, value in values.items():
        if isinstance(value, list) and value and isinstance(value[0], float):
            value = f"median {statistics.median(value):.2f}, max {max(value):.2f}"
        record_property(key, value)


@pytest.fixture
def client(tmp_path: Path) -> TrainerClient:
    """A local client on a fresh state dir; whatever a failed test left is deleted."""
    c = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    yield c
    for job in c.list_jobs():
        c.delete_job(job.name)


# ----------------------------------------------------------------------------- SIGKILL


def _torch() -> TorchTrainer:
    return TorchTrainer(func=numbered, num_proc_per_node=2)


def _mpi() -> MPITrainer:
    return MPITrainer(func=numbered, num_proc_per_node=2)


def _launcher_pid(job_dir: Path) -> int:
    procs = status_of(job_dir)["processes"]
    assert len(procs) == 1, procs
    return int(next(iter(procs.values()))["pid"])


def _rank_one_pid(ledger_dir: Path, job_dir: Path) -> int:
    return int((ledger_dir / "rank-1.pid").read_text())


KILLS = [
    pytest.param(
        _torch,
        _rank_one_pid,
        r"Rank 1 was killed by signal 9 \(SIGKILL\); process node-0 \(torchrun\)",
        marks=pytest.mark.reliability(
            scenario="SIGKILL of one torch worker (rank 1 of 1x2) while it prints",
            area="local",
            tries=RUNS,
        ),
        id="torch-rank",
    ),
    pytest.param(
        _torch,
        lambda ledger_dir, job_dir: _launcher_pid(job_dir),
        r"Process node-0 \(torchrun\) was killed by signal 9 \(SIGKILL\)",
        marks=pytest.mark.reliability(
            scenario="SIGKILL of torchrun itself while its 2 workers print",
            area="local",
            tries=RUNS,
        ),
        id="torchrun",
    ),
    pytest.param(
        _mpi,
        lambda ledger_dir, job_dir: _launcher_pid(job_dir),
        r"Process launcher \(mpirun\) was killed by signal 9 \(SIGKILL\)",
        marks=pytest.mark.reliability(
            scenario="SIGKILL of mpirun itself while its 2 ranks print",
            area="local",
            tries=RUNS,
        ),
        id="mpirun",
    ),
    pytest.param(
        _mpi,
        _rank_one_pid,
        r"Rank 1 was killed by signal 9 \(SIGKILL\); process launcher \(mpirun\)",
        marks=pytest.mark.reliability(
            scenario="SIGKILL of one MPI rank (rank 1 of 2) while it prints",
            area="local",
            tries=RUNS,
        ),
        id="mpi-rank",
    ),
]


@pytest.mark.parametrize(("make", "victim", "expected"), KILLS)
def test_sigkill_while_running(client, tmp_path, record_property, make, victim, expected):
    """The job ends Failed naming what died; nothing left running; no printed line lost."""
    to_failed, checked = [], 0
    for run in range(RUNS):
        ledger_dir = tmp_path / f"ledger-{run}"
        ledger_dir.mkdir()
        trainer = make()
        trainer.func_args = {"ledger_dir": str(ledger_dir)}
        name = client.train(trainer)
        job_dir = client.backend.jobs_dir / name
        wait_until(
            lambda d=ledger_dir: min(ledger_len(d, 0), ledger_len(d, 1)) >= 10,
            what=f"run {run}: both ranks printing 10 lines",
        )
        pid = victim(ledger_dir, job_dir)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(JobFailedError, match=expected):
            client.wait_for_job_status(name, timeout=DEADLINE)
        to_failed.append(time.monotonic() - t0)
        job = client.get_job(name)
        assert (job.status, job.reason) == ("Failed", "FailedJobs")
        assert_no_leftovers(job_dir)
        checked += assert_ledger_kept(ledger_dir, job_dir, ranks=2, at_least=10)
        assert not (job_dir / ".reserve").exists()
    figures(
        record_property,
        runs=RUNS,
        kill_to_failed_s=to_failed,
        lines_checked=checked,
        lines_lost=0,
        processes_left=0,
    )


# ----------------------------------------------------------------------------- kernel killed

KERNEL = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[3])
    from kf_jupyter import JAXTrainer
    from kf_jupyter.client import TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from tests.test_reliability_local import numbered
    c = TrainerClient(LocalBackendConfig(state_dir=sys.argv[1]))
    args = {"ledger_dir": sys.argv[2], "n": 60, "period": 0.1}
    t = JAXTrainer(func=numbered, num_nodes=2, func_args=args, initialize_distributed=False)
    print(c.train(t), flush=True)
    time.sleep(600)
    """
)

OBSERVER = textwrap.dedent(
    """
    import json, sys
    from kf_jupyter.client import TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig
    c = TrainerClient(LocalBackendConfig(state_dir=sys.argv[1]))
    name = sys.argv[2]
    first = c.get_job(name).status
    job = c.wait_for_job_status(name, timeout=280)
    print(json.dumps({
        "listed": [j.name for j in c.list_jobs()],
        "first": first,
        "status": job.status,
        "reason": job.reason,
        "result": c.get_job_result(name),
        "lines": [r.tagged() for r in c.backend.iter_log_records(name)],
    }))
    """
)


@pytest.mark.reliability(
    scenario="the kernel that launched a 2-rank job SIGKILLed while the ranks print; "
    "a new process sees the job run on and complete",
    area="local",
    tries=RUNS,
)
def test_kernel_killed_while_ranks_run(client, tmp_path, record_property):
    """Documented behaviour: the job is the supervisor's, so it runs on and completes."""
    state = str(client.backend.state_dir)
    durations = []
    for run in range(RUNS):
        ledger_dir = tmp_path / f"ledger-{run}"
        ledger_dir.mkdir()
        kernel = subprocess.Popen(
            [sys.executable, "-c", KERNEL, state, str(ledger_dir), str(REPO)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        try:
            name = kernel.stdout.readline().strip()
            assert name, "the kernel did not start a job"
            wait_until(
                lambda d=ledger_dir: ledger_len(d, 1) >= 5, what=f"run {run}: rank 1 printing"
            )
            at_kill = ledger_len(ledger_dir, 0)
            t0 = time.monotonic()
            kernel.kill()
        finally:
            kernel.kill()
            kernel.wait()
        assert at_kill < 60, f"run {run}: the ranks had finished before the kernel was killed"
        observer = subprocess.run(
            [sys.executable, "-c", OBSERVER, state, name],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=DEADLINE,
        )
        assert observer.returncode == 0, observer.stderr[-2000:]
        seen = json.loads(observer.stdout)
        durations.append(time.monotonic() - t0)
        assert seen["first"] == "Running"
        assert (seen["status"], seen["reason"]) == ("Complete", "AllJobsCompleted")
        assert seen["listed"].count(name) == 1
        assert seen["result"] == {"rank": 0, "lines": 60}
        for r in range(2):
            mine = [x for x in seen["lines"] if x.startswith(f"[rank-{r}] rank {r} line ")]
            assert mine == [f"[rank-{r}] rank {r} line {i}" for i in range(60)]
        job_dir = client.backend.jobs_dir / name
        assert_no_leftovers(job_dir)
        assert_ledger_kept(ledger_dir, job_dir, ranks=2, at_least=60)
    figures(
        record_property,
        runs=RUNS,
        kill_to_complete_seen_by_new_process_s=durations,
        lines_checked=RUNS * 120,
        lines_lost=0,
        processes_left=0,
    )


# ----------------------------------------------------------------------------- disk full


@pytest.fixture
def tiny_fs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 1 MiB tmpfs (a real filesystem that fills up); skipped where mounting is not allowed."""
    # The notebook's folder, which each job copies as its workspace: not this repository (1 MiB).
    (tmp_path / "notebook").mkdir()
    monkeypatch.chdir(tmp_path / "notebook")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(path: Path) -> None:
    """Write zeros to `path` until the filesystem is full (unbuffered: the last bytes too)."""
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass


@pytest.mark.reliability(
    scenario="disk full while rank 0 writes its log (job folder on a 1 MiB tmpfs); then a "
    "supervisor SIGKILLed on the full disk, and train() on the full disk",
    area="local",
    tries=RUNS,
)
def test_disk_full_while_writing_logs(tiny_fs, tmp_path, record_property):
    """Failed / LogWriteFailed naming the cause; lines already written kept; nothing left."""
    client = TrainerClient(LocalBackendConfig(state_dir=tiny_fs / "state"))
    to_failed, checked = [], 0
    for run in range(RUNS):
        ledger_dir = tmp_path / f"ledger-{run}"
        ledger_dir.mkdir()
        trainer = JAXTrainer(
            func=fill_the_disk,
            num_nodes=2,
            func_args={"ledger_dir": str(ledger_dir)},
            initialize_distributed=False,
        )
        t0 = time.monotonic()
        name = client.train(trainer)
        job_dir = client.backend.jobs_dir / name
        with pytest.raises(JobFailedError, match="LogWriteFailed") as err:
            client.wait_for_job_status(name, timeout=DEADLINE)
        to_failed.append(time.monotonic() - t0)
        assert "No space left on device" in str(err.value)
        assert "LocalBackendConfig(state_dir=...)" in str(err.value)
        job = client.get_job(name)
        assert (job.status, job.reason) == ("Failed", "LogWriteFailed")
        events = (job_dir / "events.jsonl").read_text().splitlines()
        assert [json.loads(e)["reason"] for e in events][-1] == "LogWriteFailed"  # no half line
        assert [e.reason for e in client.get_job_events(name)].count("Exited") == 2
        assert_no_leftovers(job_dir)
        checked += assert_ledger_kept(ledger_dir, job_dir, ranks=2, at_least=1)
        assert ledger_len(ledger_dir, 0) > 1000  # it did fill the disk
        assert not (job_dir / ".reserve").exists()
        assert not list(job_dir.glob("*.tmp"))
        client.delete_job(name)  # frees the space for the next run
        assert not job_dir.exists()
    # A job whose supervisor dies while the disk is full: still reported, still deletable.
    sleeper = client.train(
        JAXTrainer(func=wait_for_gate, func_args={"gate": "-"}, initialize_distributed=False)
    )
    client.wait_for_job_status(sleeper, {"Running"}, timeout=DEADLINE)
    sleeper_dir = client.backend.jobs_dir / sleeper
    wait_until(lambda: list(client.get_job_logs(sleeper)) == ["rank 0 up"], what="rank up")
    _fill(tiny_fs / "filler")
    supervisor = psutil.Process(status_of(sleeper_dir)["supervisor_pid"])
    supervisor.kill()
    supervisor.wait(timeout=DEADLINE)
    job = client.get_job(sleeper)  # the status cannot be written: said anyway, no OSError
    assert (job.status, job.reason) == ("Failed", "SupervisorLost")
    # A new job on a disk that is already full: one clear error, nothing half-made left.
    with pytest.raises(BackendError, match="No space left on device") as err:
        client.train(JAXTrainer(func=numbered, func_args={"ledger_dir": str(tmp_path), "n": 1}))
    assert "Traceback" not in str(err.value)
    assert [j.name for j in client.list_jobs()] == [sleeper]
    client.delete_job(sleeper)  # stops the rank the lost supervisor left
    assert_no_leftovers(sleeper_dir)
    assert client.list_jobs() == []
    figures(
        record_property,
        runs=RUNS,
        train_to_failed_s=to_failed,
        lines_checked=checked,
        lines_lost=0,
        processes_left=0,
        filesystem="tmpfs size=1m (mounted by the test, as root)",
    )


def fill_from_both_ranks(ledger_dir):
    """Rank body (torchrun): every rank prints until the disk is full."""
    import os

    rank = int(os.environ["RANK"])
    with open(os.path.join(ledger_dir, f"rank-{rank}.ledger"), "w") as led:
        for i in range(10**7):
            line = f"rank {rank} line {i} " + "y" * 200
            print(line, flush=True)
            led.write(line + "\n")
            led.flush()


@pytest.mark.reliability(
    scenario="disk full while both torch workers write their logs (torchrun 1x2, job folder "
    "on a 1 MiB tmpfs)",
    area="local",
    tries=RUNS,
)
def test_disk_full_under_torchrun(tiny_fs, tmp_path, record_property):
    """torchrun's own error reporting meets the full disk too; same outcome."""
    client = TrainerClient(LocalBackendConfig(state_dir=tiny_fs / "state"))
    to_failed, checked = [], 0
    for run in range(RUNS):
        ledger_dir = tmp_path / f"ledger-{run}"
        ledger_dir.mkdir()
        trainer = TorchTrainer(
            func=fill_from_both_ranks,
            num_proc_per_node=2,
            func_args={"ledger_dir": str(ledger_dir)},
        )
        # torchrun's own reporting is what this checks: the cold path (no warm pool).
        name = client.train(trainer, options=[Warm(False)])
        job_dir = client.backend.jobs_dir / name
        # On a loaded machine one rank may fill the disk before the other prints at all.
        wait_until(
            lambda d=ledger_dir: ledger_len(d, 0) + ledger_len(d, 1) > 0,
            what=f"run {run}: a rank printing",
        )
        t0 = time.monotonic()
        with pytest.raises(JobFailedError, match="No space left on device") as err:
            client.wait_for_job_status(name, timeout=DEADLINE)
        to_failed.append(time.monotonic() - t0)
        message = str(err.value)
        assert "(LogWriteFailed)" in message, message
        # Which comes first is a race: a process failing on the full disk (then the message
        # names it, "node-0 (torchrun)"), or the supervisor's own write meeting ENOSPC (then
        # no process has failed yet and none is named). Either way the job ends LogWriteFailed.
        if "Process node-0" in message or "Rank " in message:
            assert "(torchrun)" in message, message
        assert_no_leftovers(job_dir)
        checked += assert_ledger_kept(ledger_dir, job_dir, ranks=2, at_least=0)
        assert ledger_len(ledger_dir, 0) + ledger_len(ledger_dir, 1) > 0
        client.delete_job(name)
    figures(
        record_property,
        runs=RUNS,
        first_line_to_failed_s=to_failed,
        lines_checked=checked,
        lines_lost=0,
        processes_left=0,
    )


@pytest.mark.reliability(
    scenario="an event line appended to events.jsonl with less room left on the disk than "
    "the line (a short write): no half line, ENOSPC reported",
    area="local",
    tries=RUNS,
)
def test_event_on_a_nearly_full_disk_is_all_or_nothing(tiny_fs, record_property):
    """A half-written event would glue itself to the next one and both would be lost."""
    from kf_jupyter.backends.local import supervisor as sv

    for run in range(RUNS):
        job_dir = tiny_fs / f"job-{run}"
        job_dir.mkdir()
        events = job_dir / "events.jsonl"
        first = json.dumps(
            {"time": 0, "type": "Normal", "reason": "Created", "message": "x" * 3900}
        )
        events.write_text(first + "\n")  # one 4 KiB page, ~100 bytes of it still free
        _fill(tiny_fs / f"filler-{run}")
        with pytest.raises(OSError) as err:
            sv.append_event(str(job_dir), "Normal", "Exited", "y" * 300)
        assert sv.is_disk_full(err.value)
        assert events.read_text() == first + "\n"  # exactly as before: no half line
        (tiny_fs / f"filler-{run}").unlink()
        sv.append_event(str(job_dir), "Warning", "LogWriteFailed", "room again")
        reasons = [json.loads(x)["reason"] for x in events.read_text().splitlines()]
        assert reasons == ["Created", "LogWriteFailed"]
    figures(record_property, runs=RUNS, half_lines=0)


# ----------------------------------------------------------------------------- concurrency

LAUNCHER = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, sys.argv[4])
    from kf_jupyter import JAXTrainer
    from kf_jupyter.client import TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from tests.test_reliability_local import numbered
    state, go, who = sys.argv[1], sys.argv[2], sys.argv[3]
    c = TrainerClient(LocalBackendConfig(state_dir=state))
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.005)
    names = {}
    for j in range(5):
        ledger = os.path.join(os.path.dirname(go), f"ledger-{who}-{j}")
        os.mkdir(ledger)
        args = {"ledger_dir": ledger, "n": 20, "period": 0.0, "tag": f"w{who}j{j}"}
        t = JAXTrainer(func=numbered, num_nodes=2, func_args=args, initialize_distributed=False)
        names[c.train(t)] = f"w{who}j{j}"
        c.list_jobs()  # reading while the others write
    for name in names:
        c.wait_for_job_status(name, timeout=280)
    print(json.dumps(names), flush=True)
    """
)


@pytest.mark.reliability(
    scenario="20 jobs launched at once from 4 processes (5 each) against one state dir",
    area="local",
    tries=RUNS,
)
def test_twenty_jobs_from_four_processes(client, tmp_path, record_property):
    """Every job listed exactly once, Complete, with its own intact logs; no temp files left."""
    state = str(client.backend.state_dir)
    walls = []
    for run in range(RUNS):
        base = tmp_path / f"run-{run}"
        base.mkdir()
        go = base / "go"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", LAUNCHER, state, str(go), str(w), str(REPO)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=tmp_path,
            )
            for w in range(4)
        ]
        for w, p in enumerate(procs):  # all four have imported kf_jupyter and are waiting
            ready = p.stdout.readline().strip()
            assert ready == "ready", f"run {run}: launcher {w} did not start: {p.stderr.read()}"
        t0 = time.monotonic()
        go.touch()
        tags: dict[str, str] = {}
        for p in procs:
            out, errs = p.communicate(timeout=DEADLINE)
            assert p.returncode == 0, errs[-2000:]
            tags.update(json.loads(out))
        walls.append(time.monotonic() - t0)
        assert len(tags) == 20 and len(set(tags.values())) == 20
        jobs = client.list_jobs()
        listed = [j.name for j in jobs]
        assert len(listed) == len(set(listed)) == 20
        assert set(listed) == set(tags)
        for job in jobs:
            assert (job.status, job.reason) == ("Complete", "AllJobsCompleted"), job.message
            tag = tags[job.name]
            job_dir = client.backend.jobs_dir / job.name
            for r in range(2):
                log = read_lines(job_dir / "logs" / f"rank-{r}.log")
                expected = [f"rank {r} {tag} {i}" for i in range(20)]
                assert log[:20] == expected
            assert client.get_job_result(job.name) == {"rank": 0, "lines": 20}
            assert not list(job_dir.glob("*.tmp")) and not (job_dir / ".reserve").exists()
            assert status_of(job_dir)["name"] == job.name
            assert_no_leftovers(job_dir)
        for job in jobs:
            client.delete_job(job.name)
    figures(
        record_property,
        runs=RUNS,
        jobs_per_run=20,
        go_to_all_complete_s=walls,
        jobs_listed_once=RUNS * 20,
        processes_left=0,
    )


# ----------------------------------------------------------------------------- job folder removed


def wait_for_gate(gate):
    """Rank body: say "up"; rank 1 returns once `gate` exists, the others sleep."""
    import os
    import time

    rank = int(os.environ["JAX_PROCESS_ID"])
    print(f"rank {rank} up", flush=True)
    if rank == 1:
        while not os.path.exists(gate):
            time.sleep(0.02)
        return rank
    time.sleep(120)


@pytest.mark.reliability(
    scenario="the job folder removed by hand (rm -rf) while its ranks run",
    area="local",
    tries=RUNS,
)
def test_job_folder_removed_while_running(client, tmp_path, record_property):
    """The supervisor cannot record anything any more: it stops the ranks instead of leaving them."""
    to_gone, rm_tries = [], []
    for run in range(RUNS):
        gate = tmp_path / f"gate-{run}"
        trainer = JAXTrainer(
            func=wait_for_gate,
            num_nodes=2,
            func_args={"gate": str(gate)},
            initialize_distributed=False,
        )
        name = client.train(trainer)
        job_dir = client.backend.jobs_dir / name
        client.wait_for_job_status(name, {"Running"}, timeout=DEADLINE)
        wait_until(
            lambda d=job_dir: all(
                (d / "logs" / f"rank-{r}.log").exists()
                and (d / "logs" / f"rank-{r}.log").stat().st_size > 0
                for r in range(2)
            ),
            what=f"run {run}: both ranks up",
        )
        assert len(leftovers(job_dir)) >= 3  # supervisor and two ranks
        # As a user would: rm -rf again if it says "Directory not empty" (the supervisor wrote a
        # file between rm's unlinks and its rmdir; under load that window is wide).
        tries = 0
        while job_dir.exists():
            tries += 1
            subprocess.run(["rm", "-rf", str(job_dir)], stderr=subprocess.DEVNULL)
            assert tries < 100, f"run {run}: rm -rf {job_dir} never managed to remove it"
        rm_tries.append(tries)
        t0 = time.monotonic()
        if run % 2 == 0:
            gate.touch()  # rank 1 exits: the supervisor has to write, and finds no folder
        # (odd runs: nothing exits; the supervisor's once-a-second check notices)
        assert_no_leftovers(job_dir)
        to_gone.append(time.monotonic() - t0)
        assert name not in [j.name for j in client.list_jobs()]
    figures(
        record_property,
        runs=RUNS,
        exit_to_all_stopped_s=to_gone,
        processes_left=0,
        rm_rf_attempts_max=max(rm_tries),
    )
