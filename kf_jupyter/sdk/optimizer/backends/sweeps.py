"""What every optimizer backend built on the sweep engine shares (`kf_jupyter.sweeps`).

`SweepsBackend` implements the SDK's `RuntimeBackend` methods on two things a subclass sets in
its `__init__`: `self.trainer`, the SDK trainer backend the trials run on (a `KFBackend`), and
`self.sweeps`, the backend's sweep store (`LocalSweeps`, `KubernetesSweeps`: `start`, `read`,
`list`, `cancel`, `delete`). `new_name()` names sweeps; `read_seconds` is how often
`wait_for_job_status` reads the record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from ....errors import JobNotFoundError, WaitTimeoutError
from ....sweeps import engine as eng
from ....sweeps.local import new_name
from ...client import JobFailedError
from ...types.types import Event, TrainJob, TrainJobTemplate
from ...views import placeholder_runtime
from ..constants import constants
from ..types.algorithm_types import BaseAlgorithm
from ..types.optimization_types import Objective, OptimizationJob, Result, TrialConfig
from . import records
from .base import RuntimeBackend


class SweepsBackend(RuntimeBackend):
    """The SDK optimizer's methods on `self.trainer` and `self.sweeps` (module docstring)."""

    trainer: Any
    sweeps: Any
    #: How often `wait_for_job_status` reads the sweep's record (seconds).
    read_seconds = 0.2

    # -- start ----------------------------------------------------------------------------------

    def optimize(
        self,
        trial_template: TrainJobTemplate,
        *,
        search_space: dict[str, Any],
        trial_config: TrialConfig | None = None,
        objectives: list[Objective] | None = None,
        algorithm: BaseAlgorithm | None = None,
    ) -> str:
        """Start the sweep (its driver runs the trials); return its name at once."""
        spec = records.sweep_spec(new_name(), search_space, trial_config, objectives, algorithm)
        template = records.trial_template(self.trainer, trial_template)
        return self.sweeps.start(spec, template)

    # -- read -----------------------------------------------------------------------------------

    def _trainjob_of(self, runtimes: dict[str, Any]) -> Callable[[dict[str, Any]], TrainJob]:
        def trainjob(trial: dict[str, Any]) -> TrainJob:
            try:
                return self.trainer._job(self.trainer.client.get_job(trial["name"]), runtimes)
            except JobNotFoundError:  # deleted by hand: what the record knows
                return TrainJob(
                    name=trial["name"],
                    runtime=placeholder_runtime("", "", self.trainer.backend_name),
                    steps=[],
                    num_nodes=1,
                    creation_timestamp=None,
                    status=trial.get("job_status") or "Unknown",
                )

        return trainjob

    def _job(self, record: dict[str, Any], runtimes: dict[str, Any] | None = None) -> Any:
        if runtimes is None:
            runtimes = self.trainer._runtimes()
        return records.to_optimization_job(record, self._trainjob_of(runtimes))

    def list_jobs(self) -> list[OptimizationJob]:
        """Every sweep (of the state directory; of the namespace on a cluster), oldest first."""
        found = self.sweeps.list()
        runtimes = self.trainer._runtimes() if found else {}
        return [self._job(r, runtimes) for r in found]

    def get_job(self, name: str) -> OptimizationJob:
        """One sweep, with every started trial (`trials[i].trainjob` is its job)."""
        return self._job(self.sweeps.read(name))

    def get_sweep_record(self, name: str) -> dict[str, Any]:
        """kf-jupyter: the sweep's raw record (each trial's curve under `history`)."""
        return self.sweeps.read(name, curves=True)

    def get_job_logs(
        self,
        name: str,
        trial_name: str | None = None,
        follow: bool = False,
    ) -> Iterator[str]:
        """A trial's log lines (node-0, as the SDK reads a trial's primary container): the
        named trial, else the best so far, else the first."""
        record = self.sweeps.read(name)
        if trial_name is None:
            best = eng.best_trial(record)
            started = [t for t in record["trials"] if t.get("submitted")]
            if best is not None:
                trial_name = best["name"]
            elif started:
                trial_name = started[0]["name"]
            else:
                return iter(())
        return self.trainer.get_job_logs(trial_name, follow=follow)

    def get_best_results(self, name: str) -> Result | None:
        """The best trial's parameters and metrics (None while none has succeeded)."""
        return records.best_result(self.sweeps.read(name))

    def wait_for_job_status(
        self,
        name: str,
        status: set[str] = {constants.OPTIMIZATION_JOB_COMPLETE},  # noqa: B006 (the SDK's)
        timeout: int = 3600,
        polling_interval: int = 2,
        callbacks: list[Callable[[OptimizationJob], None]] | None = None,
    ) -> OptimizationJob:
        """Wait until the sweep reaches one of `status` (a RuntimeError if it fails instead,
        TimeoutError after `timeout`). The record is read every `read_seconds`, whatever
        `polling_interval`; callbacks get the OptimizationJob each time it changes."""
        wanted = records.validate_wait(status, timeout, polling_interval)
        deadline = time.monotonic() + timeout
        last = None
        while True:
            record = self.sweeps.read(name)
            stamp = (record.get("updated"), record["status"])
            if callbacks and stamp != last:
                job = self._job(record)
                for cb in callbacks:
                    cb(job)
            last = stamp
            if record["status"] in wanted:
                return self._job(record)
            if record["status"] == constants.OPTIMIZATION_JOB_FAILED:
                raise JobFailedError(
                    f"{constants.OPTIMIZATION_JOB_KIND} {name} is Failed: "
                    f"{record.get('reason')}: {record.get('message')}"
                )
            if time.monotonic() >= deadline:
                raise WaitTimeoutError(
                    f"Timeout waiting for {constants.OPTIMIZATION_JOB_KIND} {name} to reach "
                    f"status: {sorted(wanted)} (it is {record['status']})."
                )
            time.sleep(self.read_seconds)

    def get_job_events(self, name: str) -> list[Event]:
        """The sweep's events and its trials' job events, oldest first."""
        record = self.sweeps.read(name)
        events = records.events_of(record)
        for t in record["trials"]:
            if t.get("submitted"):
                try:
                    events += self.trainer.get_job_events(t["name"])
                except JobNotFoundError:
                    continue
        events.sort(key=lambda e: e.event_time.timestamp() if e.event_time else 0.0)
        return events

    def delete_job(self, name: str) -> None:
        """Cancel the sweep if it runs, delete its trials' jobs and its record."""
        self.sweeps.delete(name)

    def cancel_job(self, name: str) -> OptimizationJob:
        """kf-jupyter: stop the sweep (no new trial; running ones cancelled, results kept)."""
        return self._job(self.sweeps.cancel(name))
