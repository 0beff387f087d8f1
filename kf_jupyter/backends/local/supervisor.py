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
- Suspend and resume (`control.json` {"suspend": true|false}, then SIGUSR1 to wake it up; also
  read every second): suspending stops the processes as a cancel does (SIGTERM, grace, SIGKILL)
  and keeps the folder, the logs and the supervisor (status Suspended); resuming starts the same
  processes again with the same environment (the spec stays in memory only, never on disk),
  with a marker line in every log between the runs. The deadline timer restarts on resume.
- It is a child subreaper (Linux): a process whose parent dies (torchrun or mpirun killed) is
  re-parented to the supervisor, not to init, so it is still found and stopped.
- A full disk: a few KiB are set aside (`.reserve`) when the job starts; if the job folder's
  filesystem fills up (a rank fails while it is full, or one of our own writes gets ENOSPC), the
  processes are stopped, the reserve is released and the job ends Failed / LogWriteFailed.
- A package environment to build first (spawn.json `prepare`, docs/local-backend.md): before
  anything else it runs the builder (status Created, event InstallingPackages, pip's output in
  `install.log`); a failed build ends the job Failed / PackageInstallFailed with the end of
  pip's log, a cancel stops pip.
- GPUs (spawn.json `gpus`): before starting the processes it takes each node's devices from the
  store-wide allocator (gpus.py), waiting as Created / WaitingForGPUs while too few are free, and
  gives them back on suspend and whenever it exits.
- If the supervisor itself fails unexpectedly it still stops the job's processes; if the job
  folder is removed under it (checked every second), it stops them too.
"""

from __future__ import annotations

import contextlib
import errno
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
RESERVE_BYTES = 128 * 1024  # set aside to record the end of a job on a full disk
LOW_SPACE_BYTES = 64 * 1024  # below this the job folder's filesystem counts as full
PR_SET_CHILD_SUBREAPER = 36
JOB_UMASK = -1  # the umask of the job's processes (main() sets it; -1: leave it alone)

CREATED = "Created"
RUNNING = "Running"
COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"
TERMINAL = (COMPLETE, FAILED)

REASON_COMPLETE = "AllJobsCompleted"
REASON_FAILED = "FailedJobs"
REASON_CANCELLED = "Cancelled"
REASON_DEADLINE = "DeadlineExceeded"
REASON_LOST = "SupervisorLost"
REASON_LOG_WRITE = "LogWriteFailed"
REASON_SUSPENDED = "Suspended"
REASON_RESUMED = "Resumed"
REASON_WAITING_GPUS = "WaitingForGPUs"
REASON_INSTALLING = "InstallingPackages"
REASON_INSTALLED = "InstalledPackages"
REASON_INSTALL_FAILED = "PackageInstallFailed"
INSTALL_LOG = "install.log"
CONTROL_FILE = "control.json"
GPU_RETRY_SECONDS = 0.5  # a job waiting for GPUs asks the allocator again this often


# ----------------------------------------------------------------------------- job-folder files


#: Modes of everything in the job store: only its owner may read it (issue 13).
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def private_open(path: str, flags: int = os.O_WRONLY | os.O_CREAT | os.O_TRUNC) -> int:
    """os.open with mode 0600 (owner-only whatever the umask; the umask only removes bits)."""
    return os.open(path, flags, PRIVATE_FILE)


def atomic_write_json(path: str, data: Any) -> None:
    """Write JSON to `path` atomically (a temporary file, then os.replace); owner-only."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        text = json.dumps(data, indent=1, sort_keys=True)  # one write, not one per token
        with os.fdopen(private_open(tmp), "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a half-written file must not keep the space of a full disk
        raise


def read_json(path: str) -> Any:
    """The JSON content of `path`."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@contextlib.contextmanager
def job_lock(job_dir: str) -> Iterator[None]:
    """An exclusive fcntl lock on the job folder (several writers may update status.json)."""
    fd = private_open(os.path.join(job_dir, ".lock"), os.O_RDWR | os.O_CREAT)
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


def finish_status(
    job_dir: str,
    status: str,
    reason: str,
    message: str,
    changes: list[Callable[[dict[str, Any]], None]] | None = None,
) -> bool:
    """Set a terminal status unless one is already set; True if this call set it. `changes` are
    applied first, in the same write (whether or not the status was already terminal).

    The end's event is appended before the status is written (under the job's lock, once it is
    known that this call ends the job): a waiter wakes on the status write itself (waker.py)
    and must find the job's events complete when it reads the end."""
    done = [False]
    failed: list[OSError] = []

    def change(st: dict[str, Any]) -> None:
        for c in changes or ():
            c(st)
        if st.get("status") in TERMINAL:
            return
        try:
            append_event(job_dir, "Normal" if status == COMPLETE else "Warning", reason, message)
        except OSError as exc:  # the status is written all the same; the error is raised after
            failed.append(exc)
        st.update(status=status, reason=reason, message=message, finished=time.time())
        done[0] = True

    update_status(job_dir, change)
    if failed:
        raise failed[0]
    return done[0]


def write_control(job_dir: str, suspend: bool) -> None:
    """Ask the job's supervisor to suspend (True) or resume (False) the job."""
    atomic_write_json(os.path.join(job_dir, CONTROL_FILE), {"suspend": bool(suspend)})


def read_control(job_dir: str) -> bool:
    """Whether the job is asked to be suspended."""
    try:
        return bool(read_json(os.path.join(job_dir, CONTROL_FILE)).get("suspend"))
    except (OSError, ValueError, AttributeError):
        return False


def log_marker(job_dir: str, text: str) -> None:
    """Append one line to each rank's log (each process's when there are no rank logs: a job
    that does not run the runner), between two runs of a suspended job."""
    logs = os.path.join(job_dir, "logs")
    with contextlib.suppress(OSError):
        names = sorted(n for n in os.listdir(logs) if n.endswith(".log"))
        ranks = [n for n in names if n.startswith("rank-")]
        for name in ranks or names:
            with open(os.path.join(logs, name), "a", encoding="utf-8") as fh:
                fh.write(f"{text}\n")


