"""`kf_jupyter.report`: progress and metrics from training code, through the logs and the
Trainer's status endpoint."""

from __future__ import annotations

import json
import math
from typing import Any

from .constants import REPORT_PREFIX


def report(step: int | None = None, progress: float | None = None, **metrics: float) -> None:
    """Report a training step, progress in [0, 1], and named metrics (numbers).

    Prints one line `##kf-jupyter:report {...}` that the job monitor, the lab extension and
    `kf_jupyter.parse_report` read. Where the Trainer's status endpoint exists (every local job;
    a cluster with the TrainJobStatus gate), global rank 0 also posts it there as the job's
    `trainerStatus` (at most once per 5 s, never raising). Works unchanged locally and on a
    cluster (where the job's runner provides this function when kf-jupyter is not installed).
    """
    values: dict[str, float] = {}
    for key, value in metrics.items():
        try:
            values[key] = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"report(): metric {key!r} must be a number, got {value!r}") from None
    record = {"step": step, "progress": progress, "metrics": values}
    print(REPORT_PREFIX + json.dumps(record, allow_nan=True), flush=True)
    from .entrypoint import _kfj_status_report

    _kfj_status_report(step, progress, values)


def parse_report(line: str) -> dict[str, Any] | None:
    """The record of a report line, or None for any other line."""
    idx = line.find(REPORT_PREFIX)
    if idx < 0:
        return None
    try:
        record = json.loads(line[idx + len(REPORT_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("metrics", {}), dict):
        return None
    metrics = {
        k: float(v)
        for k, v in (record.get("metrics") or {}).items()
        if isinstance(v, int | float) and not (isinstance(v, float) and math.isnan(v))
    }
    return {"step": record.get("step"), "progress": record.get("progress"), "metrics": metrics}
