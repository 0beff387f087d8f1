"""What backends return: jobs, steps, events and log records (plain dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

CREATED = "Created"
RUNNING = "Running"
COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"
STATUSES = (CREATED, RUNNING, SUSPENDED, COMPLETE, FAILED)
TERMINAL = frozenset({COMPLETE, FAILED})


@dataclass
class Step:
    """One process (local) or pod (kubernetes) of a job."""

    name: str
    status: str
    rank: int | None = None
    exit_code: int | None = None
    pid: int | None = None
    device: str = "cpu"
    pod_name: str | None = None
    device_count: str | None = None


@dataclass(frozen=True)
class TrainerStatus:
    """The training's own progress report: `status.trainerStatus` of a TrainJob (KEP-2779).

    Written by the training code (`kubeflow.trainer.update_trainjob_status`, Transformers'
    Kubeflow callback, `kf_jupyter.report`) to the status endpoint, on a cluster or locally.
    `metrics` maps a metric's name to its value as the trainer sent it (a string).
    """

    progress_percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    metrics: dict[str, str] = field(default_factory=dict)
    last_updated_time: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (ISO 8601 time)."""
        return {
            "progress_percentage": self.progress_percentage,
            "estimated_remaining_seconds": self.estimated_remaining_seconds,
            "metrics": dict(self.metrics),
            "last_updated_time": (
                self.last_updated_time.isoformat() if self.last_updated_time else None
            ),
        }


@dataclass(frozen=True)
class Failure:
    """The root cause of a failed job: the first rank that failed and its exception.

    `source` names where it happened ("Rank 1", or "node-0" when no rank reported);
    `traceback` holds the user's frames only (the runner's and the launcher's are left out).
    """

    source: str
    exc_type: str
    message: str
    traceback: list[str] = field(default_factory=list)

    def headline(self) -> str:
        """`Rank 1: NameError: name 'x' is not defined`."""
        what = f"{self.exc_type}: {self.message}" if self.message else self.exc_type
        return f"{self.source}: {what}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "source": self.source,
            "exc_type": self.exc_type,
            "message": self.message,
            "traceback": list(self.traceback),
        }


@dataclass
class TrainJob:
    """A job as a backend sees it."""

    name: str
    status: str
    backend: str
    runtime: str = ""
    framework: str = ""
    num_nodes: int = 1
    num_proc_per_node: int | None = None
    reason: str = ""
    message: str = ""
    creation_time: datetime | None = None
    completion_time: datetime | None = None
    namespace: str | None = None
    steps: list[Step] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    trainer_status: TrainerStatus | None = None
    failure: Failure | None = None
    #: Local jobs: every node started from the warm pool (True), one started cold (False).
    warm: bool | None = None
    #: Local jobs: the GPUs each node (process) holds, {node: [{index, uuid, name, memory_mib}]}.
    gpus: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: What a Created or Running job is doing before its first line (starting ranks, importing
    #: the framework, waiting at rendezvous; pods' states on Kubernetes): kf_jupyter/phases.py.
    phase: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (ISO 8601 times), as the server extension sends it."""
        return {
            "name": self.name,
            "status": self.status,
            "backend": self.backend,
            "runtime": self.runtime,
            "framework": self.framework,
            "num_nodes": self.num_nodes,
            "num_proc_per_node": self.num_proc_per_node,
            "reason": self.reason,
            "message": self.message,
            "creation_time": self.creation_time.isoformat() if self.creation_time else None,
            "completion_time": self.completion_time.isoformat() if self.completion_time else None,
            "namespace": self.namespace,
            "steps": [
                {"name": s.name, "status": s.status, "rank": s.rank, "exit_code": s.exit_code}
                for s in self.steps
            ],
            "labels": dict(self.labels),
            "trainer_status": self.trainer_status.to_dict() if self.trainer_status else None,
            "failure": self.failure.to_dict() if self.failure else None,
            "warm": self.warm,
            "gpus": {k: [dict(d) for d in v] for k, v in self.gpus.items()},
            "phase": self.phase,
        }


@dataclass
class Event:
    """Something that happened to a job (a Kubernetes Event, or a local state change)."""

    time: datetime | None
    type: str
    reason: str
    message: str
    involved_object: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "time": self.time.isoformat() if self.time else None,
            "type": self.type,
            "reason": self.reason,
            "message": self.message,
            "object": self.involved_object,
        }


class LogRecord(NamedTuple):
    """One log line and where it came from (`rank-N`, `node-N`, `launcher`)."""

    source: str
    line: str

    def tagged(self) -> str:
        """The line with its source in front, as `get_job_logs` yields it for multi-source jobs."""
        return f"[{self.source}] {self.line}"
