"""The optimizer backend base class (`kubeflow.optimizer.backends.base.RuntimeBackend`)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from typing import Any

from ...types.types import Event, TrainJobTemplate
from ..constants import constants
from ..types.algorithm_types import RandomSearch
from ..types.optimization_types import Objective, OptimizationJob, Result, TrialConfig


class RuntimeBackend(abc.ABC):
    """What every optimizer backend does (the SDK's methods and signatures)."""

    @abc.abstractmethod
    def optimize(
        self,
        trial_template: TrainJobTemplate,
        *,
        search_space: dict[str, Any],
        trial_config: TrialConfig | None = None,
        objectives: list[Objective] | None = None,
        algorithm: RandomSearch | None = None,
    ) -> str:
        """Start an OptimizationJob; return its name."""
        raise NotImplementedError()

    @abc.abstractmethod
    def list_jobs(self) -> list[OptimizationJob]:
        """Every OptimizationJob."""
        raise NotImplementedError()

    @abc.abstractmethod
    def get_job(self, name: str) -> OptimizationJob:
        """One OptimizationJob, with its trials."""
        raise NotImplementedError()

    @abc.abstractmethod
    def get_job_logs(
        self,
        name: str,
        trial_name: str | None,
        follow: bool,
    ) -> Iterator[str]:
        """Log lines of one trial (the best, or the first, when none is named)."""
        raise NotImplementedError()

    @abc.abstractmethod
    def get_best_results(self, name: str) -> Result | None:
        """The best trial's parameters and metrics, or None."""
        raise NotImplementedError()

    @abc.abstractmethod
    def wait_for_job_status(
        self,
        name: str,
        status: set[str] = {constants.OPTIMIZATION_JOB_COMPLETE},  # noqa: B006 (the SDK's)
        timeout: int = 3600,
        polling_interval: int = 2,
        callbacks: list[Callable[[OptimizationJob], None]] | None = None,
    ) -> OptimizationJob:
        """Wait until the OptimizationJob reaches one of `status`."""
        raise NotImplementedError()

    @abc.abstractmethod
    def get_job_events(self, name: str) -> list[Event]:
        """What happened to the OptimizationJob and its trials."""
        raise NotImplementedError()

    @abc.abstractmethod
    def delete_job(self, name: str) -> None:
        """Delete the OptimizationJob and its trials."""
        raise NotImplementedError()
