"""Training progress (`status.trainerStatus`, KEP-2779): parse it, and say it in a few words.

Pure functions, used by both backends (a TrainJob's `status.trainerStatus` on a cluster, the
job folder's `trainer-status.json` locally: the same JSON) and by every view (monitor,
`%kf_jobs`, the server extension).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from .types import TrainerStatus

# The variables the Trainer's TrainJobStatus plugin puts into every trainer container.
SERVER_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
STATUS_ENV_VARS = (SERVER_URL_ENV, CA_CERT_ENV, TOKEN_ENV)


def status_path(namespace: str, name: str) -> str:
    """The path of a TrainJob's status endpoint (the Trainer's `StatusUrl`)."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time from the API (`2026-01-02T03:04:05Z`) as an aware datetime, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_trainer_status(obj: Any) -> TrainerStatus | None:
    """A `trainerStatus` object (camelCase JSON, as the API serves it) as a TrainerStatus.

    None when there is none; fields of the wrong type are left out, never raised on.
    """
    if not isinstance(obj, dict) or not obj:
        return None
    metrics: dict[str, str] = {}
    for m in obj.get("metrics") or []:
        if isinstance(m, dict) and isinstance(m.get("name"), str):
            metrics[m["name"]] = str(m.get("value", ""))
    return TrainerStatus(
        progress_percentage=_int(obj.get("progressPercentage")),
        estimated_remaining_seconds=_int(obj.get("estimatedRemainingSeconds")),
        metrics=metrics,
        last_updated_time=parse_time(obj.get("lastUpdatedTime")),
    )


def eta_text(seconds: int | None) -> str:
    """`42s`, `3m 05s`, `2h 10m`: a remaining time for a narrow column ('' when unknown)."""
    if seconds is None or seconds < 0:
        return ""
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def progress_label(percent: int | None, eta_seconds: int | None, job_status: str | None) -> str:
    """`45% · ETA 3m 05s`, the one way every view writes a job's progress ('' when none).

    The ETA shows only while the job runs and has work left: never on a suspended or ended
    job, never `100% · ETA 0s`.
    """
    parts = []
    if percent is not None:
        parts.append(f"{percent}%")
    running = job_status in (None, "Running")
    if running and (percent is None or percent < 100) and eta_seconds:
        eta = eta_text(eta_seconds)
        if eta:
            parts.append(f"ETA {eta}")
    return " · ".join(parts)


def shape_text(num_nodes: int | None, num_proc_per_node: Any) -> str:
    """`1 node × 2 processes`: a job's shape, written the same way in every view ('-' unknown)."""
    if num_nodes is None:
        return "-"
    text = f"{num_nodes} node{'s' if num_nodes != 1 else ''}"
    if isinstance(num_proc_per_node, int) and not isinstance(num_proc_per_node, bool):
        n = num_proc_per_node
        text += f" × {n} process{'es' if n != 1 else ''}"
    elif isinstance(num_proc_per_node, str) and num_proc_per_node.isdigit():
        n = int(num_proc_per_node)
        text += f" × {n} process{'es' if n != 1 else ''}"
    return text


def progress_text(status: TrainerStatus | None, job_status: str | None = None) -> str:
    """A job's recorded progress (`status.trainerStatus`) as `progress_label` writes it."""
    if status is None:
        return ""
    return progress_label(
        status.progress_percentage, status.estimated_remaining_seconds, job_status
    )


def numeric_metrics(status: TrainerStatus | None) -> dict[str, float]:
    """The metrics whose value is a finite number (what can be charted)."""
    out: dict[str, float] = {}
    for name, value in (status.metrics if status else {}).items():
        try:
            number = float(value)
        except ValueError:
            continue
        if math.isfinite(number):
            out[name] = number
    return out
