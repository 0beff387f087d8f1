"""Kubeflow SDK 0.5.0 compatibility: run SDK code on kf-jupyter by changing only the import.

    from kubeflow.trainer import TrainerClient, CustomTrainer      # before
    from kf_jupyter.sdk import TrainerClient, CustomTrainer        # after

Every module of `kubeflow.trainer` has its counterpart here (`kf_jupyter.sdk.options.kubernetes`,
`kf_jupyter.sdk.backends.localprocess.backend`, `kf_jupyter.sdk.types.types`, ...), with the
same public names and signatures. `TrainerClient()` uses kf-jupyter's local backend (every
node a local process group, with the environment the cluster would give it);
`TrainerClient(KubernetesBackendConfig(...))` submits to a cluster. See docs/notebook.md,
"Running an existing Kubeflow SDK snippet".
"""

from __future__ import annotations

from ..backends.kubernetes.config import KubernetesBackendConfig
from .api.trainer_client import TrainerClient
from .backends.container.types import ContainerBackendConfig, TrainingRuntimeSource
from .backends.kubernetes.utils import get_tpu_num_nodes, update_trainjob_status
from .backends.localprocess.types import LocalProcessBackendConfig
from .client import JobFailedError
from .types.types import (
    DATASET_PATH,
    MODEL_PATH,
    BuiltinTrainer,
    CustomTrainer,
    CustomTrainerContainer,
    DataCacheInitializer,
    DataFormat,
    DataType,
    Event,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    LoraConfig,
    Loss,
    Runtime,
    RuntimeKind,
    RuntimeTrainer,
    S3DatasetInitializer,
    S3ModelInitializer,
    Step,
    TorchTuneConfig,
    TorchTuneInstructDataset,
    TrainerType,
    TrainJob,
    TrainJobTemplate,
)

__all__ = [
    "DATASET_PATH",
    "MODEL_PATH",
    "BuiltinTrainer",
    "ContainerBackendConfig",
    "CustomTrainer",
    "CustomTrainerContainer",
    "DataCacheInitializer",
    "DataFormat",
    "DataType",
    "Event",
    "HuggingFaceDatasetInitializer",
    "HuggingFaceModelInitializer",
    "Initializer",
    "JobFailedError",
    "KubernetesBackendConfig",
    "LocalProcessBackendConfig",
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
    "TrainerClient",
    "TrainerType",
    "TrainingRuntimeSource",
    "get_tpu_num_nodes",
    "update_trainjob_status",
]
