"""The SDK's container backend configuration (`kubeflow.trainer.backends.container.types`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(kw_only=True)
class TrainingRuntimeSource:
    """Where the SDK's container backend reads runtime definitions from (URL schemes).

    kf-jupyter's local backend has its runtimes built in (the default install's, see
    docs/local-backend.md); the sources are accepted and not read.
    """

    sources: list[str] = field(default_factory=lambda: ["github://kubeflow/trainer"])


@dataclass(kw_only=True)
class ContainerBackendConfig:
    """The SDK's Docker/Podman backend config; kf-jupyter runs the job as local processes.

    The fields are accepted for compatibility and not used: no container is started, so a
    `CustomTrainerContainer` (an image) is refused with a clear error, while
    `CustomTrainer(func=...)` runs exactly as on `LocalProcessBackendConfig`. Log lines keep
    their newline, as the SDK's container backend gives them.
    """

    pull_policy: str = "IfNotPresent"
    auto_remove: bool = True
    container_host: str | None = None
    container_runtime: Literal["docker", "podman"] | None = None
    runtime_source: TrainingRuntimeSource = field(default_factory=TrainingRuntimeSource)
    dataset_initializer_image: str = "ghcr.io/kubeflow/trainer/dataset-initializer:latest"
    model_initializer_image: str = "ghcr.io/kubeflow/trainer/model-initializer:latest"
    initializer_timeout: int = 600
