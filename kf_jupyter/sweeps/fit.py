"""A cluster sweep's record fitted to a ConfigMap (1 MiB) at any trial count (pure, no I/O).

`kubernetes.ConfigMapStore` writes `fit_record(record)`; the driver's own record (in memory)
stays whole.
"""

from __future__ import annotations

import json
from typing import Any

from ..constants import SWEEP_LABEL
from . import engine as eng

#: A ConfigMap holds at most 1 MiB; the record is fitted to stay below this (`fit_record`).
RECORD_MAX_BYTES = 900_000
#: A trial's (or event's) message is cut to this many characters when the record is too big.
MESSAGE_KEEP = 300
#: Bytes kept free for the note and event saying the record was limited.
NOTE_ROOM = 4_000


def _thin_curves(rec: dict[str, Any]) -> None:
    """Every trial's curves: every other point, keeping the last (new lists: the caller's
    record is a shallow copy of the driver's)."""
    for trial in rec.get("trials") or []:
        history = trial.get("history") or {}
        if not history:
            continue
        thinned = {}
        for name, series in history.items():
            values, steps = series.get("values") or [], series.get("steps") or []
            if len(values) > 2:
                keep = list(range(len(values) - 1, -1, -2))[::-1]
                series = {
                    "values": [values[i] for i in keep],
                    "steps": [steps[i] for i in keep] if len(steps) == len(values) else [],
                }
            thinned[name] = series
        trial["history"] = thinned


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _compact(rec: dict[str, Any], best: str | None) -> None:
    """Curves kept for the best trial only; long messages (trials', events') cut short."""
    for trial in rec.get("trials") or []:
        if trial.get("name") != best and trial.get("history"):
            trial["history"] = {}
            trial["curves_dropped"] = True
        if len(trial.get("message") or "") > MESSAGE_KEEP:
            trial["message"] = trial["message"][:MESSAGE_KEEP] + "..."
    for ev in rec.get("events") or []:
        if len(ev.get("message") or "") > MESSAGE_KEEP:
            ev["message"] = ev["message"][:MESSAGE_KEEP] + "..."


def _keep_trials(rec: dict[str, Any], best: str | None, room: int) -> dict[str, int]:
    """Keep the trials that fit in `room` bytes: the best, the running ones, then the newest
    finished; trials never started (pending, or cancelled before they ran) go first. Returns
    the left-out count by status."""
    trials = rec.get("trials") or []
    order = sorted(
        range(len(trials)),
        key=lambda i: (
            trials[i].get("name") != best,
            trials[i].get("status") != eng.TRIAL_RUNNING,
            not trials[i].get("submitted"),
            -i,
        ),
    )
    keep: set[int] = set()
    used = 0
    for i in order:
        size = len(_dumps(trials[i])) + 1
        if used + size > room:
            continue
        keep.add(i)
        used += size
    omitted: dict[str, int] = {}
    for i, trial in enumerate(trials):
        if i not in keep:
            omitted[trial.get("status") or "?"] = omitted.get(trial.get("status") or "?", 0) + 1
    rec["trials"] = [t for i, t in enumerate(trials) if i in keep]
    return omitted


def fit_record(record: dict[str, Any], limit: int | None = None) -> str:
    """The record as JSON of at most `limit` bytes (`RECORD_MAX_BYTES`; a ConfigMap holds
    1 MiB), at any trial count. In order, until it fits: the curves are thinned (every other
    point, keeping the last); then only the best trial keeps its curve and long messages are
    cut to `MESSAGE_KEEP` characters; then trials are left out of the record, those never
    started first (pending, or cancelled before they ran), then the oldest finished (the best and the running ones stay), with their count by
    status under `trials_omitted`. Once anything beyond thinning was needed the record says
    so: `record_limited` (a sentence) and a `RecordLimited` event. Summaries of the trials
    kept are never dropped; the left-out trials' TrainJobs keep their own status."""
    limit = RECORD_MAX_BYTES if limit is None else limit
    text = _dumps(record)
    if len(text) <= limit:
        return text
    rec = dict(record)  # copies of what is changed below; the driver's record stays whole
    rec["trials"] = [dict(trial) for trial in record.get("trials") or []]
    rec["events"] = [dict(ev) for ev in record.get("events") or []]
    bare = [{k: v for k, v in trial.items() if k != "history"} for trial in rec["trials"]]
    curves_only = len(_dumps({**rec, "trials": bare})) <= limit  # else thinning cannot do
    for _ in range(12 if curves_only else 0):
        _thin_curves(rec)
        rec["history_thinned"] = True
        text = _dumps(rec)
        if len(text) <= limit:
            return text
    best = rec.get("best_trial")
    _compact(rec, best)
    omitted: dict[str, int] = {}
    if len(_dumps(rec)) > limit:
        base = len(_dumps({**rec, "trials": []})) + NOTE_ROOM
        omitted = _keep_trials(rec, best, max(limit - base, 0))
    total = len(record.get("trials") or [])
    note = (
        f"The sweep's record is a ConfigMap (at most 1 MiB), and {total} trials do not fit: "
        "only the best trial keeps its curve"
    )
    if omitted:
        left = ", ".join(f"{n} {status}" for status, n in sorted(omitted.items()))
        rec["trials_omitted"] = omitted
        note += (
            f", and {sum(omitted.values())} trials are left out of it ({left}; the best and "
            "the running trials stay, then the newest). The TrainJobs of finished trials keep "
            f"their status and metrics (label {SWEEP_LABEL}={record.get('name', '')})"
        )
    rec["record_limited"] = note + "."
    events = rec.setdefault("events", [])
    events.append({"time": eng.now_iso(), "reason": "RecordLimited", "message": note + "."})
    del events[: -eng.MAX_EVENTS]
    return _dumps(rec)


__all__ = ["MESSAGE_KEEP", "RECORD_MAX_BYTES", "fit_record"]
