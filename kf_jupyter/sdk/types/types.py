"""The Kubeflow SDK 0.5.0's types, written for kf-jupyter: same names, fields and defaults.

What SDK code builds (`CustomTrainer`, `CustomTrainerContainer`, initializers) and what it reads
back (`Runtime`, `RuntimeTrainer`, `TrainJob`, `Step`, `Event`). Plain dataclasses, no I/O.
"""

from __future__ import annotations

import abc
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


class Loss(Enum):
    """The loss function of the TorchTune fine-tuning trainer."""

    CEWithChunkedOutputLoss = "torchtune.modules.loss.CEWithChunkedOutputLoss"


class DataType(Enum):
    """The data type of model and optimizer parameters for TorchTune (bf16 or fp32)."""

    BF16 = "bf16"
    FP32 = "fp32"


class DataFormat(Enum):
    """The file type of a TorchTune instruct dataset."""

    JSON = "json"
    CSV = "csv"
    PARQUET = "parquet"
    ARROW = "arrow"
    TEXT = "text"
    XML = "xml"


@dataclass
class TorchTuneInstructDataset:
    """A custom instruct dataset for TorchTune (`torchtune.datasets.instruct_dataset`).

    `source`: the file type; `split`: e.g. "train[:10%]"; `train_on_input`: also train on the
    prompt; `new_system_prompt`: a system message to prepend; `column_map`: the dataset's
    names for the "input" and "output" columns.
    """

    source: DataFormat | None = None
    split: str | None = None
    train_on_input: bool | None = None
    new_system_prompt: str | None = None
    column_map: dict[str, str] | None = None


@dataclass
class LoraConfig:
    """LoRA / QLoRA / DoRA settings for TorchTune fine-tuning (each None: the recipe's value)."""

    apply_lora_to_mlp: bool | None = None
    apply_lora_to_output: bool | None = None
    lora_attn_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "v_proj", "output_proj"]
    )
    lora_rank: int | None = None
    lora_alpha: int | None = None
    lora_dropout: float | None = None
    quantize_base: bool | None = None
    use_dora: bool | None = None


@dataclass
class TorchTuneConfig:
    """What to change in a torchtune runtime's fine-tuning recipe (None: the recipe's value).

    Becomes `tune run` arguments (`dtype=bf16`, `batch_size=4`, `model.lora_rank=8`, ...) on the
    runtime's trainer, exactly as the Kubeflow SDK writes them.
    """

    dtype: DataType | None = None
    batch_size: int | None = None
    epochs: int | None = None
    loss: Loss | None = None
    num_nodes: int | None = None
    peft_config: LoraConfig | None = None
    dataset_preprocess_config: TorchTuneInstructDataset | None = None
    resources_per_node: dict[str, Any] | None = None


@dataclass
class BuiltinTrainer:
    """A trainer built into the runtime (TorchTune fine-tuning), configured by `config`.

    Runs on a cluster, on a torchtune runtime (`torchtune-llama3.2-1b`, ...), whose initializers
    download the pre-trained model and the dataset. The local backend cannot run it.
    """

    config: TorchTuneConfig


#: The framework label of the runtimes that take a `BuiltinTrainer` ("torchtune").
TORCH_TUNE = "torchtune"


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
class BaseInitializer(abc.ABC):
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
class DataCacheInitializer(BaseInitializer):
    """A distributed data cache (`cache://<SCHEMA>/<TABLE>`) in front of an Iceberg table.

    `metadata_loc`: the table's metadata file; `num_data_nodes` (> 1): cache data nodes;
    `head_cpu`, `head_mem`, `worker_cpu`, `worker_mem`: their resources; `iam_role`: the role
    that reads `metadata_loc`. Runs on a cluster with the data cache installed.
    """

    metadata_loc: str
    num_data_nodes: int
    head_cpu: str | None = None
    head_mem: str | None = None
    worker_cpu: str | None = None
    worker_mem: str | None = None
    iam_role: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.num_data_nodes, bool) or not isinstance(self.num_data_nodes, int):
            raise ValueError(f"num_data_nodes must be a whole number, got {self.num_data_nodes!r}")
        if self.num_data_nodes <= 1:
            raise ValueError(f"num_data_nodes must be greater than 1, got {self.num_data_nodes}")
        if not self.storage_uri.startswith("cache://"):
            raise ValueError(f"storage_uri must start with 'cache://', got {self.storage_uri}")
        if len(self.storage_uri[len("cache://") :].split("/")) != 2:
            raise ValueError(
                "storage_uri must be in format 'cache://<SCHEMA_NAME>/<TABLE_NAME>', got "
                f"{self.storage_uri}"
            )


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

    dataset: HuggingFaceDatasetInitializer | S3DatasetInitializer | DataCacheInitializer | None = (
        None
    )
    model: HuggingFaceModelInitializer | S3ModelInitializer | None = None


@dataclass
class TrainJobTemplate:
    """A reusable TrainJob: the trainer, and optionally the runtime and initializer.

    It unpacks into `train()`: `client.train(**template)` (and `client.train(**template,
    options=[...])`) submits it; `runtime` None means the default runtime.
    """

    trainer: CustomTrainer
    runtime: str | Runtime | None = None
    initializer: Initializer | None = None

    def keys(self) -> list[str]:
        """The argument names `**template` passes to `train()`."""
        return ["trainer", "runtime", "initializer"]

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


__all__ = [
    "DATASET_PATH",
    "MODEL_PATH",
    "TORCH_TUNE",
    "BaseInitializer",
    "BuiltinTrainer",
    "CustomTrainer",
    "CustomTrainerContainer",
    "DataCacheInitializer",
    "DataFormat",
    "DataType",
    "Event",
    "HuggingFaceDatasetInitializer",
    "HuggingFaceModelInitializer",
    "Initializer",
    "LoraConfig",
    "Loss",
    "Runtime",
    "RuntimeKind",
    "RuntimeTrainer",
    "S3DatasetInitializer",
    "S3ModelInitializer",
    "Step",
    "TorchTuneConfig",
    "TorchTuneInstructDataset",
    "TrainJob",
    "TrainJobTemplate",
    "TrainerType",
]
