"""The optimizer on a Kubernetes cluster (`kubeflow.optimizer.backends.kubernetes.backend`).

The Kubeflow SDK 0.5.0 creates a Katib `Experiment` here. kf-jupyter targets Kubeflow Trainer
v2.3.0, which has no `OptimizationJob` API (docs/decisions.md, "OptimizationJob on the
harness"), so each trial is a TrainJob created by the sweep's driver, a detached process on this
machine (`kf_jupyter.sweeps.kubernetes`): the sweep goes on when the kernel restarts, and its
record is a ConfigMap in the namespace, so any process with the same kubeconfig and namespace
lists, follows, cancels and deletes it. Where the cluster serves the (controller-less)
`OptimizationJob` API of later Trainer builds, the sweep's first event says so and the trials
still run from here. docs/sweeps.md, "On a cluster".
"""

from __future__ import annotations

from typing import Any

from .....backends.kubernetes.config import KubernetesBackendConfig
from .....sweeps.kubernetes import KubernetesSweeps
from ....backends.kubernetes.backend import KubernetesBackend as TrainerBackend
from ....types.types import Event, TrainJobTemplate
from ...types.algorithm_types import BaseAlgorithm, RandomSearch
from ...types.optimization_types import (
    Metric,
    Objective,
    OptimizationJob,
    Result,
    Trial,
    TrialConfig,
)
from ..base import RuntimeBackend
from ..sweeps import SweepsBackend

# The names the SDK's module has (its imports included), as kf_jupyter.sdk mirrors them.
__all__ = [
    "BaseAlgorithm",
    "Event",
    "KubernetesBackend",
    "KubernetesBackendConfig",
    "Metric",
    "Objective",
    "OptimizationJob",
    "RandomSearch",
    "Result",
    "RuntimeBackend",
    "TrainJobTemplate",
    "TrainerBackend",
    "Trial",
    "TrialConfig",
]


class KubernetesBackend(SweepsBackend):
    """The optimizer's `RuntimeBackend` on a Kubeflow Trainer cluster (see the module docstring).

    `cfg`: a `KubernetesBackendConfig` (kubeconfig, context, namespace), kf-jupyter's or the
    Kubeflow SDK's.
    """

    #: The record is a ConfigMap: read once a second while waiting.
    read_seconds = 1.0

    def __init__(self, cfg: Any) -> None:
        self.trainer = TrainerBackend(cfg)
        self.config: KubernetesBackendConfig = self.trainer.client.backend.config
        self.sweeps = KubernetesSweeps(self.config, client=self.trainer.client)
        self.namespace: str = self.sweeps.namespace
