"""The protocol every backend implements, and the parts they share."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

from ..config import RuntimeConfig
from ..runtimes import Runtime
from ..trainers import BaseTrainer
from ..types import Event, LogRecord, TrainJob

StatusCallback = Callable[[TrainJob], None]


@runtime_checkable
class Backend(Protocol):
    """submit, get, list, logs as a generator, wait, delete, events, result, dry-run."""

    name: str

    def list_runtimes(self, framework: str | None = None) -> list[Runtime]:
        """Runtimes this backend can run, optionally only those of one framework label."""
        ...

    def get_runtime(self, name: str) -> Runtime:
        """One runtime by name (RuntimeNotFoundError lists what exists)."""
        ...

    def train(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> str:
        """Submit a job; return its name."""
        ...

    def dry_run(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> dict[str, Any]:
        """What `train` would submit (a TrainJob manifest or a local launch plan), submitting nothing."""
        ...

    def list_jobs(self) -> list[TrainJob]:
        """Every job of this backend (namespace)."""
        ...

    def get_job(self, name: str) -> TrainJob:
        """One job (JobNotFoundError if none)."""
        ...

    def iter_log_records(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[LogRecord]:
        """Log lines with their source; with follow=True, until the job ends or `stop` is set."""
        ...

    def get_job_logs(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
    ) -> Iterator[str]:
        """Log lines, tagged `[source] ` when the job has more than one source."""
        ...

    def wait_for_job_status(
        self,
        name: str,
        status: set[str] | frozenset[str] = frozenset({"Complete"}),
        timeout: float = 600,
        callbacks: list[StatusCallback] | None = None,
    ) -> TrainJob:
        """Block until the job reaches one of `status` (JobFailedError if it fails instead)."""
        ...

    def delete_job(self, name: str) -> None:
        """Delete the job (and stop its processes)."""
        ...

    def get_job_events(self, name: str) -> list[Event]:
        """What happened to the job."""
        ...

    def get_job_result(self, name: str) -> Any:
        """The training function's return value on global rank 0."""
        ...


def tag_records(records: Iterator[LogRecord], multi: bool) -> Iterator[str]:
    """Format records as `get_job_logs` yields them: readable lines only (no protocol lines,
    no torchrun banner, progress bars collapsed), tagged `[source] ` when `multi`."""
    from ..logview import readable

    for rec in readable(records):
        yield rec.tagged() if multi else rec.line


def human_records(
    backend: Backend, name: str, step: str | None, follow: bool, tail_lines: int | None
) -> Iterator[LogRecord]:
    """The records behind `get_job_logs`: a tail counts readable lines only (not protocol lines)."""
    if tail_lines is None or follow:
        return backend.iter_log_records(name, step, follow, tail_lines)
    from ..logview import TAIL_SLACK, last_readable

    raw = backend.iter_log_records(name, step, False, tail_lines + TAIL_SLACK)
    return iter(last_readable(raw, tail_lines))


def resolve_runtime_arg(
    backend: Backend, trainer: BaseTrainer, runtime: Runtime | str | None
) -> Runtime:
    """Turn the `runtime` argument of train()/dry_run() into a Runtime, by the shared rules."""
    from ..runtimes import select_runtime

    if isinstance(runtime, Runtime):
        return runtime
    return select_runtime(trainer, backend.list_runtimes(), name=runtime)
