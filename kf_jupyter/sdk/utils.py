"""The Kubeflow SDK's helper functions: progress reporting and TPU node counts."""

from __future__ import annotations

import math
from typing import Any

from ..report import report


def update_trainjob_status(
    progress_percent: int | None = None,
    estimated_remaining_seconds: int | None = None,
    metrics: dict[str, Any] | None = None,
) -> bool:
    """Report progress from training code, as the SDK's call does; never raises.

    Written as a `kf_jupyter.report()` line, which the job monitor, the job panel and
    `parse_report` read on both backends. Non-numeric metric values are left out (report takes
    numbers); `estimated_remaining_seconds` is accepted and not shown. Returns True once written.
    """
    try:
        progress = None
        if progress_percent is not None:
            progress = max(0.0, min(100.0, float(progress_percent))) / 100.0
        numbers: dict[str, float] = {}
        for key, value in list((metrics or {}).items())[:256]:
            try:
                numbers[str(key)] = float(value)
            except (TypeError, ValueError):
                continue
        report(progress=progress, **numbers)
        return True
    except Exception:  # training must never break on a progress report
        return False


def get_tpu_num_nodes(num_slices: int, topology: str, chips_per_host: int = 4) -> int:
    """Hosts across `num_slices` TPU slices of `topology` (e.g. "2x4"), `chips_per_host` each."""
    if isinstance(num_slices, bool) or not isinstance(num_slices, int) or num_slices <= 0:
        raise ValueError(f"num_slices must be a positive whole number, got: {num_slices!r}")
    if (
        isinstance(chips_per_host, bool)
        or not isinstance(chips_per_host, int)
        or chips_per_host <= 0
    ):
        raise ValueError(f"chips_per_host must be a positive whole number, got: {chips_per_host!r}")
    parts = str(topology or "").lower().split("x")
    if len(parts) not in (2, 3) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(
            f"Invalid TPU topology {topology!r}: give 2 or 3 positive dimensions, like '2x2' or "
            "'2x2x4'."
        )
    chips = math.prod(int(p) for p in parts)
    if chips < chips_per_host:
        return num_slices
    if chips % chips_per_host:
        raise ValueError(
            f"The {chips} TPU chips of a {topology} slice do not divide evenly into hosts of "
            f"{chips_per_host} chips."
        )
    return num_slices * (chips // chips_per_host)
