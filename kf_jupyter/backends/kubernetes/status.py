"""A TrainJob's status from its JSON (conditions, jobsStatus, its pods), as the SDK derives it.

Pure functions of the API's JSON (no requests).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...constants import LAUNCHER_JOB, NODE_JOB
from ...types import COMPLETE, CREATED, FAILED, RUNNING
from .pods import pod_phase, pod_source


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time from the API (`2026-01-02T03:04:05Z`) as an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The TrainJob's status conditions by type."""
    return {
        c.get("type", ""): c
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }


def job_status(
    obj: dict[str, Any], pods: list[dict[str, Any]] | None, num_nodes: int
) -> tuple[str, str, str]:
    """(status, reason, message) of a TrainJob, as the SDK derives it.

    Complete/Failed conditions win; a Suspended job is Created; otherwise Running when every
    trainer node runs (from the pods when given, else from `status.jobsStatus`), else Created.
    """
    conds = conditions(obj)
    for ctype in (FAILED, COMPLETE):
        c = conds.get(ctype)
        if c and c.get("status") == "True":
            return ctype, str(c.get("reason") or ""), str(c.get("message") or "")
    susp = conds.get("Suspended")
    if susp and susp.get("status") == "True":
        return CREATED, str(susp.get("reason") or "Suspended"), str(susp.get("message") or "")
    if pods is not None:
        live = ("Running", "Succeeded")
        nodes = [p for p in pods if pod_source(p)[0] == NODE_JOB]
        launchers = [p for p in pods if pod_source(p)[0] == LAUNCHER_JOB]
        running_nodes = sum(pod_phase(p) in live for p in nodes)
        launcher_up = bool(launchers) and all(pod_phase(p) in live for p in launchers)
        if nodes and (
            running_nodes >= num_nodes or (launcher_up and running_nodes >= num_nodes - 1)
        ):
            return RUNNING, "", ""
        return CREATED, "", ""
    trainer_jobs = [
        js
        for js in (obj.get("status") or {}).get("jobsStatus") or []
        if js.get("name") in (NODE_JOB, LAUNCHER_JOB)
    ]
    if trainer_jobs and all(
        int(js.get("ready") or 0) + int(js.get("succeeded") or 0) >= 1 for js in trainer_jobs
    ):
        return RUNNING, "", ""
    return CREATED, "", ""
