"""Configuration of the local backend (no heavy imports)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def default_state_dir() -> Path:
    """`$KF_JUPYTER_STATE_DIR`, else `$XDG_DATA_HOME/kf-jupyter`, else `~/.local/share/kf-jupyter`."""
    explicit = os.environ.get("KF_JUPYTER_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "kf-jupyter"


@dataclass
class LocalBackendConfig:
    """Run every rank as a local subprocess.

    state_dir: where jobs live (one folder per job); shared by every kernel and the server.
    cwd: the folder a job ships as its workspace, copied into the job folder where every rank
        starts (default: the caller's working directory at train() time; with
        RuntimeConfig(workspace=False) the processes run in this folder itself).
    python: interpreter whose environment jobs use (default: the kernel's, sys.executable).
    warm: start torch, JAX and XGBoost ranks from the warm pool (docs/local-backend.md); off
        with False, or per job with the `Warm(False)` option.
    warm_idle_seconds: a pool process ends after this long without a launch.
    warm_max_pools: at most this many pool processes at once (the least recently used goes).
    warm_max_memory_mib: the pools' memory together stays under this (each pool's process
        and the processes it keeps forked ahead of a job: their PSS summed); starting another
        stops the least recently used ones first.
    """

    state_dir: str | Path | None = None
    cwd: str | Path | None = None
    python: str | None = None
    warm: bool = True
    warm_idle_seconds: float = 600.0
    warm_max_pools: int = 3
    warm_max_memory_mib: float = 4096.0

    @property
    def resolved_state_dir(self) -> Path:
        """The state directory in use."""
        return Path(self.state_dir).expanduser() if self.state_dir else default_state_dir()
