"""The local backend: every rank a real subprocess, a job store on disk, live logs."""

from __future__ import annotations

from .config import LocalBackendConfig

__all__ = ["LocalBackendConfig"]
