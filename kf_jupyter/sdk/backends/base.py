"""The SDK's backend protocol (`kubeflow.trainer.backends.base.RuntimeBackend`)."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from typing import Any

from ..types.types import Event, Initializer, Runtime, TrainJob


class RuntimeBackend(abc.ABC):
    """What every backend of `TrainerClient` does; options receive the backend as `backend`.

    kf-jupyter's three (`KubernetesBackend`, `LocalProcessBackend`, `ContainerBackend`) all run
    on kf-jupyter's own backends (`kf_jupyter.backends`).
    """

    @abc.abstractmethod
    def list_runtimes(self) -> list[Runtime]:
        """Every training runtime."""

    @abc.abstractmethod
    def get_runtime(self, name: str) -> Runtime:
        """One runtime by name."""

    @abc.abstractmethod
    def get_runtime_packages(self, runtime: Runtime) -> Any:
        """Print the Python packages a job on `runtime` sees."""

    @abc.abstractmethod
    def train(
        self,
        runtime: str | Runtime | None = None,
        initializer: Initializer | None = None,
        trainer: Any = None,
        options: list[Any] | None = None,
    ) -> str:
        """Submit a job; return its name."""

    @abc.abstractmethod
    def list_jobs(self, runtime: Runtime | None = None) -> list[TrainJob]:
        """Every job (of `runtime`, when given)."""

    @abc.abstractmethod
    def get_job(self, name: str) -> TrainJob:
        """One job."""

    @abc.abstractmethod
    def get_job_logs(self, name: str, follow: bool = False, step: str = "node-0") -> Iterator[str]:
        """The log lines of one step."""

    @abc.abstractmethod
    def get_job_events(self, name: str) -> list[Event]:
        """What happened to the job."""

    @abc.abstractmethod
    def wait_for_job_status(
        self,
        name: str,
        status: set[str] | frozenset[str] = frozenset({"Complete"}),
        timeout: int = 600,
        polling_interval: int = 2,
        callbacks: list[Callable[[TrainJob], None]] | None = None,
    ) -> TrainJob:
        """Wait until the job reaches one of `status`."""

    @abc.abstractmethod
    def delete_job(self, name: str) -> None:
        """Delete the job."""
