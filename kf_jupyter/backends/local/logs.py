"""Reading a local job's log files: every line once, in order per source, while the job runs.

Sources are the files in `<job>/logs/`: `rank-N.log` (what global rank N printed, written by the
runner) and `<process>.log` (the launcher process: bash, torchrun, mpirun). Following polls the
files every 50 ms, reads only complete lines from a kept offset, never loads a whole file, and
stops once the job has ended and every file is drained.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator

from ...logview import UPDATE, collapse_cr
from ...types import LogRecord

POLL_SECONDS = 0.05
CHUNK = 1 << 20

_RANK = re.compile(r"rank-(\d+)\.log")


def source_of(filename: str) -> str | None:
    """`rank-3` for rank-3.log, `node-0` for node-0.log; None for anything else."""
    if not filename.endswith(".log"):
        return None
    return filename[:-4]


def _sort_key(source: str) -> tuple[int, int, str]:
    m = _RANK.fullmatch(source + ".log")
    if m:
        return (1, int(m.group(1)), source)
    return (0, 0, source)


def list_sources(log_dir: str) -> list[str]:
    """The sources that have a log file, launcher processes first, then ranks in order."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    found = [s for s in (source_of(n) for n in names) if s]
    return sorted(found, key=_sort_key)


def _decode(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace")
    return collapse_cr(text[:-1] if text.endswith("\r") else text)


def tail_lines_of(path: str, n: int) -> list[str]:
    """The last `n` lines of a file, reading backwards in blocks (not the whole file)."""
    if n <= 0:
        return []
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        pos = fh.tell()
        data = b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [_decode(x) for x in lines[-n:]]


class _Cursor:
    """An open log file, its offset and the incomplete last line read so far."""

    def __init__(self, path: str, updates: bool = False) -> None:
        self.fh = open(path, "rb")
        self.partial = b""
        self.updates = updates  # follow: yield `\r` updates of the line being written
        self.shown = ""

    def read_lines(self, final: bool = False) -> list[str]:
        out: list[str] = []
        while True:
            chunk = self.fh.read(CHUNK)
            if not chunk:
                break
            data = self.partial + chunk
            lines = data.split(b"\n")
            self.partial = lines.pop()
            if lines:
                self.shown = ""
            out.extend(_decode(x) for x in lines)
            if len(out) >= 10_000:
                return out
        if final and self.partial:
            out.append(_decode(self.partial))
            self.partial = b""
        elif self.updates and b"\r" in self.partial:
            self._update(out)
        return out

    def _update(self, out: list[str]) -> None:
        """A progress bar still being written: its current state as one `\r` update record."""
        text = _decode(self.partial)
        if text and text != self.shown:
            self.shown = text
            out.append(UPDATE + text)

    def close(self) -> None:
        self.fh.close()


def iter_records(
    log_dir: str,
    step: str | None = None,
    follow: bool = False,
    tail_lines: int | None = None,
    is_done: Callable[[], bool] | None = None,
) -> Iterator[LogRecord]:
    """Log records of a job folder (see the module docstring); `is_done` says the job ended."""

    def wanted(source: str) -> bool:
        return step is None or source == step

    if not follow:
        for source in list_sources(log_dir):
            if not wanted(source):
                continue
            path = os.path.join(log_dir, source + ".log")
            if tail_lines is not None:
                for line in tail_lines_of(path, tail_lines):
                    yield LogRecord(source, line)
                continue
            cur = _Cursor(path)
            try:
                while True:
                    lines = cur.read_lines()
                    if not lines:
                        break
                    for line in lines:
                        yield LogRecord(source, line)
                for line in cur.read_lines(final=True):
                    yield LogRecord(source, line)
            finally:
                cur.close()
        return

    cursors: dict[str, _Cursor] = {}
    try:
        first = True
        while True:
            done = is_done() if is_done else True
            for source in list_sources(log_dir):
                if wanted(source) and source not in cursors:
                    path = os.path.join(log_dir, source + ".log")
                    try:
                        cur = _Cursor(path, updates=True)
                    except FileNotFoundError:
                        continue
                    if first and tail_lines is not None:
                        for line in tail_lines_of(path, tail_lines):
                            yield LogRecord(source, line)
                        cur.fh.seek(0, os.SEEK_END)
                    cursors[source] = cur
            first = False
            got = False
            for source in sorted(cursors, key=_sort_key):
                lines = cursors[source].read_lines(final=done)
                got = got or bool(lines)
                for line in lines:
                    yield LogRecord(source, line)
            if done and not got:
                return
            if not got:
                time.sleep(POLL_SECONDS)
    finally:
        for cur in cursors.values():
            cur.close()
