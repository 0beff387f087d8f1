"""The optimizer on a Kubernetes cluster (`kubeflow.optimizer.backends.kubernetes.backend`).

Issue 25's cluster part (an `OptimizationJob`, or trials run as TrainJobs by the client's sweep
engine) builds on this class; until it lands, creating it says so in one paragraph.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .....backends.kubernetes.config import KubernetesBackendConfig
from .....errors import ValidationError
from ....backends.kubernetes.backend import KubernetesBackend as TrainerBackend
from ....types.types import Event, TrainJobTemplate
from ...constants import constants
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

__all__ = [
    "KubernetesBackend",
    "KubernetesBackendConfig",
    "Metric",
    "RandomSearch",
    "TrainerBackend",
    "Trial",
]


class KubernetesBackend(RuntimeBackend):
    """Sweeps on a cluster (not available yet: see the module docstring)."""

    def __init__(self, cfg: KubernetesBackendConfig) -> None:
        raise ValidationError(
            "Sweeps on a Kubernetes cluster are not available in this version yet. Run the "
            "sweep locally with OptimizerClient() (or OptimizerClient(LocalProcessBackendConfig()))."
        )

    def optimize(
        self,
        trial_template: TrainJobTemplate,
        *,
        search_space: dict[str, Any],
        trial_config: TrialConfig | None = None,
        objectives: list[Objective] | None = None,
        algorithm: BaseAlgorithm | None = None,
    ) -> str:
        """Start an OptimizationJob; return its name."""
        raise NotImplementedError

    def list_jobs(self) -> list[OptimizationJob]:
        """Every OptimizationJob of the namespace."""
        raise NotImplementedError

    def get_job(self, name: str) -> OptimizationJob:
        """One OptimizationJob."""
        raise NotImplementedError

    def get_job_logs(
        self, name: str, trial_name: str | None = None, follow: bool = False
    ) -> Iterator[str]:
        """A trial's log lines."""
        raise NotImplementedError

    def get_best_results(self, name: str) -> Result | None:
        """The best trial's parameters and metrics."""
        raise NotImplementedError

    def wait_for_job_status(
        self,
        name: str,
        status: set[str] = {constants.OPTIMIZATION_JOB_COMPLETE},  # noqa: B006 (the SDK's)
        timeout: int = 3600,
        polling_interval: int = 2,
        callbacks: list[Callable[[OptimizationJob], None]] | None = None,
    ) -> OptimizationJob:
        """Wait for a status."""
        raise NotImplementedError

    def delete_job(self, name: str) -> None:
        """Delete the OptimizationJob."""
        raise NotImplementedError

    def get_job_events(self, name: str) -> list[Event]:
        """The OptimizationJob's events."""
        raise NotImplementedError
