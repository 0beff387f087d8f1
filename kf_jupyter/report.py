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
        except OverflowError:
            raise TypeError(
                f"report(): metric {key!r} is an integer too large for a float "
                f"({len(str(abs(value)))} digits); report a float or a scaled value instead."
            ) from None
    from .entrypoint import _kfj_report_record, _kfj_status_report

    record = _kfj_report_record(step, progress, values)
    print(REPORT_PREFIX + json.dumps(record, allow_nan=True), flush=True)

    _kfj_status_report(step, progress, values)


def finite_number(value: Any) -> float | None:
    """`value` as a finite float, or None: not a number, a bool, NaN, ±inf, or too large.

    An integer of hundreds of digits (JSON allows it) does not fit a float: None, not an
    `OverflowError`. Every consumer of report lines goes through this, so no value can stop one.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def parse_report(line: str) -> dict[str, Any] | None:
    """The record of a report line, or None for any other line (never raises).

    Only finite numbers are kept: a metric that is not one is dropped, a `step` or `progress`
    that is not one becomes None; the line itself is still a report (hidden from the log view).
    """
    idx = line.find(REPORT_PREFIX)
    if idx < 0:
        return None
    try:
        record = json.loads(line[idx + len(REPORT_PREFIX) :])
    except (ValueError, RecursionError):  # malformed, or an int beyond Python's digit limit
        return None
    if not isinstance(record, dict) or not isinstance(record.get("metrics", {}), dict):
        return None
    metrics = {}
    for k, v in (record.get("metrics") or {}).items():
        num = finite_number(v)
        if num is not None:
            metrics[str(k)] = num
    step = record.get("step")
    step_num = finite_number(step)
    progress = finite_number(record.get("progress"))
    return {
        "step": None if step_num is None else (step if isinstance(step, int) else step_num),
        "progress": progress,
        "metrics": metrics,
    }
