"""JobHandle: what `-o VAR` stores (name, backend, status, logs, wait, result)."""

from __future__ import annotations

from typing import Any

from ..types import COMPLETE, FAILED, LogRecord, TrainJob

_UNSET = object()


class JobHandle:
    """A submitted job: `.name`, `.backend`, `.status`, `.logs()`, `.wait()`, `.result`."""

    def __init__(self, client: Any, name: str, backend: str, runtime: str = "") -> None:
        self.client = client
        self.name = name
        self.backend = backend
        self.runtime = runtime
        self._result: Any = _UNSET

    @property
    def job(self) -> TrainJob:
        """The job as the backend sees it now."""
        return self.client.get_job(self.name)

    @property
    def status(self) -> str:
        """`Created`, `Running`, `Complete` or `Failed`."""
        return self.job.status

    def logs(self, step: str | None = None, tail: int | None = None) -> list[str]:
        """The log lines a person reads so far (tagged `[rank-N]` when the job has several
        processes; kf-jupyter's protocol lines are in `records()`)."""
        return list(self.client.get_job_logs(self.name, step=step, tail_lines=tail))

    def records(self, step: str | None = None) -> list[LogRecord]:
        """The raw log records so far, kf-jupyter's own lines included (reports, result)."""
        return list(self.client.iter_log_records(self.name, step=step))

    def wait(self, timeout: float = 600) -> TrainJob:
        """Block until the job is Complete or Failed; return it."""
        return self.client.wait_for_job_status(
            self.name, frozenset({COMPLETE, FAILED}), timeout=timeout
        )

    @property
    def result(self) -> Any:
        """The function's return value on global rank 0 (waits for the job to complete)."""
        if self._result is _UNSET:
            self.wait()
            self._result = self.client.get_job_result(self.name)
        return self._result

    def delete(self) -> None:
        """Delete the job (stops its processes or pods)."""
        self.client.delete_job(self.name)

    def __repr__(self) -> str:
        return f"<JobHandle {self.name} on {self.backend}>"
