"""The root cause of a failed job, from what the runner recorded (pure: no I/O).

The runner (kf_jupyter/entrypoint.py) catches an exception of the user's code, prints the user's
traceback (without the runner's frames) and one line `##kf-jupyter:error {json}` holding the
rank, the exception type and message, that traceback, the time, and the full traceback. On
Kubernetes it also writes that record as the container's termination message. Backends turn the
earliest record into `TrainJob.failure`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .constants import ERROR_PREFIX
from .entrypoint import _kfj_short_traceback
from .types import Failure

#: The most traceback lines a view shows (the job's log keeps them all).
TRACEBACK_LINES = 40


def short_traceback(lines: list[str], max_lines: int = TRACEBACK_LINES) -> list[str]:
    """At most `max_lines` lines that keep the exception (its message trimmed) and the user's
    innermost frames, saying what was left out; the runner applies the same rule."""
    return list(_kfj_short_traceback(list(lines), max_lines=max_lines))


def short_message(message: str, max_chars: int = 200) -> str:
    """The first line of an exception message, at most `max_chars` characters (then `…`)."""
    first, _, rest = message.strip().partition("\n")
    if len(first) > max_chars:
        return first[: max_chars - 1] + "\u2026"
    return first + (" \u2026" if rest.strip() else "")


def failure_from_dict(data: Any) -> Failure | None:
    """A Failure from its dict form (status.json, a runner record); None if it is not one."""
    if not isinstance(data, dict) or not data.get("exc_type"):
        return None
    return Failure(
        source=str(data.get("source") or "Rank ?"),
        exc_type=str(data["exc_type"]),
        message=str(data.get("message") or ""),
        traceback=short_traceback([str(x) for x in data.get("traceback") or []]),
    )


def parse_error_record(line: str) -> dict[str, Any] | None:
    """The record of a `##kf-jupyter:error` line (anywhere in the line), else None."""
    idx = line.find(ERROR_PREFIX)
    if idx < 0:
        return None
    try:
        rec = json.loads(line[idx + len(ERROR_PREFIX) :])
    except ValueError:
        return None
    return rec if isinstance(rec, dict) and rec.get("exc_type") else None


def earliest_failure(records: Iterable[dict[str, Any]]) -> Failure | None:
    """The first failure in time (ties: the lowest rank) among runner records."""
    recs = [r for r in records if isinstance(r, dict) and r.get("exc_type")]
    if not recs:
        return None

    def key(r: dict[str, Any]) -> tuple[float, int]:
        try:
            return (float(r.get("time") or 0), int(r.get("rank") or 0))
        except (TypeError, ValueError):
            return (0.0, 0)

    return failure_from_dict(min(recs, key=key))


def failure_from_pods(pods: Iterable[dict[str, Any]] | None) -> Failure | None:
    """The earliest runner record among the pods' container termination messages."""
    records = []
    for pod in pods or []:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            msg = term.get("message")
            if isinstance(msg, str):
                rec = parse_error_record(msg)
                if rec is not None:
                    records.append(rec)
    return earliest_failure(records)


def failure_text(failure: Failure, max_lines: int = TRACEBACK_LINES) -> str:
    """`Rank 1 failed: NameError: ...` (the message's first line) then the user's traceback:
    at most `max_lines` lines, always with the user's innermost frames and the exception."""
    lines = short_traceback(failure.traceback, max_lines)
    # The headline keeps the message's first line whole up to 1,000 characters: the traceback
    # cuts each line at 300, and a one-paragraph error (ours, e.g. SetupCollisionError) ends
    # with the advice (`--no-setup`). Long multi-line messages (arrays) keep their first line.
    message = short_message(failure.message, max_chars=1000)
    what = failure.exc_type + (f": {message}" if failure.message else "")
    return f"{failure.source} failed: {what}" + ("\n" + "\n".join(lines) if lines else "")
