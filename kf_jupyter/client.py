"""TrainerClient: one facade over any backend (local by default)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

from .backends.base import Backend, StatusCallback
from .backends.kubernetes.config import KubernetesBackendConfig
from .backends.local.config import LocalBackendConfig
from .config import RuntimeConfig
from .errors import ValidationError
from .runtimes import Runtime
from .trainers import BaseTrainer
from .types import COMPLETE, Event, LogRecord, TrainJob


def make_backend(config: LocalBackendConfig | KubernetesBackendConfig | None) -> Backend:
    """Create the backend for a config (kubernetes is imported only for its config)."""
    if config is None or isinstance(config, LocalBackendConfig):
        from .backends.local.backend import LocalBackend

        return LocalBackend(config or LocalBackendConfig())
    if isinstance(config, KubernetesBackendConfig):
        from .backends.kubernetes.backend import KubernetesBackend

        return KubernetesBackend(config)
    raise ValidationError(
        f"backend_config must be LocalBackendConfig or KubernetesBackendConfig, got "
        f"{type(config).__name__}."
    )


class TrainerClient:
    """Train, list, follow and delete jobs; same names and meanings as the Kubeflow SDK."""

    def __init__(
        self, backend_config: LocalBackendConfig | KubernetesBackendConfig | None = None
    ) -> None:
        self.backend: Backend = make_backend(backend_config)

    @property
    def backend_name(self) -> str:
        """`local` or `kubernetes`."""
        return self.backend.name

    def list_runtimes(self, framework: str | None = None) -> list[Runtime]:
        """Runtimes, optionally those of one framework label."""
        return self.backend.list_runtimes(framework)

    def get_runtime(self, name: str) -> Runtime:
        """One runtime by name."""
        return self.backend.get_runtime(name)

    def train(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> str:
        """Submit the trainer's function as a job; return the job name."""
        return self.backend.train(trainer, runtime, runtime_config, options)

    def dry_run(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> dict[str, Any]:
        """What train() would submit, submitting nothing: a dict (the manifest and, locally,
        the launch plan), shown in a notebook as a short summary with the manifest folded."""
        from .dryrun import DryRun

        plan = self.backend.dry_run(trainer, runtime, runtime_config, options)
        return DryRun(plan, trainer, runtime_config)

    def list_jobs(self) -> list[TrainJob]:
        """Every job."""
        return self.backend.list_jobs()

    def get_job(self, name: str) -> TrainJob:
        """One job."""
        return self.backend.get_job(name)

    def get_job_logs(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
    ) -> Iterator[str]:
        """Log lines (a generator; with follow=True lines arrive while the job runs)."""
        return self.backend.get_job_logs(name, step=step, follow=follow, tail_lines=tail_lines)

    def iter_log_records(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[LogRecord]:
        """Log lines with their source (rank or pod); a follow ends soon after `stop` is set."""
        if stop is None:
            return self.backend.iter_log_records(
                name, step=step, follow=follow, tail_lines=tail_lines
            )
        return self.backend.iter_log_records(
            name, step=step, follow=follow, tail_lines=tail_lines, stop=stop
        )

    def wait_for_job_status(
        self,
        name: str,
        status: set[str] | frozenset[str] = frozenset({COMPLETE}),
        timeout: float = 600,
        callbacks: list[StatusCallback] | None = None,
    ) -> TrainJob:
        """Wait until the job reaches a status in `status`."""
        return self.backend.wait_for_job_status(name, status, timeout, callbacks)

    def suspend_job(self, name: str) -> None:
        """Suspend a job: stop its processes (pods) and keep the job; `resume_job` restarts it.

        On a cluster this sets the TrainJob's `spec.suspend` (the Trainer deletes the pods);
        locally the job's processes are stopped, its folder and logs kept.
        """
        self._lifecycle("suspend_job")(name)

    def resume_job(self, name: str) -> None:
        """Resume a suspended job (its processes or pods start again)."""
        self._lifecycle("resume_job")(name)

    def _lifecycle(self, method: str) -> Any:
        fn = getattr(self.backend, method, None)
        if not callable(fn):
            raise ValidationError(
                f"The {self.backend.name} backend cannot {method.split('_')[0]} jobs; use the "
                "local or kubernetes backend."
            )
        return fn

    def delete_job(self, name: str) -> None:
        """Delete a job and stop what it runs."""
        self.backend.delete_job(name)

    def get_job_events(self, name: str) -> list[Event]:
        """What happened to the job."""
        return self.backend.get_job_events(name)

    def get_job_result(self, name: str) -> Any:
        """The training function's return value on global rank 0."""
        return self.backend.get_job_result(name)
