"""The SDK's `ContainerBackend` (`kubeflow.trainer.backends.container.backend`).

kf-jupyter starts no containers: a `ContainerBackendConfig` runs `CustomTrainer` functions as
local processes, exactly as `LocalProcessBackendConfig` does, and yields log lines with their
newline, as the SDK's container backend does (Kubeflow's notebooks print them with `end=""`).
A `CustomTrainerContainer` (an image) is refused with a clear error.
"""

from __future__ import annotations

from typing import Any

from ....backends.local.config import LocalBackendConfig
from ...client import KFBackend
from ..base import RuntimeBackend
from .adapters.base import BaseContainerClientAdapter
from .adapters.docker import DockerClientAdapter
from .adapters.podman import PodmanClientAdapter
from .runtime_loader import get_training_runtime_from_sources, list_training_runtimes_from_sources
from .types import ContainerBackendConfig


class ContainerBackend(KFBackend):
    """Local processes in place of containers (see the module docstring)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(LocalBackendConfig(), line_end="\n")
        self.cfg = cfg


__all__ = [
    "BaseContainerClientAdapter",
    "ContainerBackend",
    "ContainerBackendConfig",
    "DockerClientAdapter",
    "PodmanClientAdapter",
    "RuntimeBackend",
    "get_training_runtime_from_sources",
    "list_training_runtimes_from_sources",
]
