"""Reading a local job's log files: every line once, in order per source, while the job runs.

Sources are the files in `<job>/logs/`: `rank-N.log` (what global rank N printed, written by the
runner) and `<process>.log` (the launcher process: bash, torchrun, mpirun). Following polls the
files every 50 ms, reads only complete lines from a kept offset, never loads a whole file, and
stops once the job has ended and every file is drained (or its `stop` event is set). A tail
reads backwards only the bytes of the lines it returns; following with a tail goes on from the
exact offset where the tail ended (a line half-written at that moment comes once, whole).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import BinaryIO

from ...logview import UPDATE, UPDATE_BYTES, followed_line, terminal_line
from ...types import LogRecord

POLL_SECONDS = 0.05
CHUNK = 1 << 20
BLOCK = 1 << 16

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
    return terminal_line(raw.decode("utf-8", "replace"))


def _after_newlines_back(fh: BinaryIO, hi: int, count: int) -> int:
    """The offset just after the `count`-th newline before offset `hi`, scanning backwards.

    0 if the file holds fewer. Reads each block once, so the cost is the bytes scanned.
    """
    pos = hi
    while pos > 0 and count > 0:
        step = min(BLOCK, pos)
        pos -= step
        fh.seek(pos)
        block = fh.read(step)
        found = block.count(b"\n")
        if found >= count:
            i = len(block)
            for _ in range(count):
                i = block.rfind(b"\n", 0, i)
            return pos + i + 1
        count -= found
    return 0 if count > 0 else hi


def _ends_with_newline(fh: BinaryIO, end: int) -> bool:
    if end <= 0:
        return False
    fh.seek(end - 1)
    return fh.read(1) == b"\n"


def _tail_span(fh: BinaryIO, end: int, n: int, whole: bool) -> tuple[int, int]:
    """(start, cut): the last `n` lines of the first `end` bytes are the bytes [start, cut).

    `whole`: only complete lines count, so `cut` is just after the last newline and the bytes
    from `cut` on are a line still being written (the follower reads it once it is complete).
    Otherwise `cut` is `end` and an unterminated last line counts as a line.
    """
    cut = _after_newlines_back(fh, end, 1) if whole else end
    if n <= 0 or cut <= 0:
        return cut, cut
    hi = cut - 1 if _ends_with_newline(fh, cut) else cut
    return _after_newlines_back(fh, hi, n), cut


def _split(data: bytes) -> list[str]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [_decode(x) for x in lines]


def tail_lines_of(path: str, n: int) -> list[str]:
    """The last `n` lines of a file; time and memory in the bytes of those lines only."""
    if n <= 0:
        return []
    with open(path, "rb") as fh:
        end = os.fstat(fh.fileno()).st_size
        start, cut = _tail_span(fh, end, n, whole=False)
        fh.seek(start)
        return _split(fh.read(cut - start))[-n:]


class _Cursor:
    """An open log file, its offset and the incomplete last line read so far.

    The incomplete line is kept as a list of pieces joined once when its newline arrives, so a
    very long line (a progress bar redrawn with `\\r` for hours) costs its length, not its square.
    """

    def __init__(self, path: str, updates: bool = False) -> None:
        self.fh = open(path, "rb")
        self.pieces: list[bytes] = []
        self.updates = updates  # follow: yield `\r` updates of the line being written
        self.shown = ""

    def tail(self, n: int) -> list[str]:
        """The last `n` complete lines written so far; reading goes on right after them.

        Everything after the last newline (a line still being written) is left for
        `read_lines`, so every line is delivered once and whole.
        """
        end = os.fstat(self.fh.fileno()).st_size
        start, cut = _tail_span(self.fh, end, n, whole=True)
        self.fh.seek(start)
        lines = _split(self.fh.read(cut - start)) if cut > start else []
        self.fh.seek(cut)
        return lines

    def read_lines(self, final: bool = False) -> list[str]:
        """The complete lines written since the last call (`final`: the unterminated one too)."""
        out: list[str] = []
        while True:
            chunk = self.fh.read(CHUNK)
            if not chunk:
                break
            last = chunk.rfind(b"\n")
            if last < 0:
                self.pieces.append(chunk)
                continue
            head = chunk[:last]
            self.shown = ""
            if self.pieces:
                self.pieces.append(head)
                head = b"".join(self.pieces)
                self.pieces = []
            if self.updates:  # a follower keeps a bar live across a print (followed_line)
                for x in head.split(b"\n"):
                    out.extend(followed_line(x.decode("utf-8", "replace")))
            else:
                out.extend(_decode(x) for x in head.split(b"\n"))
            if last + 1 < len(chunk):
                self.pieces.append(chunk[last + 1 :])
            if len(out) >= 10_000:
                return out
        if final and self.pieces:
            out.append(_decode(b"".join(self.pieces)))
            self.pieces = []
        elif self.updates and self.pieces:
            self._update(out)
        return out

    def _update(self, out: list[str]) -> None:
        """A progress bar still being written: its current state as one `\r` update record.

        Looks at the end of the line only (at most 64 KiB), however long the bar has run.
        """
        tail = b""
        for piece in reversed(self.pieces):
            tail = piece + tail
            if b"\r" in tail.rstrip(b"\r") or len(tail) > UPDATE_BYTES:
                break
        if b"\r" not in tail:
            return  # a long line without carriage returns: it shows when it ends
        text = _decode(tail[-UPDATE_BYTES:])
        if text and text != self.shown:
            self.shown = text
            out.append(UPDATE + text)

    def close(self) -> None:
        """Close the file."""
        self.fh.close()


def iter_records(
    log_dir: str,
    step: str | None = None,
    follow: bool = False,
    tail_lines: int | None = None,
    is_done: Callable[[], bool] | None = None,
    stop: threading.Event | None = None,
) -> Iterator[LogRecord]:
    """Log records of a job folder (see the module docstring); `is_done` says the job ended.

    With `follow`, the generator also ends soon after `stop` is set, even while no line comes
    (a consumer on another thread uses it to give up a silent job's log at once).
    """

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
        while stop is None or not stop.is_set():
            done = is_done() if is_done else True
            for source in list_sources(log_dir):
                if wanted(source) and source not in cursors:
                    path = os.path.join(log_dir, source + ".log")
                    try:
                        cur = _Cursor(path, updates=True)
                    except FileNotFoundError:
                        continue
                    cursors[source] = cur
                    if first and tail_lines is not None:
                        for line in cur.tail(tail_lines):
                            yield LogRecord(source, line)
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
                if stop is None:
                    time.sleep(POLL_SECONDS)
                else:
                    stop.wait(POLL_SECONDS)
    finally:
        for cur in cursors.values():
            cur.close()
