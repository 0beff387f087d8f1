"""The client's copy of a TrainJob's logs, kept for when the pods are gone.

A cluster keeps a pod's log only while the pod exists, and of a restarted container only the
previous run's: when a Job gives up, its pods are deleted (and so are the pods of a job that
kf-jupyter suspends at its first failed run). So the log follower appends every line it passes
on, per source, to `<state dir>/kubernetes-logs/<namespace>/<job>-<uid>/<source>.<id>.log`,
and before stopping a failed job the client saves what the pods still have
(`<source>.saved-<id>.log`).
A read of a job's logs takes a source whose pod is gone from here (docs/kubernetes-backend.md).

State dir: `$KF_JUPYTER_STATE_DIR`, else `$XDG_DATA_HOME/kf-jupyter`, else
`~/.local/share/kf-jupyter` (the local backend's).
"""

from __future__ import annotations

import os
import re
import secrets
import threading
from pathlib import Path
from typing import Any

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def _state_dir() -> Path:
    explicit = os.environ.get("KF_JUPYTER_STATE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "kf-jupyter"


def attempt_header(source: str, attempt: int) -> str:
    """The line that opens a restarted container's next run in a kept (and followed) log."""
    return f"── {source}: attempt {attempt} (the kubelet restarted the failed container) ──"


class LogStore:
    """The kept logs of one TrainJob (by namespace, name and uid). Each follow writes its own
    copy per source (two followers at once, or one stopped early, never mix); a read takes the
    longest copy."""

    def __init__(self, namespace: str, name: str, uid: str) -> None:
        job = _SAFE.sub("_", name) + "-" + _SAFE.sub("_", uid)[:36]
        self.root = _state_dir() / "kubernetes-logs" / _SAFE.sub("_", namespace) / job
        self._token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._files: dict[str, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, namespace: str, obj: dict[str, Any]) -> LogStore:
        """The store of the TrainJob `obj`."""
        meta = obj.get("metadata") or {}
        return cls(namespace, str(meta.get("name") or ""), str(meta.get("uid") or "none"))

    def append(self, source: str, line: str) -> None:
        """Add a followed line (errors are ignored: the copy must never break a follow)."""
        try:
            with self._lock:
                f = self._files.get(source)
                if f is None:
                    self.root.mkdir(parents=True, exist_ok=True)
                    path = self.root / f"{_SAFE.sub('_', source)}.{self._token}.log"
                    f = self._files[source] = path.open("a", encoding="utf-8")
                f.write(line.replace("\n", " ") + "\n")
                f.flush()
        except OSError:
            pass

    def save(self, source: str, lines: list[str]) -> None:
        """Keep what a pod still has (before kf-jupyter stops its job)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            path = self.root / f"{_SAFE.sub('_', source)}.saved-{self._token}.log"
            path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        except OSError:
            pass

    def close(self) -> None:
        """Close the files a follow appended to."""
        with self._lock:
            for f in self._files.values():
                f.close()
            self._files.clear()

    def read(self, source: str) -> list[str] | None:
        """The kept lines of a source (the longest copy), None when there is none."""
        best: list[str] | None = None
        try:
            paths = list(self.root.glob(f"{_SAFE.sub('_', source)}.*.log"))
        except OSError:
            return None
        for path in paths:
            try:
                lines = path.read_text(encoding="utf-8").splitlines()
            except OSError:
                continue
            if best is None or len(lines) > len(best):
                best = lines
        return best

    def sources(self) -> list[str]:
        """The sources with a kept log."""
        try:
            return sorted({p.name.split(".", 1)[0] for p in self.root.glob("*.log")})
        except OSError:
            return []
