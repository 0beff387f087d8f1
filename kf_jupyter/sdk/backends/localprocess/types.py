"""The SDK's local-process backend types (`kubeflow.trainer.backends.localprocess.types`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ...types.types import Runtime, RuntimeTrainer
from .job import LocalJob


@dataclass(kw_only=True)
class LocalProcessBackendConfig:
    """The SDK's local-process backend config; kf-jupyter's local backend runs the job.

    `cleanup_venv` is accepted for compatibility: kf-jupyter builds no per-job venv (packages
    go into a cached layered environment, see docs/local-backend.md).
    """

    cleanup_venv: bool = True


@dataclass
class LocalRuntimeTrainer(RuntimeTrainer):
    """A runtime's trainer on the local backend, with the packages it needs."""

    packages: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class LocalBackendStep:
    """One step of a job of the SDK's local backend: its name and its `LocalJob`."""

    step_name: str
    job: LocalJob


@dataclass(kw_only=True)
class LocalBackendJobs:
    """A job of the SDK's local backend: its steps, runtime and times."""

    steps: list[LocalBackendStep] | None = field(default_factory=list)
    runtime: Runtime | None = None
    name: str
    created: datetime | None = None
    completed: datetime | None = None


__all__ = [
    "LocalBackendJobs",
    "LocalBackendStep",
    "LocalJob",
    "LocalProcessBackendConfig",
    "LocalRuntimeTrainer",
]
