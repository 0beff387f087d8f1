"""Kubeflow SDK 0.5.0 compatibility: run SDK code on kf-jupyter by changing only the import.

    from kubeflow.trainer import TrainerClient, CustomTrainer      # before
    from kf_jupyter.sdk import TrainerClient, CustomTrainer        # after

`TrainerClient()` uses kf-jupyter's local backend (every node a local process group, with the
environment the cluster would give it); `TrainerClient(KubernetesBackendConfig(...))` submits
to a cluster. Options live in `kf_jupyter.sdk.options`, as in `kubeflow.trainer.options`.
See docs/notebook.md, "Running an existing Kubeflow SDK snippet".
"""

from __future__ import annotations

from ..backends.kubernetes.config import KubernetesBackendConfig
from .client import JobFailedError, TrainerClient
from .configs import ContainerBackendConfig, LocalProcessBackendConfig
from .types import (
    DATASET_PATH,
    MODEL_PATH,
    CustomTrainer,
    CustomTrainerContainer,
    Event,
    HuggingFaceDatasetInitializer,
    HuggingFaceModelInitializer,
    Initializer,
    Runtime,
    RuntimeKind,
    RuntimeTrainer,
    S3DatasetInitializer,
    S3ModelInitializer,
    Step,
    TrainerType,
    TrainJob,
)
from .utils import get_tpu_num_nodes, update_trainjob_status

__all__ = [
    "DATASET_PATH",
    "MODEL_PATH",
    "ContainerBackendConfig",
    "CustomTrainer",
    "CustomTrainerContainer",
    "Event",
    "HuggingFaceDatasetInitializer",
    "HuggingFaceModelInitializer",
    "Initializer",
    "JobFailedError",
    "KubernetesBackendConfig",
    "LocalProcessBackendConfig",
    "Runtime",
    "RuntimeKind",
    "RuntimeTrainer",
    "S3DatasetInitializer",
    "S3ModelInitializer",
    "Step",
    "TrainJob",
    "TrainerClient",
    "TrainerType",
    "get_tpu_num_nodes",
    "update_trainjob_status",
]
