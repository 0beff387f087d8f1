"""The Kubeflow SDK 0.5.0's types, written for kf-jupyter: same names, fields and defaults.

What SDK code builds (`CustomTrainer`, `CustomTrainerContainer`, initializers) and what it reads
back (`Runtime`, `RuntimeTrainer`, `TrainJob`, `Step`, `Event`). Plain dataclasses, no I/O.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any

UNKNOWN = "Unknown"
WORKSPACE_PATH = "/workspace"
DATASET_PATH = os.path.join(WORKSPACE_PATH, "dataset")
MODEL_PATH = os.path.join(WORKSPACE_PATH, "model")
DEFAULT_TRAINING_RUNTIME = "torch-distributed"
INITIALIZER_DEFAULT_IGNORE_PATTERNS = ["*.msgpack", "*.h5", "*.bin", "*.pt", "*.pth"]


def default_pip_index_urls() -> list[str]:
    """`$DEFAULT_PIP_INDEX_URLS` (comma-separated), else [] meaning pip's own configuration.

    The SDK writes `https://pypi.org/simple` when the variable is unset; kf-jupyter leaves the
    choice to pip (PyPI unless pip is configured otherwise), so a configured mirror keeps working.
    """
    raw = os.environ.get("DEFAULT_PIP_INDEX_URLS", "")
    return [u.strip() for u in raw.split(",") if u.strip()]


@dataclass
class CustomTrainer:
    """A self-contained training function and how to run it (the SDK's `CustomTrainer`).

    It runs under the chosen runtime's framework: `torchrun` on a torch runtime, `mpirun` on an
    MPI one (deepspeed, mlx), one process per node on jax and xgboost runtimes.
    """

    func: Callable[..., Any]
    func_args: dict[str, Any] | None = None
    image: str | None = None
    packages_to_install: list[str] | None = None
    pip_index_urls: list[str] = field(default_factory=default_pip_index_urls)
    num_nodes: int | None = None
    resources_per_node: dict[str, Any] | None = None
    env: dict[str, str] | None = None


@dataclass
class CustomTrainerContainer:
    """A container image that does the whole training (the SDK's `CustomTrainerContainer`).

    Runs on a cluster only: the local backend starts processes, not images.
    """

    image: str
    num_nodes: int | None = None
    resources_per_node: dict[str, Any] | None = None
    env: dict[str, str] | None = None


class RuntimeKind(Enum):
    """The kind of a training runtime."""

    CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
    TRAINING_RUNTIME = "TrainingRuntime"


class TrainerType(Enum):
    """Which trainer a runtime takes: a custom function/image, or a built-in (torchtune)."""

    CUSTOM_TRAINER = "CustomTrainer"
    BUILTIN_TRAINER = "BuiltinTrainer"


@dataclass
class RuntimeTrainer:
    """The trainer part of a runtime: framework, image, nodes, devices, entrypoint."""

    trainer_type: TrainerType
    framework: str
    image: str
    num_nodes: int = 1
    device: str = UNKNOWN
    device_count: str = UNKNOWN
    _command: tuple[str, ...] = field(default=(), init=False, repr=False)

    @property
    def command(self) -> tuple[str, ...]:
        """The runtime's entrypoint (`torchrun`, `mpirun ...`, `python3`, `tune run`)."""
        return self._command

    def set_command(self, command: tuple[str, ...]) -> None:
        """Set the entrypoint."""
        self._command = tuple(command)


@dataclass
class Runtime:
    """A training runtime as SDK code reads it (`runtime.name`, `runtime.trainer.framework`)."""

    name: str
    trainer: RuntimeTrainer
    kind: RuntimeKind
    pretrained_model: str | None = None
    #: kf-jupyter's own description of the runtime (ML policy, labels, ...).
    source: Any = field(default=None, repr=False, compare=False)


@dataclass
class Step:
    """One step of a job: `node-0`, `node-1`, ... or an initializer; status is a pod phase."""

    name: str
    status: str | None
    pod_name: str
    device: str = UNKNOWN
    device_count: str = UNKNOWN


@dataclass
class TrainJob:
    """A job as SDK code reads it (`job.status`, `job.steps`, `job.runtime.name`, ...)."""

    name: str
    runtime: Runtime
    steps: list[Step]
    num_nodes: int
    creation_timestamp: datetime | None
    status: str = UNKNOWN
    #: Beyond the SDK 0.5.0: why it ended, and the trainer's reported progress when known.
    reason: str = ""
    message: str = ""
    trainer_status: Any = None


@dataclass
class Event:
    """Something that happened to a job or one of its parts."""

    involved_object_kind: str
    involved_object_name: str
    message: str
    reason: str
    event_time: datetime | None


@dataclass
class BaseInitializer:
    """What every initializer has: where the data or model comes from."""

    storage_uri: str


@dataclass
class HuggingFaceDatasetInitializer(BaseInitializer):
    """A dataset from the Hugging Face Hub (`hf://org/name`)."""

    ignore_patterns: list[str] | None = None
    access_token: str | None = None


@dataclass
class S3DatasetInitializer(BaseInitializer):
    """A dataset from S3-compatible storage (`s3://bucket/path`)."""

    ignore_patterns: list[str] | None = None
    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    region: str | None = None
    role_arn: str | None = None

    def __post_init__(self) -> None:
        if not self.storage_uri.startswith("s3://"):
            raise ValueError(f"storage_uri must start with 's3://', got {self.storage_uri}")


@dataclass
class HuggingFaceModelInitializer(BaseInitializer):
    """A model from the Hugging Face Hub."""

    ignore_patterns: list[str] | None = field(
        default_factory=lambda: list(INITIALIZER_DEFAULT_IGNORE_PATTERNS)
    )
    access_token: str | None = None


@dataclass
class S3ModelInitializer(BaseInitializer):
    """A model from S3-compatible storage."""

    ignore_patterns: list[str] | None = field(
        default_factory=lambda: list(INITIALIZER_DEFAULT_IGNORE_PATTERNS)
    )
    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    region: str | None = None
    role_arn: str | None = None

    def __post_init__(self) -> None:
        if not self.storage_uri.startswith("s3://"):
            raise ValueError(f"storage_uri must start with 's3://', got {self.storage_uri}")


@dataclass
class Initializer:
    """The dataset and model a cluster downloads into /workspace before training."""

    dataset: Any = None
    model: Any = None


__all__ = [
    "DATASET_PATH",
    "MODEL_PATH",
    "BaseInitializer",
    "CustomTrainer",
    "CustomTrainerContainer",
    "Event",
    "HuggingFaceDatasetInitializer",
    "HuggingFaceModelInitializer",
    "Initializer",
    "Runtime",
    "RuntimeKind",
    "RuntimeTrainer",
    "S3DatasetInitializer",
    "S3ModelInitializer",
    "Step",
    "TrainJob",
    "TrainerType",
]
