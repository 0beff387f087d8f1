"""Progress of running Kubernetes jobs from their log markers, for clusters without trainerStatus.

Without the Trainer's `TrainJobStatus` gate a TrainJob has no `status.trainerStatus`; the
progress a job reports is then only in its `##kf-jupyter:report` log lines. The jobs route reads
the last one from rank 0's recent log (a short tail), at most once per job per TTL, and never
fails because of it (a failed read is no progress).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from ..constants import LAUNCHER_JOB, NODE_JOB
from ..report import parse_report
from ..types import RUNNING, TrainerStatus, TrainJob

#: Lines of rank 0's log read for the last report marker.
TAIL_LINES = 50


def status_from_lines(lines: Iterable[str]) -> TrainerStatus | None:
    """The progress of the last report marker among `lines` (as `report()` would post it)."""
    last = None
    for line in lines:
        record = parse_report(line)
        if record is not None and (record["progress"] is not None or record["metrics"]):
            last = record
    if last is None:
        return None
    progress = last["progress"]
    percent = None if progress is None else int(min(1.0, max(0.0, float(progress))) * 100)
    metrics = {k: str(v)[:64] for k, v in last["metrics"].items() if 0 < len(k) <= 64}
    if last["step"] is not None:
        metrics["step"] = str(last["step"])
    return TrainerStatus(progress_percentage=percent, metrics=metrics)


def rank0_step(job: TrainJob) -> str:
    """The step whose log carries rank 0's output: the MPI launcher, else `node-0`."""
    names = {s.name for s in job.steps}
    return LAUNCHER_JOB if LAUNCHER_JOB in names else f"{NODE_JOB}-0"


def read_progress(client: Any, job: TrainJob, tail_lines: int = TAIL_LINES) -> TrainerStatus | None:
    """Blocking: the last report marker of rank 0's log tail; None on any error (never raises)."""
    try:
        records = client.iter_log_records(job.name, step=rank0_step(job), tail_lines=tail_lines)
        lines = [rec.line for rec in records]  # raw: get_job_logs hides the report lines
    except Exception:
        return None
    return status_from_lines(lines)


def wants_progress(job: TrainJob) -> bool:
    """A running Kubernetes job that reports no trainerStatus."""
    return job.backend == "kubernetes" and job.status == RUNNING and job.trainer_status is None


class ProgressCache:
    """What was read per job and when: a job is read again only once its entry is `ttl` old.

    `claim` marks the jobs to read now before they are read, so concurrent requests do not read
    the same job twice.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str | None, str], tuple[float, TrainerStatus | None]] = {}

    @staticmethod
    def key(job: TrainJob) -> tuple[str | None, str]:
        """Cache key of a job."""
        return (job.namespace, job.name)

    def claim(self, jobs: list[TrainJob], now: float, ttl: float) -> list[TrainJob]:
        """The jobs whose entry is missing or `ttl` old; their entries now count as fresh."""
        out = []
        with self._lock:
            for key in [k for k, (t, _) in self._entries.items() if now - t > 10 * ttl]:
                del self._entries[key]  # jobs no longer listed as running
            for job in jobs:
                entry = self._entries.get(self.key(job))
                if entry is None or now - entry[0] >= ttl:
                    self._entries[self.key(job)] = (now, entry[1] if entry else None)
                    out.append(job)
        return out

    def put(self, job: TrainJob, now: float, status: TrainerStatus | None) -> None:
        """Store what was read for `job` (None: nothing, or the read failed)."""
        with self._lock:
            self._entries[self.key(job)] = (now, status)

    def get(self, job: TrainJob) -> TrainerStatus | None:
        """The last progress read for `job`, if any."""
        with self._lock:
            entry = self._entries.get(self.key(job))
        return entry[1] if entry else None
