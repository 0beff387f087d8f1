"""The detached supervisor of one local job, and the job-folder helpers it shares with the backend.

Run as `python supervisor.py JOB_DIR` (by path: standard library only, psutil if present, so it
starts in a few milliseconds). It is started in its own session by `LocalBackend.train()`, owns
the job's processes, writes `status.json` and `events.jsonl`, and outlives the kernel that
started it: another process (a restarted kernel, the server extension) follows the job through
the files alone.

- Every process runs in its own process group, its output appended to `logs/<process>.log`.
- If a process exits non-zero, the others are stopped at once (SIGTERM to their groups and every
  descendant, SIGKILL after a grace period) and the job is Failed, naming the failed rank.
- SIGTERM/SIGINT/SIGHUP to the supervisor cancel the job the same way (`delete_job`).
- `activeDeadlineSeconds` stops the job with reason DeadlineExceeded.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

POLL_SECONDS = 0.05
GRACE_SECONDS = 2.0
SNAPSHOT_SECONDS = 1.0
TAIL_LINES = 12

CREATED = "Created"
RUNNING = "Running"
COMPLETE = "Complete"
FAILED = "Failed"
TERMINAL = (COMPLETE, FAILED)

REASON_COMPLETE = "AllJobsCompleted"
REASON_FAILED = "FailedJobs"
REASON_CANCELLED = "Cancelled"
REASON_DEADLINE = "DeadlineExceeded"
REASON_LOST = "SupervisorLost"


# ----------------------------------------------------------------------------- job-folder files


def atomic_write_json(path: str, data: Any) -> None:
    """Write JSON to `path` atomically (a temporary file, then os.replace)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def read_json(path: str) -> Any:
    """The JSON content of `path`."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@contextlib.contextmanager
def job_lock(job_dir: str) -> Iterator[None]:
    """An exclusive fcntl lock on the job folder (several writers may update status.json)."""
    fd = os.open(os.path.join(job_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def update_status(job_dir: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Read status.json, apply `change` to it in place, write it back; all under the lock."""
    path = os.path.join(job_dir, "status.json")
    with job_lock(job_dir):
        try:
            status = read_json(path)
        except FileNotFoundError:
            status = {}
        change(status)
        atomic_write_json(path, status)
    return status


def finish_status(job_dir: str, status: str, reason: str, message: str) -> bool:
    """Set a terminal status unless one is already set; True if this call set it."""
    done = [False]

    def change(st: dict[str, Any]) -> None:
        if st.get("status") in TERMINAL:
            return
        st.update(status=status, reason=reason, message=message, finished=time.time())
        done[0] = True

    update_status(job_dir, change)
    if done[0]:
        append_event(job_dir, "Normal" if status == COMPLETE else "Warning", reason, message)
    return done[0]