def append_event(job_dir: str, type_: str, reason: str, message: str, obj: str = "") -> None:
    """Append one event line to events.jsonl (one write of one line: atomic with O_APPEND).

    A short write (a disk filling up) is undone and raised as ENOSPC: never a half line.
    """
    line = json.dumps(
        {"time": time.time(), "type": type_, "reason": reason, "message": message, "object": obj}
    )
    data = (line + "\n").encode("utf-8")
    fd = private_open(os.path.join(job_dir, "events.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        written = os.write(fd, data)
        if written < len(data):
            # A nearly full disk took part of the line: take it back (a half line would glue
            # itself to the next event), then report the disk as full.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, os.lseek(fd, 0, os.SEEK_CUR) - written)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "events.jsonl")
    finally:
        os.close(fd)


def is_disk_full(exc: BaseException) -> bool:
    """The error says the filesystem (or the quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding `path`."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return int(st.f_bavail * st.f_frsize)


def make_reserve(path: str, size: int = RESERVE_BYTES) -> bool:
    """Allocate `size` real bytes at `path` (released later to record the end on a full disk)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    except OSError:
        return False
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if is_disk_full(exc):
                raise
            os.write(fd, b"\0" * size)  # a filesystem without fallocate
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    finally:
        os.close(fd)


def set_child_subreaper() -> bool:
    """Become the reaper of orphaned descendants (Linux prctl); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


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


def child_pids(pid: int) -> list[int] | None:
    """The children of `pid`, read from `/proc/PID/task/*/children` (cost: the size of the tree,
    where psutil reads every process of the machine); [] if it is gone, None where the kernel has
    no such file."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                return None  # a kernel without CONFIG_PROC_CHILDREN
        except (OSError, ValueError):
            continue
    return out


def _tree(pids: list[int]) -> list[int] | None:
    """Every descendant of `pids` (from the children files; None where there are none)."""
    seen: set[int] = set()
    todo = list(pids)
    out = []
    while todo:
        kids = child_pids(todo.pop())
        if kids is None:
            return None
        for kid in kids:
            if kid not in seen:
                seen.add(kid)
                out.append(kid)
                todo.append(kid)
    return out


def descendants(pids: list[int]) -> list[tuple[int, float]]:
    """Every live descendant of `pids` (pid, creation time)."""
    ps = _psutil()
    out: dict[int, float] = {}
    if ps is None:
        return []
    tree = _tree(pids) if sys.platform.startswith("linux") else None
    if tree is not None:
        for pid in tree:
            with contextlib.suppress(Exception):
                out[pid] = ps.Process(pid).create_time()
        return sorted(out.items())
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


ERROR_PREFIX = "##kf-jupyter:error "
PROTOCOL_PREFIX = "##kf-jupyter:"


def last_lines(path: str, n: int = TAIL_LINES) -> list[str]:
    """The last `n` non-empty lines of a file (kf-jupyter's protocol lines left out)."""
    # logview.log_lines' rule, written out here: this file runs on the standard library alone.
    lines = []
    for raw in tail_text(path).split("\n"):  # newlines only: a `\r` bar is one line
        segments = [s for s in raw.split("\r") if s.strip()]  # what a terminal shows of it
        line = segments[-1] if segments else ""
        if line.strip() and PROTOCOL_PREFIX not in line:
            lines.append(line)
    return lines[-n:]


def error_records(job_dir: str) -> list[dict[str, Any]]:
    """The `##kf-jupyter:error` records the runner wrote in the job's logs, earliest first."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(os.path.join(job_dir, "logs")):
            if not entry.name.endswith(".log"):
                continue
            for line in tail_text(entry.path, 262144).splitlines():
                idx = line.find(ERROR_PREFIX)
                if idx < 0:
                    continue
                with contextlib.suppress(ValueError):
                    rec = json.loads(line[idx + len(ERROR_PREFIX) :])
                    if isinstance(rec, dict) and rec.get("exc_type"):
                        found.append(rec)
    return sorted(found, key=lambda r: (float(r.get("time") or 0), int(r.get("rank") or 0)))


def failure_of(job_dir: str, name: str | None = None) -> dict[str, Any] | None:
    """The root cause as `types.Failure` fields: the earliest exception any rank reported.

    With `name`, the process that failed: when its launcher (torchrun's "Root Cause", mpirun's
    first "Process name") names a rank that reported nothing and whose log ended before the
    earliest report, that rank failed first (a crash, `os._exit`) and the reports are what its
    end caused in the others ("Connection closed by peer"): None, so the caller names that rank.
    """
    records = error_records(job_dir)
    if not records:
        return None
    rec = records[0]
    if name is not None and _silent_rank_first(job_dir, name, records):
        return None
    return {
        "source": str(rec.get("source") or "Rank ?"),
        "exc_type": str(rec.get("exc_type")),
        "message": str(rec.get("message") or ""),
        "traceback": [str(x) for x in rec.get("traceback") or []],
    }


def _silent_rank_first(job_dir: str, name: str, records: list[dict[str, Any]]) -> bool:
    """Whether the rank `name`'s launcher saw fail first left no report and went quiet before
    the earliest report (see failure_of)."""
    logs = os.path.join(job_dir, "logs")
    rank, _ = failed_rank(job_dir, {name: tail_text(os.path.join(logs, f"{name}.log"))})
    if rank is None or any(str(r.get("rank")) == str(rank) for r in records):
        return False
    try:
        quiet_since = os.stat(os.path.join(logs, f"rank-{rank}.log")).st_mtime
        first = float(records[0].get("time") or 0)
    except (OSError, TypeError, ValueError):
        return False
    return 0 < quiet_since <= first


_TORCH_ROOT = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
# mpirun's report of the first failed rank: Open MPI 4 names it `[[JOBID,1],RANK]`, Open MPI 5
# (PRRTE: the deepspeed image's) `[prterun-HOST-PID@1,RANK]`, and wraps its signal line anywhere.
_MPI_ROOT = re.compile(
    r"Process name:\s*\[(?:\[\d+,\d+\]|[^\]\s]+@\d+),(\d+)\]\s*\n\s*Exit code:\s*(-?\d+)"
)
_MPI_SIGNAL = re.compile(
    r"process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+\S+\s+exited\s+on\s+signal\s+(\d+)"
)
_EXEC = re.compile(r"^exec\s+([\w.+/-]+)", re.MULTILINE)
_RELAY = re.compile(r"--mpi-relay\s+(\S+)")


def describe_exit(code: int) -> str:
    """`exit code 3`, or `killed by signal 9 (SIGKILL)` for a negative code."""
    if code >= 0:
        return f"exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"killed by signal {-code}"
    return f"killed by signal {-code} ({name})"


def program_of(argv: list[str]) -> str:
    """The program a launch command runs: what a `bash -c` script execs, else argv[0]."""
    if len(argv) >= 3 and os.path.basename(argv[0]) in ("bash", "sh") and argv[1] == "-c":
        m = _EXEC.search(argv[2])
        if m:
            # The MPI launcher execs the runner's relay, which locally execs mpirun in turn
            # (entrypoint._kfj_mpi_relay): the process that runs is mpirun.
            relay = _RELAY.search(argv[2], m.start())
            return os.path.basename((relay or m).group(1))
    return os.path.basename(argv[0]) if argv else "?"


def failed_rank(job_dir: str, process_logs: dict[str, str]) -> tuple[int | None, int | None]:
    """(global rank, exit code) of the first failure, from torchrun/mpirun output or tracebacks."""
    for text in process_logs.values():
        root = text.split("Root Cause", 1)[-1]
        m = _TORCH_ROOT.search(root) or _MPI_ROOT.search(text)
        if m:
            return int(m.group(1)), int(m.group(2))
        m = _MPI_SIGNAL.search(text)
        if m:
            return int(m.group(1)), -int(m.group(2))
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


def fallback_failure(
    job_dir: str, name: str, code: int, program: str | None = None
) -> dict[str, Any]:
    """The cause when no rank reported an exception (a signal, os._exit, a crash): who and how.

    A process that runs Python itself (no torchrun/mpirun in between) is one rank: node-N is
    Rank N (JAX, XGBoost and plain jobs run one process per node).
    """
    logs = os.path.join(job_dir, "logs")
    texts = {name: tail_text(os.path.join(logs, f"{name}.log"))}
    rank, rank_code = failed_rank(job_dir, texts)
    node = re.fullmatch(r"node-(\d+)", name)
    if rank is None and node and (program or "").startswith("python"):
        rank, rank_code = int(node.group(1)), code
    if rank is not None:
        how = describe_exit(rank_code if rank_code is not None else code)
        lines = last_lines(os.path.join(logs, f"rank-{rank}.log"))
        return {"source": f"Rank {rank}", "exc_type": how, "message": "", "traceback": lines}
    return {
        "source": name,
        "exc_type": describe_exit(code),
        "message": "",
        "traceback": last_lines(os.path.join(logs, f"{name}.log")),
    }


def failure_message(job_dir: str, name: str, code: int, program: str | None = None) -> str:
    """One message naming the failed rank (or process), its exit code and its last log lines."""
    logs = os.path.join(job_dir, "logs")
    proc_log = os.path.join(logs, f"{name}.log")
    texts = {name: tail_text(proc_log)}
    with contextlib.suppress(OSError):
        for entry in os.scandir(logs):
            if not entry.name.startswith("rank-") and entry.name.endswith(".log"):
                texts.setdefault(entry.name[:-4], tail_text(entry.path))
    rank, rank_code = failed_rank(job_dir, texts)
    code_text = describe_exit(code)
    proc = f"{name} ({program})" if program else name
    node = re.fullmatch(r"node-(\d+)", name)
    if rank is None and node and (program or "").startswith("python"):
        # The process is the rank itself (one process per node): name the rank only.
        head = (
            f"Rank {node.group(1)} was {code_text}."
            if code < 0
            else (f"Rank {node.group(1)} failed ({code_text}).")
        )
        body = "\n".join(last_lines(proc_log)) or "(no output)"
        cause = failure_of(job_dir, name)
        if cause is None:
            return (
                f"{head} The other processes were stopped. Last lines of {name}.log:\n{body}\n"
                "See every line with client.get_job_logs(name)."
            )
    cause = failure_of(job_dir, name)
    if cause is not None:
        what = cause["exc_type"] + (f": {cause['message']}" if cause["message"] else "")
        return (
            f"{cause['source']} failed: {what}\n"
            + "\n".join(cause["traceback"])
            + f"\n(process {proc} then ended with {code_text}; the other processes were "
            "stopped. See every line with client.get_job_logs(name).)"
        )
    if rank is not None:
        rcode = describe_exit(rank_code) if rank_code is not None else code_text
        if rank_code is not None and rank_code < 0:
            head = f"Rank {rank} was {rcode}; process {proc} then ended with {code_text}."
        else:
            head = f"Rank {rank} failed ({rcode}; process {proc} ended with {code_text})."
        lines = last_lines(os.path.join(logs, f"rank-{rank}.log")) or last_lines(proc_log)
        where = f"rank-{rank}.log"
    elif code < 0:
        head = f"Process {proc} was {code_text}."
        lines = last_lines(proc_log)
        where = f"{name}.log"
    else:
        head = f"Process {proc} failed with {code_text}."
        lines = last_lines(proc_log)
        where = f"{name}.log"
    body = "\n".join(lines) if lines else "(no output)"
    return (
        f"{head} The other processes were stopped. Last lines of {where}:\n{body}\n"
        "See every line with client.get_job_logs(name)."
    )


# ----------------------------------------------------------------------------- the supervisor


_SIBLINGS: dict[str, Any] = {}


# The name ports.py leases a job's port under while its supervisor runs (the same string there).
PORT_HOLD = "\0kf-jupyter/rendezvous-port/{port}/job"


def hold_port(port: Any, tries: int = 50) -> Any:
    """The supervisor's machine-wide hold on its job's rendezvous port (ports.py), kept until it
    exits, so the port stays the job's when the kernel that chose it is gone; None without one.
    A kernel probing the name at that instant is retried for a few milliseconds."""
    if not isinstance(port, int) or port <= 0:
        return None
    import socket

    for _ in range(tries):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(PORT_HOLD.format(port=port))
            return s
        except OSError:
            s.close()
            time.sleep(0.001)
    return None


def preload_siblings(modules: dict[str, Any]) -> None:
    """Modules `_load_sibling` returns without loading them again (the supervisor host loads
    them once, before it forks supervisors: supervisor_host.py)."""
    _SIBLINGS.update(modules)


def _load_sibling(name: str) -> Any:
    """A module of this folder, by path (the supervisor runs as `python -I supervisor.py`)."""
    import importlib.util

    if name in _SIBLINGS:
        return _SIBLINGS[name]
    if __package__:
        import importlib

        return importlib.import_module(f"{__package__}.{name}")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"kfj_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: Where a warm node going through bash and the `#!/bin/sh` shim carries the variables whose
#: names are not shell identifiers (`A-B`, `1X`): bash passes them on, but dash (`/bin/sh` on
#: Debian and Ubuntu) drops them; the shim puts them back (issue 38).
CARRY_VAR = "KF_JUPYTER_WARM_UNNAMED"
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _carry_past_sh(env: dict[str, str]) -> None:
    """Add CARRY_VAR to a warm node's environment: its variables that `sh` would drop, as JSON
    (none: nothing added; more than fits one variable: left out, as before)."""
    odd = {k: v for k, v in env.items() if not _SHELL_NAME.fullmatch(k)}
    if odd:
        text = json.dumps(odd)
        if len(text) < 120 * 1024:  # one variable's limit (MAX_ARG_STRLEN) is 128 KiB
            env[CARRY_VAR] = text


class Supervisor:
    """Starts the processes of spawn.json, watches them, and records what happens."""

    def __init__(self, job_dir: str) -> None:
        self.job_dir = job_dir
        spawn = os.path.join(job_dir, "spawn.json")
        self.spec = read_json(spawn)
        # Read once: the command may hold pip index credentials, which no file should keep.
        os.unlink(spawn)
        # Popen, or direct.DirectNode for a node handed over to the warm pool directly.
        self.procs: dict[str, Any] = {}
        self.exits: dict[str, int] = {}
        self.cancel_signal: int | None = None
        self.snapshot: list[tuple[int, float]] = []
        self.reserve = os.path.join(job_dir, ".reserve")
        # Set when one of our own writes met a full disk; what could not be written waits here.
        self.disk_error: str | None = None
        self.pending_changes: list[Callable[[dict[str, Any]], None]] = []
        # Exit codes not yet in status.json: only while every process has exited with 0, when
        # the next write is the job's end (`_finish` writes them with it, one write less on the
        # path from the last exit to `wait_for_job_status` returning; issue 21).
        self.exit_changes: list[Callable[[dict[str, Any]], None]] = []
        self.pending_events: list[tuple[str, str, str, str]] = []
        # The supervisor's own fields (pid, identity, control_ready) while they wait for the
        # first status write, when that is the start of the job's processes (`_run`).
        self.own_fields: dict[str, Any] | None = None
        self.broken = False  # the job folder is gone or unwritable: record nothing more
        self.status_endpoint: Any = None
        self.suspended = False
        self.control_wake = False
        self.run_number = 1
        self.status_env: dict[str, str] = {}
        self.gpus: Any = _load_sibling("gpus") if self.spec.get("gpus") else None
        self.gpu_plan: dict[str, list[dict[str, Any]]] = {}
        self.port_hold: Any = None

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.cancel_signal = signum

    def _on_control(self, signum: int, frame: Any) -> None:
        self.control_wake = True

    # ------------------------------------------------------------ writes that survive ENOSPC

    def _update(self, change: Callable[[dict[str, Any]], None]) -> None:
        if self.own_fields is not None:
            change = self._with_own_fields(change)
        if self.disk_error is None and not self.broken:
            try:
                update_status(self.job_dir, change)
                return
            except OSError as exc:
                if not is_disk_full(exc):
                    raise
                self.disk_error = str(exc)
        self.pending_changes.append(change)

    def _with_own_fields(self, change: Callable[[dict[str, Any]], None]) -> Any:
        """`change` with the supervisor's own fields written in the same write; from then on
        control.json is read again (`control_wake`): a suspend asked before `control_ready`
        was visible was not signalled, and is seen now."""
        own, self.own_fields = self.own_fields or {}, None
        self.control_wake = True

        def with_own(st: dict[str, Any]) -> None:
            st.update(own)
            change(st)

        return with_own

    def _event(self, type_: str, reason: str, message: str, obj: str = "") -> None:
        if self.disk_error is None and not self.broken:
            try:
                append_event(self.job_dir, type_, reason, message, obj)
                return
            except OSError as exc:
                if not is_disk_full(exc):
                    raise
                self.disk_error = str(exc)
        self.pending_events.append((type_, reason, message, obj))

    def _finish(self, status: str, reason: str, message: str) -> None:
        """Record the end (after the processes were stopped: nothing else is writing now)."""
        # The devices are free before the job reads as ended: whoever sees it ended may take them.
        self._release_gpus()
        # The disk space set aside is given back before the end is written: the final record
        # gets it on a full disk, and a job that reads as ended holds no file of the
        # supervisor's own (a store walked right after wait() returns finds none vanishing).
        with contextlib.suppress(OSError):
            os.unlink(self.reserve)
        pending = self.pending_changes + self.exit_changes
        if self.own_fields is not None:
            pending.insert(0, self._with_own_fields(lambda st: None))
        self.pending_changes, self.exit_changes = [], []
        events, self.pending_events = self.pending_events, []
        for e in events:
            append_event(self.job_dir, *e)
        finish_status(self.job_dir, status, reason, message, pending)

    def _record_failure(self, name: str, code: int) -> str:
        """Put the root cause (`failure` in status.json) beside the message; the message."""
        taken = self._port_taken()
        if taken is not None:
            failure, message = taken
        else:
            failure = failure_of(self.job_dir, name) or fallback_failure(
                self.job_dir, name, code, self._program(name)
            )
            message = failure_message(self.job_dir, name, code, self._program(name))
        self._update(lambda st: st.update(failure=failure))
        return message

    def _port_taken(self) -> tuple[dict[str, Any], str] | None:
        """(failure, message) when a process failed because another program took the job's
        rendezvous port before it listened (issue 40): that is the cause, not the rank."""
        port = self.spec.get("port")
        if not isinstance(port, int):
            return None
        texts = {}
        with contextlib.suppress(OSError):
            for entry in os.scandir(os.path.join(self.job_dir, "logs")):
                if entry.name.endswith(".log"):
                    texts[entry.name[:-4]] = tail_text(entry.path)
        message = _load_sibling("ports").taken_port_message(port, texts)
        if message is None:
            return None
        failure = {
            "source": "The job's rendezvous",
            "exc_type": f"port {port} was taken by another program",
            "message": "Nothing in your code failed: run the job again, it gets another port.",
            "traceback": [message],
        }
        return failure, message

    def _logs_full(self) -> bool:
        free = free_bytes(os.path.join(self.job_dir, "logs"))
        return free is not None and free < LOW_SPACE_BYTES

    # ------------------------------------------------------------ processes

    def _program(self, name: str) -> str:
        for item in self.spec["processes"]:
            if item["name"] == name:
                return program_of(list(item["argv"]))
        return "?"

    def _reap(self) -> None:
        for name, p in self.procs.items():
            rc = p.poll()
            if rc is not None and name not in self.exits:
                self.exits[name] = rc
                self._event("Normal", "Exited", f"process {name} exited with code {rc}", name)

                def change(st: dict[str, Any], name: str = name, rc: int = rc) -> None:
                    st.setdefault("processes", {}).setdefault(name, {})["exit_code"] = rc

                self.exit_changes.append(change)
        done = len(self.exits) == len(self.procs) and not any(self.exits.values())
        if self.exit_changes and not done:
            self._flush_exits()
        # Orphans re-parented to us (we are a subreaper): collect them once they exit. Peek
        # (WNOWAIT) so the exit of one of our own processes stays for Popen.poll().
        ours = {p.pid for p in self.procs.values() if p.returncode is None}
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid in ours:
                return
            with contextlib.suppress(ChildProcessError):
                os.waitpid(info.si_pid, os.WNOHANG)

    def _flush_exits(self) -> None:
        """Write the exit codes `_reap` kept for the job's end (see `exit_changes`)."""
        changes, self.exit_changes = self.exit_changes, []

        def change(st: dict[str, Any]) -> None:
            for c in changes:
                c(st)

        if changes:
            self._update(change)

    def _start(self) -> None:
        logs = os.path.join(self.job_dir, "logs")
        cwd = self.spec["cwd"]
        for item in self.spec["processes"]:
            for path, text in (item.get("files") or {}).items():
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text)
            env = dict(os.environ)
            env.update(self.status_env)
            env.update(item["env"])
            if self.gpus is not None:
                # Each node sees only its own devices, by UUID, as a pod does (the device
                # plugin sets NVIDIA_VISIBLE_DEVICES; CUDA, JAX and XGBoost read CUDA_...).
                uuids = ",".join(d["uuid"] for d in self.gpu_plan.get(item["name"], []))
                env["CUDA_VISIBLE_DEVICES"] = uuids
                env["NVIDIA_VISIBLE_DEVICES"] = uuids or "void"
            os.makedirs(env.get("KF_JUPYTER_WORKDIR", logs), exist_ok=True)
            via_shim = self._hand_over(item, env, cwd)
            if via_shim is None:
                continue
            if via_shim:
                _carry_past_sh(env)
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
                    umask=JOB_UMASK,
                )
            self.procs[item["name"]] = p
            self._record_started(item, p.pid, "")
            if via_shim:
                self._event(
                    "Normal",
                    "WarmViaShim",
                    f"{item['name']}: the launch goes through bash and the warm shim, not handed "
                    f"over directly: {via_shim}",
                    item["name"],
                )

    def _hand_over(self, item: dict[str, Any], env: dict[str, str], cwd: str) -> str | None:
        """Hand a warm node's recognised launch to the pool directly (direct.py): None when
        the pool started it; else why not (the launch then goes through bash and the shim, as
        before, and an event after its Started one says why), '' for a cold node."""
        if not env.get("KF_JUPYTER_WARM_SOCKET"):
            return ""  # a cold node: nothing to hand over
        name = item["name"]
        direct = item.get("direct")
        why = str(item.get("direct_why") or "the launch was not recognised")
        first: dict[str, Any] = {}
        node: Any = None
        if direct:
            mod = _load_sibling("direct")
            umask = JOB_UMASK if JOB_UMASK >= 0 else os.umask(0o077)
            if JOB_UMASK < 0:
                os.umask(umask)
            log_path = os.path.join(self.job_dir, "logs", f"{name}.log")
            node, first, why = mod.hand_over(direct, env, cwd, log_path, umask)
        if node is None:
            return why or "the launch was not handed over"
        self.procs[name] = node
        self._record_started(item, node.pid, " (handed over directly to the warm pool)")
        _load_sibling("direct").record_warm(env, first)  # after Started, as the shim's comes
        return None

    def _record_started(self, item: dict[str, Any], pid: int, how: str) -> None:
        """A started node in the status (pid, identity, `direct` when handed over) and its
        `Started` event; `how` ends the event's message."""
        name = item["name"]
        entry: dict[str, Any] = {
            "pid": pid,
            "pgid": pid,
            "create_time": process_identity(pid),
            "node_index": item.get("node_index", 0),
            "exit_code": None,
        }
        if how:
            entry["direct"] = True

        def change(st: dict[str, Any]) -> None:
            st.setdefault("processes", {})[name] = entry

        self._update(change)
        self._event("Normal", "Started", f"process {name} pid {pid}{how}", name)

    def _direct_fds(self) -> list[int]:
        """The pool connections of nodes handed over directly (readable when one exits)."""
        out = []
        for p in self.procs.values():
            fd = getattr(p, "fileno", None)
            if fd is not None and p.returncode is None and fd() >= 0:
                out.append(fd())
        return out

    def _suspend(self) -> None:
        """Stop the processes and keep everything else (see the module docstring)."""
        self._stop_all()
        self._let_go()
        self._flush_exits()  # the run that ends here keeps its exit codes
        self._release_gpus()
        self.procs, self.exits, self.snapshot = {}, {}, []
        self.suspended = True
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        log_marker(
            self.job_dir,
            f"[kf-jupyter] ---- job suspended at {when}: its processes were stopped; "
            "resuming starts them again ----",
        )
        message = "The job is suspended: its processes were stopped; resume it to start them again."
        # The event first: a waiter wakes on the status write and reads the events after it.
        self._event("Normal", REASON_SUSPENDED, message)
        self._update(
            lambda st: st.update(status=SUSPENDED, reason=REASON_SUSPENDED, message=message)
        )

    def _resume(self) -> None:
        if not self._wait_for_gpus():
            if self.cancel_signal is None and not self.broken:
                message = "The job is suspended: it was suspended again while it waited for GPUs."
                self._update(
                    lambda st: st.update(status=SUSPENDED, reason=REASON_SUSPENDED, message=message)
                )
            return
        self.run_number += 1
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        log_marker(
            self.job_dir,
            f"[kf-jupyter] ---- job resumed at {when} (run {self.run_number}) ----",
        )
        self.suspended = False
        self._start()
        message = f"The job was resumed (run {self.run_number}): its processes started again."
        self._event("Normal", REASON_RESUMED, message)  # before the status (see _suspend)
        self._update(
            lambda st: st.update(
                status=RUNNING, reason=REASON_RESUMED, message=message, runs=self.run_number
            )
        )

    # ------------------------------------------------------------ GPUs

    def _release_gpus(self) -> None:
        if self.gpus is not None:
            with contextlib.suppress(Exception):
                self.gpus.release(self.spec["gpus"]["state_dir"], self.spec["job"], os.getpid())
            self.gpu_plan = {}

    def _wait_for_gpus(self) -> bool:
        """Take this job's devices from the store-wide allocator, waiting while too few are
        free (status Created, reason WaitingForGPUs). False if the job was cancelled, asked to
        suspend or removed meanwhile (nothing was taken then)."""
        if self.gpus is None:
            return True
        g = self.spec["gpus"]
        requests = {str(k): int(v) for k, v in g["requests"].items()}
        need = sum(requests.values())
        owner = (os.getpid(), process_identity(os.getpid()))
        said = None
        while True:
            plan, free, holders = self.gpus.allocate(
                g["state_dir"], self.spec["job"], requests, g["inventory"], owner, same_process
            )
            if plan is not None:
                break
            message = self.gpus.waiting_message(need, free, holders)
            if message != said:
                said = message

                def waiting(st: dict[str, Any], message: str = message) -> None:
                    if st.get("status") not in TERMINAL:
                        st.update(status=CREATED, reason=REASON_WAITING_GPUS, message=message)

                self._update(waiting)
                self._event("Normal", REASON_WAITING_GPUS, message)
            end = time.monotonic() + GPU_RETRY_SECONDS
            while time.monotonic() < end:
                if self.cancel_signal is not None or read_control(self.job_dir):
                    return False
                if not os.path.exists(os.path.join(self.job_dir, "status.json")):
                    self.broken = True
                    return False
                time.sleep(POLL_SECONDS * 2)
        self.gpu_plan = plan
        text = self.gpus.plan_text(plan)
        detail = "; ".join(
            f"{node}: {', '.join(d['uuid'] for d in devs)}" for node, devs in plan.items()
        )

        def assigned(st: dict[str, Any]) -> None:
            st["gpus"] = plan
            if st.get("reason") == REASON_WAITING_GPUS:
                st.update(reason="", message="")

        self._update(assigned)
        self._event("Normal", "GPUsAssigned", f"{text} ({detail})")
        return True

    def _prepare(self) -> bool:
        """Build the job's package environment first (spawn.json `prepare`), pip's output in
        install.log; False when the job ended meanwhile (failed, cancelled, or its folder
        removed: then it is recorded, except for a removed folder)."""
        prep = self.spec.get("prepare")
        if not prep:
            return True
        self._event("Normal", REASON_INSTALLING, str(prep.get("message") or "installing packages"))
        error_file = os.path.join(self.job_dir, "install-error.txt")
        argv = [str(a) for a in prep["argv"]]
        argv[5] = error_file
        env = dict(os.environ)
        env.update(prep.get("env") or {})
        began = time.monotonic()
        with open(private_open(os.path.join(self.job_dir, INSTALL_LOG)), "ab") as log:
            p = subprocess.Popen(
                argv,
                env=env,
                cwd=self.job_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        while p.poll() is None:
            gone = not os.path.exists(os.path.join(self.job_dir, "status.json"))
            if self.cancel_signal is not None or gone:
                stop_tree([p.pid], [(p.pid, None)])
                with contextlib.suppress(Exception):
                    p.wait(timeout=5)
                if gone:
                    self.broken = True
                    return False
                self._finish(
                    FAILED, REASON_CANCELLED, "The job was cancelled while its packages installed."
                )
                return False
            time.sleep(POLL_SECONDS * 2)
        if p.returncode != 0:
            try:
                with open(error_file, encoding="utf-8") as fh:
                    message = fh.read().strip()
            except OSError:
                message = ""
            if not message:
                tail = "\n".join(last_lines(os.path.join(self.job_dir, INSTALL_LOG), 20))
                message = (
                    f"Building the job's package environment failed (exit code {p.returncode})."
                    f" The end of its log ({INSTALL_LOG} in the job's folder):\n{tail}"
                )
            self._event("Warning", REASON_INSTALL_FAILED, message.splitlines()[0])
            self._finish(FAILED, REASON_INSTALL_FAILED, message)
            return False
        took = time.monotonic() - began
        self._event("Normal", REASON_INSTALLED, f"package environment ready in {took:.1f} s")
        return True

    def _start_status_endpoint(self) -> None:
        """The job's trainer status endpoint (status_endpoint.py); the job runs without one if
        it cannot start."""
        try:
            mod = _load_sibling("status_endpoint")
            self.status_endpoint = mod.StatusEndpoint(
                self.job_dir, str(self.spec.get("job", "")), start=False
            )
            self.status_env = self.status_endpoint.env()
        except Exception as exc:
            self._event("Warning", "StatusEndpoint", f"no trainer status endpoint: {exc}")

    def _endpoint_unstarted(self) -> list[Any]:
        """The status endpoint's listening socket while its thread has not started."""
        ep = self.status_endpoint
        return [ep.sock] if ep is not None and not ep.started else []

    def _serve_when_asked(self, ready: list[Any]) -> None:
        """Start the status endpoint's thread once a client connects (its socket is readable).

        Its event loop and TLS set-up cost 3-4 ms of CPU (and take the GIL in turns with this
        thread): started with the job, that ran beside the ranks starting on the same cores,
        on the path of every job, most of which never call it (issue 21). The socket listens
        from the start, so a client that comes first waits in its backlog until the thread
        accepts it, as before.
        """
        ep = self.status_endpoint
        if ep is not None and not ep.started and ep.sock in ready:
            ep.start()

    def _stop_all(self) -> None:
        # A node handed over directly whose exit the pool reported is the pool's: it stopped
        # what that node left before it reported (and may report it as the node tears itself
        # down, a few ms, which a wait here would only add to the job's end: issue 21).
        ours = {n: p for n, p in self.procs.items() if not getattr(p, "stopped_by_pool", False)}
        groups = [p.pid for p in ours.values()]
        known: list[tuple[int, float | None]] = [
            (p.pid, None) for n, p in ours.items() if n not in self.exits
        ]
        if ours:
            known += [(pid, ct) for pid, ct in self.snapshot]
        # Everything below us, including orphans re-parented to us (torchrun/mpirun killed).
        known += [(pid, ct) for pid, ct in descendants([os.getpid()])]
        stop_tree(groups, known, reap=self._reap)
        for p in self.procs.values():
            with contextlib.suppress(Exception):
                p.wait(timeout=1)
        self._reap()
        for p in self.procs.values():
            if hasattr(p, "close") and p.returncode is None:
                p.close()  # a node handed over directly that still runs: the pool stops it

    def _let_go(self) -> None:
        """Close the pool's lines of the nodes handed over directly that ended: the pool forks
        its next spares once they are closed, so not while this job's end is being written."""
        for p in self.procs.values():
            if hasattr(p, "close"):
                with contextlib.suppress(Exception):
                    p.close()

    def _warm_nodes(self) -> list[tuple[int, float]]:
        """The node processes the warm pool forked for this job (children of the pool, not ours)."""
        out = []
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.job_dir):
                if entry.name.startswith("warm-node-") and entry.name.endswith(".json"):
                    with contextlib.suppress(OSError, ValueError, TypeError):
                        pid = int(read_json(entry.path).get("pid") or 0)
                        ct = process_identity(pid) if pid else None
                        if ct is not None:
                            out.append((pid, ct))
        return out

    def _take_snapshot(self) -> None:
        """Record the job's processes in status.json (`descendants`): what the kernel stops
        and the GPU allocator waits for when this supervisor is killed. Its own descendants
        are included: a daemon a rank double-forked is re-parented to it (a subreaper), under
        none of the nodes (issue 38)."""
        warm = self._warm_nodes()
        roots = [os.getpid()] + [p.pid for p in self.procs.values()] + [w for w, _ in warm]
        snap = sorted({*descendants(roots), *warm})
        if snap != self.snapshot:
            self.snapshot = snap

            def change(st: dict[str, Any]) -> None:
                st["descendants"] = [[pid, ct] for pid, ct in snap]

            self._update(change)

    def _disk_full_message(self, failed: tuple[str, int] | None) -> str:
        logs = os.path.join(self.job_dir, "logs")
        free = free_bytes(logs)
        why = self.disk_error or f"[Errno {errno.ENOSPC}] No space left on device"
        head = (
            f"No space left on device: the filesystem holding the job's folder ({self.job_dir}, "
            f"{free if free is not None else '?'} bytes free) filled up while the job wrote its "
            f"logs ({why}), so the job was stopped. Every line written before is kept in "
            f"{logs}. Free some space, or put the jobs on a larger disk with "
            "LocalBackendConfig(state_dir=...), and run the job again."
        )
        if failed is None:
            return head
        name, code = failed
        return head + " " + failure_message(self.job_dir, name, code, self._program(name))

    def run(self) -> int:
        """Start, watch and finish the job; the exit code is 0 when it completed."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        set_child_subreaper()
        # Wake up at once when a child exits (or a signal arrives), not at the next poll.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        signal.signal(signal.SIGUSR1, self._on_control)
        self.port_hold = hold_port(self.spec.get("port"))
        make_reserve(self.reserve)
        try:
            return self._run(wake_r)
        finally:
            if self.port_hold is not None:
                self.port_hold.close()  # the job is over: its port is the machine's again
            self._let_go()  # after the end is written (or the job could not be followed)
            self._release_gpus()  # whatever way the job ended (a crash is reclaimed later)
            with contextlib.suppress(OSError):
                os.unlink(self.reserve)

    def _run(self, wake_r: int) -> int:
        own = {
            "supervisor_pid": os.getpid(),
            "supervisor_create_time": process_identity(os.getpid()),
            "control_ready": True,
        }
        if self.spec.get("prepare") or self.gpus is not None:
            self._update(lambda st: st.update(own))  # it may wait long before it starts anything
        else:
            # Written with the first record of the processes' start (`_update`): one status
            # write fewer before the launch (issue 21). Until then a reader sees what the
            # kernel wrote (Created, the supervisor's pid); a suspend asked meanwhile is read
            # from control.json right before the start and again after that write.
            self.own_fields = own
        if not self._prepare():
            return 1
        self._start_status_endpoint()
        if read_control(self.job_dir):  # suspended before it started
            self._suspend()
        try:
            if not self.suspended:
                if self._wait_for_gpus():
                    self._start()
                elif self.broken:
                    return 1
                elif self.cancel_signal is None:
                    self._suspend()  # asked to suspend while it waited
        except Exception as exc:
            self._stop_all()
            if is_disk_full(exc) or self.disk_error is not None:
                self.disk_error = self.disk_error or str(exc)
                self._finish(FAILED, REASON_LOG_WRITE, self._disk_full_message(None))
            else:
                self._finish(FAILED, REASON_FAILED, f"The job's processes could not start: {exc}")
            return 1
        started = time.time()
        if self.cancel_signal is None and not self.suspended:

            def running(st: dict[str, Any]) -> None:
                if st.get("status") not in TERMINAL:
                    st.update(status=RUNNING, started=started)

            self._event("Normal", "Running", "all processes started")  # before (see _suspend)
            self._update(running)
        deadline = self.spec.get("deadline_seconds")
        last_snap = 0.0
        if self.procs and all(hasattr(p, "close") for p in self.procs.values()):
            # Every node was handed to the pool, which stops a node whose supervisor is gone:
            # the first snapshot can wait its period instead of walking the process tree and
            # writing status.json while the ranks start (issue 21).
            last_snap = time.monotonic()
        last_control = time.monotonic()
        while True:
            self._reap()
            if self.cancel_signal is None and (
                self.control_wake or time.monotonic() - last_control >= SNAPSHOT_SECONDS
            ):
                self.control_wake = False
                last_control = time.monotonic()
                want = read_control(self.job_dir)
                if want and not self.suspended:
                    self._suspend()
                elif not want and self.suspended:
                    self._resume()
                    started = time.time()  # activeDeadlineSeconds restarts on resume
            if self.cancel_signal is not None:
                self._stop_all()
                self._finish(
                    FAILED,
                    REASON_CANCELLED,
                    "The job was cancelled; its processes were stopped.",
                )
                return 1
            if self.suspended:
                if not os.path.exists(os.path.join(self.job_dir, "status.json")):
                    self.broken = True
                    return 1
                waits = [wake_r, *self._endpoint_unstarted()]
                ready, _, _ = select.select(waits, [], [], SNAPSHOT_SECONDS)
                self._serve_when_asked(ready)
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                continue
            bad = [(n, rc) for n, rc in self.exits.items() if rc != 0]
            if self.disk_error is not None or (bad and self._logs_full()):
                self._stop_all()
                self._finish(
                    FAILED, REASON_LOG_WRITE, self._disk_full_message(next(iter(bad), None))
                )
                return 1
            if bad:
                name, code = bad[0]
                self._stop_all()
                self._finish(FAILED, REASON_FAILED, self._record_failure(name, code))
                return 1
            if len(self.exits) == len(self.procs):
                self._stop_all()  # whatever the job left behind in its process groups
                self._finish(COMPLETE, REASON_COMPLETE, "All processes exited with code 0.")
                return 0
            if deadline is not None and time.time() - started > float(deadline):
                self._stop_all()
                self._finish(
                    FAILED,
                    REASON_DEADLINE,
                    f"The job ran longer than activeDeadlineSeconds={deadline}; its processes "
                    "were stopped.",
                )
                return 1
            now = time.monotonic()
            if now - last_snap >= SNAPSHOT_SECONDS:
                last_snap = now
                if not os.path.exists(os.path.join(self.job_dir, "status.json")):
                    # The job folder was removed under us: nobody can follow the job any more.
                    self.broken = True
                    self._stop_all()
                    return 1
                self._take_snapshot()
            waits = [wake_r, *self._direct_fds(), *self._endpoint_unstarted()]
            ready, _, _ = select.select(waits, [], [], POLL_SECONDS)
            self._serve_when_asked(ready)
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)


def main(argv: list[str]) -> int:
    """Entry point: `supervisor.py JOB_DIR`."""
    if len(argv) != 2:
        sys.stderr.write("usage: supervisor.py JOB_DIR\n")
        return 2
    job_dir = argv[1]
    # What the supervisor writes (logs, hostfile, work dirs, status) is owner-only; the job's
    # own processes get back the umask the user started it with (see Supervisor._start).
    global JOB_UMASK
    JOB_UMASK = os.umask(0o077)
    sup: Supervisor | None = None
    try:
        sup = Supervisor(job_dir)
        return sup.run()
    except Exception as exc:  # stop what we started and record why, so nothing is left behind
        if sup is not None:
            sup.broken = True  # stop without writing: the write may be what failed
            with contextlib.suppress(Exception):
                sup._stop_all()
        with contextlib.suppress(Exception):
            finish_status(job_dir, FAILED, REASON_LOST, f"The job's supervisor failed: {exc!r}")
        raise


if __name__ == "__main__":
    sys.exit(main(sys.argv))
