"""The sleep of `wait_for_job_status` between two status reads, cut short when the job's record
changes or its supervisor exits (Linux; a plain sleep elsewhere).

Two wake-ups, each optional:
- the record: an inotify watch on the job folder for a file renamed into it. Every write of
  `status.json` is atomic (a temporary file, then a rename), so the waiter reads the end the
  moment it is written, not after the supervisor's clean-up and exit (about 4 ms on a warm
  re-run of a small job, issue 21). Other renames (the trainer status, a node's record) are
  read and passed over.
- the supervisor's exit: a pidfd (Linux 5.3+). A supervisor that was killed writes nothing; its
  exit wakes the waiter, whose next read says the job was lost.

Without either, or once the supervisor has exited, it sleeps its interval.

Closing an inotify instance waits for an RCU grace period in the kernel (7-16 ms measured
here, on the thread that closes it), so instances are not closed: a waker's instance goes back
to a small free list once its watch is removed (fast), and the next wait takes it from there.
"""

from __future__ import annotations

import contextlib
import os
import select
import struct
import threading
import time
from pathlib import Path
from typing import Any

from . import supervisor as sv

IN_MOVED_TO = 0x00000080
IN_Q_OVERFLOW = 0x00004000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
_LIBC: Any = None
#: inotify instances with no watch, kept for the next waits (closing one is slow: module doc).
_FREE: list[int] = []
_FREE_MAX = 8
_FREE_LOCK = threading.Lock()


def _libc() -> Any:
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def watch_renames(folder: str) -> tuple[int, int] | None:
    """(descriptor, watch) of a non-blocking inotify instance readable when a file is renamed
    into `folder`, or None (no inotify, the instance limit reached, the folder gone). Give it
    back with `unwatch`."""
    with _FREE_LOCK:
        fd = _FREE.pop() if _FREE else -1
    try:
        libc = _libc()
        if fd < 0:
            fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            return None
        wd = int(libc.inotify_add_watch(fd, os.fsencode(folder), IN_MOVED_TO))
    except (OSError, AttributeError):
        return None
    if wd < 0:
        _keep(fd)
        return None
    return fd, wd


def unwatch(fd: int, wd: int) -> None:
    """Remove the watch and keep the instance for the next waker (see the module doc)."""
    with contextlib.suppress(Exception):
        _libc().inotify_rm_watch(fd, wd)
    _keep(fd)


def _keep(fd: int) -> None:
    renamed(fd)  # what is queued (the removal's IN_IGNORED, renames) is not the next one's
    with _FREE_LOCK:
        if len(_FREE) < _FREE_MAX:
            _FREE.append(fd)
            return
    with contextlib.suppress(OSError):
        os.close(fd)


def renamed(fd: int, wd: int | None = None) -> set[str] | None:
    """Drain the instance: the names renamed into the folder of watch `wd` (any, if None) since
    the last call (None: the queue overflowed, so anything may have changed)."""
    names: set[str] = set()
    while True:
        try:
            data = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return names
        except OSError:
            return None
        if not data:
            return names
        at = 0
        while at + _EVENT.size <= len(data):
            got, mask, _cookie, size = _EVENT.unpack_from(data, at)
            if mask & IN_Q_OVERFLOW:
                return None
            raw = data[at + _EVENT.size : at + _EVENT.size + size]
            if wd is None or got == wd:
                names.add(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
            at += _EVENT.size + size


class JobWaker:
    """A sleep between two status reads that ends when the job's `status.json` is replaced or
    its supervisor exits (see the module doc)."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self.watch: tuple[int, int] | None = watch_renames(str(job_dir))
        self.fd: int | None = None  # the supervisor's pidfd
        self.tried = False

    def _open(self) -> None:
        self.tried = True
        opener = getattr(os, "pidfd_open", None)
        if opener is None:
            return
        try:
            st = sv.read_json(str(self.job_dir / "status.json"))
            pid = int(st.get("supervisor_pid") or 0)
            if not pid:
                self.tried = False  # not recorded yet: try again at the next sleep
                return
            fd = opener(pid)
        except (OSError, ValueError, TypeError):
            return
        # Opened after the pid was read: the same process only if its start time matches.
        if sv.same_process(pid, st.get("supervisor_create_time")):
            self.fd = fd
        else:
            os.close(fd)

    def sleep(self, seconds: float) -> None:
        """Sleep `seconds`, or less if the job's status is rewritten or its supervisor exits."""
        if not self.tried:
            self._open()
        fds = [self.watch[0]] if self.watch is not None else []
        if self.fd is not None:
            fds.append(self.fd)
        if not fds:
            time.sleep(seconds)
            return
        end = time.monotonic() + seconds
        while True:
            try:
                ready, _, _ = select.select(fds, [], [], max(0.0, end - time.monotonic()))
            except (OSError, ValueError):
                ready = list(fds)
            if self.fd is not None and self.fd in ready:
                self._close_pidfd()  # it has exited: from now on, the watch or plain sleeps
                return
            if not ready:
                return
            names = renamed(*self.watch) if self.watch is not None else None
            if names is None or "status.json" in names:
                return
            # another file was renamed in (a trainer status, a node's record): sleep on

    def _close_pidfd(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def close(self) -> None:
        """Release the watch and the pidfd."""
        self._close_pidfd()
        if self.watch is not None:
            unwatch(*self.watch)
            self.watch = None
