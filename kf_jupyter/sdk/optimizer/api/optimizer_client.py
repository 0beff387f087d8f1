"""`OptimizerClient` with the Kubeflow SDK 0.5.0's methods, signatures and return types.

SDK optimizer code runs on kf-jupyter by changing only its imports (`kubeflow.optimizer` ->
`kf_jupyter.sdk.optimizer`, `kubeflow.trainer` -> `kf_jupyter.sdk`). The backend config picks
the backend as kf-jupyter's `TrainerClient` does: `LocalProcessBackendConfig`, a
`LocalBackendConfig` or None -> the local backend (each trial a local job, started warm);
`KubernetesBackendConfig` -> a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ....backends.kubernetes.config import KubernetesBackendConfig
from ....backends.local.config import LocalBackendConfig
from ....errors import ValidationError
from ...backends.localprocess.types import LocalProcessBackendConfig
from ...types.types import Event, TrainJobTemplate
from ..backends.base import RuntimeBackend
from ..backends.kubernetes.backend import KubernetesBackend
from ..constants import constants
from ..types.algorithm_types import BaseAlgorithm
from ..types.optimization_types import Objective, OptimizationJob, Result, TrialConfig


def _backend(config: Any) -> RuntimeBackend:
    kind = type(config).__name__
    if (
        config is None
        or kind == "LocalProcessBackendConfig"
        or isinstance(config, LocalBackendConfig)
    ):
        from ..backends.localprocess.backend import LocalProcessBackend

        return LocalProcessBackend(config if isinstance(config, LocalBackendConfig) else None)
    if kind == "KubernetesBackendConfig":
        return KubernetesBackend(config)
    raise ValidationError(
        f"Invalid backend config '{config}': use LocalProcessBackendConfig() or None for local "
        "sweeps, KubernetesBackendConfig(...) for a cluster."
    )


class OptimizerClient:
    """The Kubeflow SDK's `OptimizerClient`, on kf-jupyter's backends (docs/sweeps.md)."""

    def __init__(
        self,
        backend_config: KubernetesBackendConfig | LocalProcessBackendConfig | None = None,
    ) -> None:
        """`backend_config`: None or `LocalProcessBackendConfig()` (or kf-jupyter's
        `LocalBackendConfig(...)`) for local sweeps; `KubernetesBackendConfig` for a cluster."""
        self.backend = _backend(backend_config)

    def optimize(
        self,
        trial_template: TrainJobTemplate,
        *,
        trial_config: TrialConfig | None = None,
        search_space: dict[str, Any],
        objectives: list[Objective] | None = None,
        algorithm: BaseAlgorithm | None = None,
    ) -> str:
        """Start a sweep of `trial_template` over `search_space`; return its name at once.

        Each trial runs the template's function with the trial's parameters as keyword
        arguments (strings, as on a cluster) and as `KUBEFLOW_TRAINER_OPT_<NAME>` environment
        variables; it reports the objective by printing `loss=<value>`, calling
        `kf_jupyter.report(loss=...)`, or through its trainerStatus. Defaults: 10 trials, one at
        a time, minimize `loss`, random search.
        """
        return self.backend.optimize(
            trial_template=trial_template,
            trial_config=trial_config,
            objectives=objectives,
            search_space=search_space,
            algorithm=algorithm,
        )

    def list_jobs(self) -> list[OptimizationJob]:
        """Every OptimizationJob (locally: every sweep of the state directory)."""
        return self.backend.list_jobs()

    def get_job(self, name: str) -> OptimizationJob:
        """One OptimizationJob, with its trials (`trials[i].trainjob.name` is the trial's job)."""
        return self.backend.get_job(name=name)

    def get_job_logs(
        self,
        name: str,
        trial_name: str | None = None,
        follow: bool = False,
    ) -> Iterator[str]:
        """Log lines of a trial: `trial_name`, else the best so far, else the first."""
        return self.backend.get_job_logs(name=name, trial_name=trial_name, follow=follow)

    def get_best_results(self, name: str) -> Result | None:
        """The best trial's `Result(parameters, metrics)`, or None while none succeeded."""
        return self.backend.get_best_results(name=name)

    def wait_for_job_status(
        self,
        name: str,
        status: set[str] = {constants.OPTIMIZATION_JOB_COMPLETE},  # noqa: B006 (the SDK's)
        timeout: int = 3600,
        polling_interval: int = 2,
        callbacks: list[Callable[[OptimizationJob], None]] | None = None,
    ) -> OptimizationJob:
        """Wait until the OptimizationJob reaches one of `status` (Created, Running, Complete,
        Failed). Raises RuntimeError if it fails instead, TimeoutError after `timeout` s."""
        return self.backend.wait_for_job_status(
            name=name,
            status=status,
            timeout=timeout,
            polling_interval=polling_interval,
            callbacks=callbacks,
        )

    def delete_job(self, name: str) -> None:
        """Delete the OptimizationJob: cancel it if it runs, delete its trials' jobs."""
        return self.backend.delete_job(name=name)

    def get_job_events(self, name: str) -> list[Event]:
        """Events of the OptimizationJob and its trials, oldest first."""
        return self.backend.get_job_events(name=name)

    def cancel_job(self, name: str) -> OptimizationJob:
        """kf-jupyter: stop the sweep; finished trials and their results are kept, running ones
        are cancelled (status `Failed`, reason `Cancelled`)."""
        cancel = getattr(self.backend, "cancel_job", None)
        if not callable(cancel):
            raise ValidationError("This backend cannot cancel an OptimizationJob; delete it.")
        return cancel(name)