def append_event(job_dir: str, type_: str, reason: str, message: str, obj: str = "") -> None:
    """Append one event line to events.jsonl (one write of one line: atomic with O_APPEND)."""
    line = json.dumps(
        {"time": time.time(), "type": type_, "reason": reason, "message": message, "object": obj}
    )
    fd = os.open(os.path.join(job_dir, "events.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- process trees


def _psutil() -> Any:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency of the local backend
        return None
    return psutil


def process_identity(pid: int) -> float | None:
    """The process's creation time (to tell it from a later process reusing the pid)."""
    ps = _psutil()
    if ps is None:
        return None
    try:
        return float(ps.Process(pid).create_time())
    except Exception:
        return None


def same_process(pid: int, create_time: float | None) -> bool:
    """`pid` is alive (not a zombie) and, when known, was created at `create_time`."""
    ps = _psutil()
    if ps is None:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
    try:
        p = ps.Process(pid)
        if p.status() == ps.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(p.create_time() - create_time) < 0.01
    except Exception:
        return False


def descendants(pids: list[int]) -> list[tuple[int, float]]:
    """Every live descendant of `pids` (pid, creation time)."""
    ps = _psutil()
    out: dict[int, float] = {}
    if ps is None:
        return []
    for pid in pids:
        try:
            for child in ps.Process(pid).children(recursive=True):
                with contextlib.suppress(Exception):
                    out[child.pid] = child.create_time()
        except Exception:
            continue
    return sorted(out.items())


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, create_time: float | None, sig: int) -> None:
    if same_process(pid, create_time):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop_tree(
    groups: list[int],
    known: list[tuple[int, float | None]],
    grace: float = GRACE_SECONDS,
    reap: Callable[[], None] | None = None,
) -> None:
    """Stop process groups and known processes with all their descendants.

    SIGTERM to every group and process (and the descendants found now), SIGKILL to whatever is
    still alive after `grace` seconds. `reap` is called while waiting (to collect our children).
    """
    leaders = [pid for pid, _ in known]
    found = dict(known)
    for pid, ct in descendants(leaders + groups):
        found.setdefault(pid, ct)
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    for pid, ct in found.items():
        _signal_pid(pid, ct, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if reap:
            reap()
        if not any(same_process(pid, ct) for pid, ct in found.items()):
            break
        time.sleep(POLL_SECONDS)
    for pid, ct in descendants(list(found)):
        found.setdefault(pid, ct)
    for pgid in groups:
        _signal_group(pgid, signal.SIGKILL)
    for pid, ct in found.items():
        _signal_pid(pid, ct, signal.SIGKILL)
    if reap:
        reap()


# ----------------------------------------------------------------------------- failure messages


def tail_text(path: str, max_bytes: int = 65536) -> str:
    """The last `max_bytes` of a file, decoded (empty if missing)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_lines(path: str, n: int = TAIL_LINES) -> list[str]:
    """The last `n` non-empty lines of a file."""
    lines = [ln for ln in tail_text(path).splitlines() if ln.strip()]
    return lines[-n:]


_TORCH_ROOT = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_MPI_ROOT = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(-?\d+)")


def failed_rank(job_dir: str, process_logs: dict[str, str]) -> tuple[int | None, int | None]:
    """(global rank, exit code) of the first failure, from torchrun/mpirun output or tracebacks."""
    for text in process_logs.values():
        root = text.split("Root Cause", 1)[-1]
        m = _TORCH_ROOT.search(root) or _MPI_ROOT.search(text)
        if m:
            return int(m.group(1)), int(m.group(2))
    logs = os.path.join(job_dir, "logs")
    candidates = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(logs):
            m = re.fullmatch(r"rank-(\d+)\.log", entry.name)
            if m and "Traceback (most recent call last)" in tail_text(entry.path):
                candidates.append((entry.stat().st_mtime, int(m.group(1))))
    if candidates:
        return min(candidates)[1], None
    return None, None


def failure_message(job_dir: str, name: str, code: int) -> str:
    """One message naming the failed rank (or process), its exit code and its last log lines."""
    logs = os.path.join(job_dir, "logs")
    proc_log = os.path.join(logs, f"{name}.log")
    texts = {name: tail_text(proc_log)}
    with contextlib.suppress(OSError):
        for entry in os.scandir(logs):
            if not entry.name.startswith("rank-") and entry.name.endswith(".log"):
                texts.setdefault(entry.name[:-4], tail_text(entry.path))
    rank, rank_code = failed_rank(job_dir, texts)
    code_text = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    if rank is not None:
        rcode = f"exit code {rank_code}" if rank_code is not None else code_text
        head = f"Rank {rank} failed ({rcode}; process {name} ended with {code_text})."
        lines = last_lines(os.path.join(logs, f"rank-{rank}.log")) or last_lines(proc_log)
        where = f"rank-{rank}.log"
    else:
        head = f"Process {name} failed with {code_text}."
        lines = last_lines(proc_log)
        where = f"{name}.log"
    body = "\n".join(lines) if lines else "(no output)"
    return (
        f"{head} The other processes were stopped. Last lines of {where}:\n{body}\n"
        "See every line with client.get_job_logs(name)."
    )


# ----------------------------------------------------------------------------- the supervisor


class Supervisor:
    """Starts the processes of spawn.json, watches them, and records what happens."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir
        self.spec = read_json(os.path.join(job_dir, "spawn.json"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.exits: dict[str, int] = {}
        self.cancel_signal: int | None = None
        self.snapshot: list[tuple[int, float]] = []

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.cancel_signal = signum

    def _reap(self) -> None:
        for name, p in self.procs.items():
            rc = p.poll()
            if rc is not None and name not in self.exits:
                self.exits[name] = rc
                append_event(
                    self.job_dir, "Normal", "Exited", f"process {name} exited with code {rc}", name
                )

                def change(st: dict[str, Any], name: str = name, rc: int = rc) -> None:
                    st.setdefault("processes", {}).setdefault(name, {})["exit_code"] = rc

                update_status(self.job_dir, change)

    def _start(self) -> None:
        logs = os.path.join(self.job_dir, "logs")
        cwd = self.spec["cwd"]
        for item in self.spec["processes"]:
            for path, text in (item.get("files") or {}).items():
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text)
            env = dict(os.environ)
            env.update(item["env"])
            os.makedirs(env.get("KF_JUPYTER_WORKDIR", logs), exist_ok=True)
            with open(os.path.join(logs, f"{item['name']}.log"), "ab") as log:
                p = subprocess.Popen(
                    item["argv"],
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
            self.procs[item["name"]] = p
            ident = process_identity(p.pid)

            entry = {
                "pid": p.pid,
                "pgid": p.pid,
                "create_time": ident,
                "node_index": item.get("node_index", 0),
                "exit_code": None,
            }

            def change(st: dict[str, Any], name: str = item["name"], entry: Any = entry) -> None:
                st.setdefault("processes", {})[name] = entry

            update_status(self.job_dir, change)
            append_event(
                self.job_dir,
                "Normal",
                "Started",
                f"process {item['name']} pid {p.pid}",
                item["name"],
            )

    def _stop_all(self) -> None:
        groups = [p.pid for p in self.procs.values()]
        known: list[tuple[int, float | None]] = [
            (p.pid, None) for n, p in self.procs.items() if n not in self.exits
        ]
        known += [(pid, ct) for pid, ct in self.snapshot]
        stop_tree(groups, known, reap=self._reap)
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                p.wait(timeout=1)
        self._reap()

    def _take_snapshot(self) -> None:
        snap = descendants([p.pid for p in self.procs.values()])
        if snap != self.snapshot:
            self.snapshot = snap

            def change(st: dict[str, Any]) -> None:
                st["descendants"] = [[pid, ct] for pid, ct in snap]

            update_status(self.job_dir, change)

    def run(self) -> int:
        """Start, watch and finish the job; the exit code is 0 when it completed."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        # Wake up at once when a child exits (or a signal arrives), not at the next poll.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        ident = process_identity(os.getpid())
        update_status(
            self.job_dir,
            lambda st: st.update(supervisor_pid=os.getpid(), supervisor_create_time=ident),
        )
        try:
            self._start()
        except Exception as exc:
            self._stop_all()
            finish_status(
                self.job_dir, FAILED, REASON_FAILED, f"The job's processes could not start: {exc}"
            )
            return 1
        started = time.time()
        if self.cancel_signal is None:

            def running(st: dict[str, Any]) -> None:
                if st.get("status") not in TERMINAL:
                    st.update(status=RUNNING, started=started)

            update_status(self.job_dir, running)
            append_event(self.job_dir, "Normal", "Running", "all processes started")
        deadline = self.spec.get("deadline_seconds")
        last_snap = 0.0
        while True:
            self._reap()
            if self.cancel_signal is not None:
                self._stop_all()
                finish_status(
                    self.job_dir,
                    FAILED,
                    REASON_CANCELLED,
                    f"The job was cancelled (signal {self.cancel_signal}); its processes were stopped.",
                )
                return 1
            bad = [(n, rc) for n, rc in self.exits.items() if rc != 0]
            if bad:
                name, code = bad[0]
                self._stop_all()
                finish_status(
                    self.job_dir, FAILED, REASON_FAILED, failure_message(self.job_dir, name, code)
                )
                return 1
            if len(self.exits) == len(self.procs):
                self._stop_all()  # whatever the job left behind in its process groups
                finish_status(
                    self.job_dir, COMPLETE, REASON_COMPLETE, "All processes exited with code 0."
                )
                return 0
            if deadline is not None and time.time() - started > float(deadline):
                self._stop_all()
                finish_status(
                    self.job_dir,
                    FAILED,
                    REASON_DEADLINE,
                    f"The job ran longer than activeDeadlineSeconds={deadline}; its processes "
                    "were stopped.",
                )
                return 1
            now = time.monotonic()
            if now - last_snap >= SNAPSHOT_SECONDS:
                last_snap = now
                self._take_snapshot()
            select.select([wake_r], [], [], POLL_SECONDS)
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)


def main(argv: list[str]) -> int:
    """Entry point: `supervisor.py JOB_DIR`."""
    if len(argv) != 2:
        sys.stderr.write("usage: supervisor.py JOB_DIR\n")
        return 2
    job_dir = argv[1]
    try:
        return Supervisor(job_dir).run()
    except Exception as exc:  # record why, so waiters do not hang
        with contextlib.suppress(Exception):
            finish_status(job_dir, FAILED, REASON_LOST, f"The job's supervisor failed: {exc!r}")
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv))
