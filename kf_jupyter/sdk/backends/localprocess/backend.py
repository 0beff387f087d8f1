"""The SDK's `LocalProcessBackend` (`kubeflow.trainer.backends.localprocess.backend`).

Runs on kf-jupyter's local backend: every node a local process group with the environment the
cluster would give it, any framework (torch, MPI, JAX, XGBoost), packages from a cached layered
environment (no venv per job), jobs kept in a state folder that a restarted kernel still sees.
"""

from __future__ import annotations

from typing import Any

from ....backends.local.config import LocalBackendConfig
from ...client import KFBackend
from ..base import RuntimeBackend
from .job import LocalJob
from .types import LocalBackendJobs, LocalBackendStep, LocalProcessBackendConfig


class LocalProcessBackend(KFBackend):
    """Local processes (`LocalProcessBackendConfig`; its `cleanup_venv` has nothing to clean)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(LocalBackendConfig())
        self.cfg = cfg


__all__ = [
    "LocalBackendJobs",
    "LocalBackendStep",
    "LocalJob",
    "LocalProcessBackend",
    "LocalProcessBackendConfig",
    "RuntimeBackend",
]
