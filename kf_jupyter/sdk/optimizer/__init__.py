"""Kubeflow SDK 0.5.0's optimizer on kf-jupyter: hyperparameter sweeps by changing the import.

    from kubeflow.optimizer import OptimizerClient, Search, TrialConfig      # before
    from kf_jupyter.sdk.optimizer import OptimizerClient, Search, TrialConfig  # after

Every module of `kubeflow.optimizer` has its counterpart here (`api.optimizer_client`,
`backends.base`, `types.search_types`, ...), same public names and signatures.
`OptimizerClient()` runs the sweep locally: each trial a local job, started warm, a few at a
time within the machine's CPUs, driven by a process that outlives the kernel. docs/sweeps.md.
"""

from __future__ import annotations

from ...backends.kubernetes.config import KubernetesBackendConfig
from ..backends.localprocess.types import LocalProcessBackendConfig
from ..types.types import TrainJobTemplate
from .api.optimizer_client import OptimizerClient
from .types.algorithm_types import GridSearch, RandomSearch
from .types.optimization_types import (
    Direction,
    Metric,
    Objective,
    OptimizationJob,
    Result,
    Trial,
    TrialConfig,
)
from .types.search_types import Search

__all__ = [
    "Direction",
    "GridSearch",
    "KubernetesBackendConfig",
    "LocalProcessBackendConfig",
    "Metric",
    "Objective",
    "OptimizationJob",
    "OptimizerClient",
    "RandomSearch",
    "Result",
    "Search",
    "TrainJobTemplate",
    "Trial",
    "TrialConfig",
]
