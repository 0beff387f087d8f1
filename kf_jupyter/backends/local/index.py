"""The local job list's index: finished jobs' records, kept consistent with the job folders.

A finished job (Complete or Failed) never changes again: only deleting its folder, or a new job
of the same name in its place, does. So the list keeps every finished job's record (the TrainJob
and its JSON) in memory and in `<state_dir>/index/jobs-v1.bin`, and a poll reads only what may
have changed:

- `<state_dir>/index/journal`: one line (the job's name) appended by every `train()` once its
  folder is written and by every `delete_job()`; a reader reads only the lines after the offset
  it has seen, and re-reads those jobs;
- the jobs folder's modification time: a folder added or removed by anything else (another
  version, a hand's `rm -rf`) changes it; only then are the folder's entries listed again and the
  new ones read (a time within 2 s of the clock is not trusted: it could change again in the
  same clock tick unseen);
- jobs not finished yet (or half-written, unreadable) are read on every poll, as before.

The index file is written atomically (a temporary file, then a rename) with a checksum, and
names the journal offset and folder time its records were read at. Lost, corrupt, from another
version, or a journal replaced or truncated: it is rebuilt from the folders (one full read).
Another process's index may be older than ours: it is still consistent, and the next reader
catches up from the journal and the folder time. See docs/local-backend.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import marshal
import os
import threading
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ...failure import Failure
from ...types import TERMINAL, Step, TrainerStatus, TrainJob

INDEX_NAME = "jobs-v1.bin"
FRAGMENTS_NAME = "jobs-json-v1.bin"
JOURNAL_NAME = "journal"
_MAGIC = b"KFJOBINDEX1\n"
#: A folder time this close to the clock (ns) may still change within its tick unseen.
SETTLE_NS = 2_000_000_000
#: Seconds between two writes of the index file when only a few jobs changed.
SAVE_EVERY_SECONDS = 2.0


def _schema() -> str:
    parts = [
        [f.name for f in dataclasses.fields(cls)]
        for cls in (TrainJob, Step, TrainerStatus, Failure)
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


_SCHEMA = _schema()
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(TrainJob))
_STEP_FIELDS = tuple(f.name for f in dataclasses.fields(Step))
_new = object.__new__
_fromts = datetime.fromtimestamp


def index_dir(state_dir: Path) -> Path:
    """The owner-only folder of the index and its journal."""
    return Path(state_dir) / "index"


def note(state_dir: Path, name: str) -> None:
    """Tell every reader that job `name` was created, replaced or deleted (one appended line)."""
    d = index_dir(state_dir)
    with contextlib.suppress(FileExistsError):
        d.mkdir(mode=0o700, parents=True)
    line = (json.dumps(name) + "\n").encode("utf-8", "surrogatepass")
    fd = os.open(d / JOURNAL_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line)  # one write of one short line: atomic with O_APPEND
    finally:
        os.close(fd)


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _dt(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, UTC) if value is not None else None


def encode(job: TrainJob) -> tuple[Any, ...]:
    """A TrainJob as plain values (marshal-able), field by field."""
    out: list[Any] = []
    for name in _JOB_FIELDS:
        value = getattr(job, name)
        if name in ("creation_time", "completion_time"):
            value = _ts(value)
        elif name == "steps":
            value = [tuple(dataclasses.astuple(s)) for s in value]
        elif name == "labels":
            value = dict(value)
        elif name == "trainer_status" and value is not None:
            value = (
                value.progress_percentage,
                value.estimated_remaining_seconds,
                dict(value.metrics),
                _ts(value.last_updated_time),
            )
        elif name == "failure" and value is not None:
            value = (value.source, value.exc_type, value.message, list(value.traceback))
        out.append(value)
    return tuple(out)


def decode(rec: tuple[Any, ...]) -> TrainJob:
    """The TrainJob of `encode` (a new object each time: callers may change it)."""
    d = dict(zip(_JOB_FIELDS, rec, strict=True))
    created, finished = d["creation_time"], d["completion_time"]
    if created is not None:
        d["creation_time"] = _fromts(created, UTC)
    if finished is not None:
        d["completion_time"] = _fromts(finished, UTC)
    steps = []
    for s in d["steps"]:
        step = _new(Step)
        step.__dict__.update(zip(_STEP_FIELDS, s, strict=True))
        steps.append(step)
    d["steps"] = steps
    d["labels"] = dict(d["labels"])
    ts = d["trainer_status"]
    if ts is not None:
        d["trainer_status"] = TrainerStatus(ts[0], ts[1], dict(ts[2]), _dt(ts[3]))
    f = d["failure"]
    if f is not None:
        d["failure"] = Failure(f[0], f[1], f[2], list(f[3]))
    job = _new(TrainJob)
    job.__dict__.update(d)
    return job


class JobIndex:
    """The job list of one state directory (thread-safe; one per LocalBackend)."""

    def __init__(
        self, state_dir: Path, jobs_dir: Path, read: Callable[[str], TrainJob | None]
    ) -> None:
        self.state_dir = Path(state_dir)
        self.jobs_dir = Path(jobs_dir)
        self._read = read
        self._lock = threading.Lock()
        self._loaded = False
        # Finished jobs: name -> (folder inode, creation time, encoded job).
        self._done: dict[str, tuple[int, float, tuple[Any, ...]]] = {}
        # Their to_dict() JSON (for the server's route), made and loaded on first use:
        # name -> (folder inode, creation time, JSON); stale when the first two differ.
        self._frags: dict[str, tuple[int, float, str]] | None = None
        self._frags_unsaved = 0
        self._frags_saved_at = 0.0
        # Everything else seen in the folder (running, half-written, unreadable): read each time.
        self._other: dict[str, int] = {}
        self._dir_mtime: int | None = None  # trusted only when settled (SETTLE_NS)
        self._journal: tuple[int, int] = (0, 0)  # (inode, offset read up to)
        self._unsaved = 0
        self._saved_at = 0.0
        # Every change to the finished jobs bumps the version; what is derived from them (their
        # order, the route's JSON body) is kept per version, so a poll with no change is O(live).
        self._version = 0
        self._order: tuple[int, list[tuple[str, tuple[int, float, tuple[Any, ...]]]]] = (-1, [])
        self._body: tuple[int, str, float] = (-1, "", 0.0)
        #: What the last refresh did (for the benchmark and tests): rebuilt, read, listed.
        self.last: dict[str, Any] = {}

    # ------------------------------------------------------------------ public

    def jobs(self) -> list[TrainJob]:
        """Every job, oldest first: finished ones from the index, the others read now."""
        with self._lock:
            live = self._refresh()
            out = [decode(v[2]) for _, v in self._sorted_done()]
        return _merge(out, live)

    def newest(self, n: int) -> tuple[list[TrainJob], int]:
        """The `n` newest jobs, oldest first, and how many jobs there are in all."""
        with self._lock:
            live = self._refresh()
            done = self._sorted_done()
            out = [decode(v[2]) for _, v in done[max(0, len(done) - n) :]]
            total = len(done) + len(live)
        return _merge(out, live)[-n:] if n > 0 else [], total

    def jobs_json(self) -> str:
        """The JSON array of every job's to_dict(), oldest first (finished ones cached)."""
        with self._lock:
            live = self._refresh()
            if self._body[0] != self._version:
                parts = self._fragments()
                newest = parts[-1][0] if parts else float("-inf")
                self._body = (self._version, ",".join(p[1] for p in parts), newest)
            _, body, newest = self._body
        if not live:
            return "[" + body + "]"
        mine = sorted((_ts(j.creation_time) or 0.0, json.dumps(j.to_dict())) for j in live)
        if mine[0][0] >= newest:  # the usual case: the running jobs are the newest
            return "[" + ",".join(([body] if body else []) + [m[1] for m in mine]) + "]"
        with self._lock:
            parts = self._fragments()
        parts.extend(mine)
        parts.sort(key=lambda p: p[0])  # stable: finished ones already in order
        return "[" + ",".join(p[1] for p in parts) + "]"

    def _sorted_done(self) -> list[tuple[str, tuple[int, float, tuple[Any, ...]]]]:
        if self._order[0] != self._version:
            self._order = (self._version, sorted(self._done.items(), key=lambda kv: kv[1][1]))
        return self._order[1]

    def _bump(self) -> None:
        self._unsaved += 1
        self._version += 1

    def forget(self, name: str) -> None:
        """Drop `name` from this process's view now (its folder was just removed here)."""
        with self._lock:
            if self._done.pop(name, None) is not None or self._other.pop(name, None) is not None:
                self._bump()

    # ------------------------------------------------------------------ refresh

    def _paths(self) -> tuple[Path, Path]:
        d = index_dir(self.state_dir)
        return d / INDEX_NAME, d / JOURNAL_NAME

    def _refresh(self) -> list[TrainJob]:
        index_path, journal_path = self._paths()
        rebuilt = False
        if not self._loaded:
            self._loaded = True
            if not self._load(index_path):
                self._rebuild(journal_path)
                rebuilt = True
        dirty: set[str] = set()
        # 1. The journal's new lines.
        try:
            st = os.stat(journal_path)
            ino, size = st.st_ino, st.st_size
        except FileNotFoundError:
            ino, size = 0, 0
        seen_ino, offset = self._journal
        if seen_ino and (ino != seen_ino or size < offset):
            self._rebuild(journal_path)  # replaced or truncated: what it said is gone
            rebuilt = True
        elif size > offset or (ino and not seen_ino):
            start = offset if seen_ino else 0
            names, end = _read_journal(journal_path, start)
            dirty |= names
            self._journal = (ino, end)
        # 2. The folder's entries, when its time says they changed.
        listed = False
        try:
            mtime = os.stat(self.jobs_dir).st_mtime_ns
        except FileNotFoundError:
            mtime = None
        if mtime is None:
            if self._done or self._other:
                self._bump()
            self._done.clear()
            self._other.clear()
            self._dir_mtime = None
        elif mtime != self._dir_mtime:
            listed = True
            entries = _entries(self.jobs_dir)
            for name in list(self._done):
                if entries.get(name) != self._done[name][0]:
                    del self._done[name]
                    self._bump()
                    dirty.add(name)
            for name in list(self._other):
                if name not in entries:
                    del self._other[name]
            for name, ino_ in entries.items():
                if name not in self._done:
                    self._other[name] = ino_
            settled = time.time_ns() - mtime > SETTLE_NS
            self._dir_mtime = mtime if settled else None
            if settled:
                self._bump()  # a fresh process need not list the folder
        # 3. Read what changed, and what is not finished.
        for name in dirty:
            if self._done.pop(name, None) is not None:
                self._bump()
            with contextlib.suppress(OSError):
                self._other[name] = os.stat(self.jobs_dir / name).st_ino
        live: list[TrainJob] = []
        read = 0
        for name, ino_ in list(self._other.items()):
            read += 1
            job = self._read(name)
            if job is None:
                if not (self.jobs_dir / name).is_dir():
                    del self._other[name]
                continue
            if job.status in TERMINAL:
                self._finished(name, ino_, job)
            else:
                live.append(job)
        self.last = {"rebuilt": rebuilt, "read": read, "listed": listed}
        if self._unsaved and (
            rebuilt
            or self._unsaved >= 100
            or time.monotonic() - self._saved_at >= SAVE_EVERY_SECONDS
        ):
            self._save(index_path)
        return live

    def _finished(self, name: str, ino: int, job: TrainJob) -> None:
        del self._other[name]
        self._done[name] = (ino, _ts(job.creation_time) or 0.0, encode(job))
        self._bump()

    def _rebuild(self, journal_path: Path) -> None:
        """Forget everything; every folder is read again by the refresh."""
        self._done.clear()
        self._other.clear()
        self._dir_mtime = None
        try:
            st = os.stat(journal_path)
            self._journal = (st.st_ino, st.st_size)
        except FileNotFoundError:
            self._journal = (0, 0)
        self._bump()

    def _fragments(self) -> list[tuple[float, str]]:
        """(creation time, JSON) of every finished job, oldest first."""
        frags_path = index_dir(self.state_dir) / FRAGMENTS_NAME
        if self._frags is None:
            self._frags = _load_fragments(frags_path)
        frags = self._frags
        parts = []
        for name, (ino, created, rec) in self._sorted_done():
            f = frags.get(name)
            if f is None or f[0] != ino or f[1] != created:
                f = (ino, created, json.dumps(decode(rec).to_dict()))
                frags[name] = f
                self._frags_unsaved += 1
            parts.append((created, f[2]))
        if len(frags) > len(self._done):
            for name in [n for n in frags if n not in self._done]:
                del frags[name]
            self._frags_unsaved += 1
        if self._frags_unsaved and (
            self._frags_unsaved >= 100
            or time.monotonic() - self._frags_saved_at >= SAVE_EVERY_SECONDS
        ):
            payload = marshal.dumps((_SCHEMA, [(n, *v) for n, v in frags.items()]))
            if _write(frags_path, payload):
                self._frags_unsaved = 0
                self._frags_saved_at = time.monotonic()
        return parts

    # ------------------------------------------------------------------ file

    def _load(self, path: Path) -> bool:
        data = _read(path)
        try:
            schema, dir_mtime, journal, done, other = data  # type: ignore[misc]
            if schema != _SCHEMA:
                return False
            self._dir_mtime = dir_mtime
            self._journal = (int(journal[0]), int(journal[1]))
            self._done = {name: (ino, created, rec) for name, ino, created, rec in done}
            self._other = dict(other)
            self._version += 1
        except (ValueError, TypeError):
            self._done, self._other, self._dir_mtime = {}, {}, None
            self._journal = (0, 0)
            return False
        return True

    def _save(self, path: Path) -> None:
        payload = marshal.dumps(
            (
                _SCHEMA,
                self._dir_mtime,
                self._journal,
                [(name, *v) for name, v in self._done.items()],
                list(self._other.items()),
            )
        )
        if _write(path, payload):
            self._unsaved = 0
            self._saved_at = time.monotonic()


def _write(path: Path, payload: bytes) -> bool:
    """Write magic, checksum and payload atomically (a temporary file, then a rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with contextlib.suppress(FileExistsError):
            path.parent.mkdir(mode=0o700, parents=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC + str(zlib.crc32(payload)).encode() + b"\n" + payload)
        os.replace(tmp, path)
    except OSError:  # a full disk or a read-only store: the list still works, unsaved
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def _read(path: Path) -> Any:
    """The payload of `_write` unmarshalled; None if missing, torn or damaged."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if not data.startswith(_MAGIC):
        return None
    head, _, payload = data[len(_MAGIC) :].partition(b"\n")
    if str(zlib.crc32(payload)).encode() != head:
        return None
    try:
        return marshal.loads(payload)
    except (ValueError, TypeError, EOFError):
        return None


def _load_fragments(path: Path) -> dict[str, tuple[int, float, str]]:
    data = _read(path)
    try:
        schema, items = data  # type: ignore[misc]
        if schema == _SCHEMA:
            return {name: (ino, created, frag) for name, ino, created, frag in items}
    except (TypeError, ValueError):
        pass
    return {}


def _entries(jobs_dir: Path) -> dict[str, int]:
    """name -> inode of every job folder (no stat: the directory entry carries both)."""
    out: dict[str, int] = {}
    try:
        with os.scandir(jobs_dir) as it:
            for e in it:
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False):
                    out[e.name] = e.inode()
    except FileNotFoundError:
        pass
    return out


def _read_journal(path: Path, start: int) -> tuple[set[str], int]:
    """The names on the complete lines from `start`, and the offset after the last one."""
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read()
    except OSError:
        return set(), start
    end = data.rfind(b"\n") + 1
    names: set[str] = set()
    for line in data[:end].splitlines():
        with contextlib.suppress(ValueError):
            name = json.loads(line.decode("utf-8", "surrogatepass"))
            if isinstance(name, str):
                names.add(name)
    return names, start + end


def _merge(done: list[TrainJob], live: list[TrainJob]) -> list[TrainJob]:
    if not live:
        return done
    oldest = datetime.min.replace(tzinfo=UTC)
    return sorted([*done, *live], key=lambda j: j.creation_time or oldest)
