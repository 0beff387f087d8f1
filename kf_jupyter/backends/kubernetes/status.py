"""A TrainJob's status from its JSON (conditions, jobsStatus, its pods), as the SDK derives it.

Pure functions of the API's JSON (no requests).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from ...constants import (
    LAUNCHER_JOB,
    NODE_JOB,
    QUEUE_LABEL,
    STEP_NAMES,
    SUSPENDED_BY_USER_ANNOTATION,
)
from ...progress import parse_time
from ...types import COMPLETE, CREATED, FAILED, RUNNING, SUSPENDED
from .pods import pod_phase, pod_source
from .restarts import stopped_status
from .waiting import waiting_reason


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

    Complete/Failed conditions win; then a job kf-jupyter stopped at a failed run (Failed,
    `RankFailed`); then a suspended job (`suspension`); otherwise Running when every
    trainer node runs (from the pods when given, else from `status.jobsStatus`), else Created.
    """
    conds = conditions(obj)
    for ctype in (FAILED, COMPLETE):
        c = conds.get(ctype)
        if c and c.get("status") == "True":
            return ctype, str(c.get("reason") or ""), str(c.get("message") or "")
    stopped = stopped_status(obj)  # kf-jupyter stopped it at a failed run (restarts.py)
    if stopped is not None:
        return stopped
    suspended = suspension(obj)
    if suspended is not None:
        return suspended
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
        return (CREATED, *(waiting_reason(pods) or ("", "")))
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


def suspension(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    """(status, reason, message) of a suspended TrainJob (`spec.suspend`), else None.

    Suspended by `suspend_job` (our annotation), or by anyone without a queue label: Suspended.
    Suspended with a Kueue queue label and not by the user: waiting for Kueue to admit it, so
    Created / Queued (Kueue admits a job by unsuspending it).
    """
    meta = obj.get("metadata") or {}
    if not (obj.get("spec") or {}).get("suspend"):
        return None
    cond = conditions(obj).get("Suspended") or {}
    by_user = (meta.get("annotations") or {}).get(SUSPENDED_BY_USER_ANNOTATION) == "true"
    queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
    if queue and not by_user:
        return (
            CREATED,
            "Queued",
            f"Waiting in Kueue queue {queue!r} to be admitted (Kueue starts the job by "
            "unsuspending it when the queue has quota for it).",
        )
    message = str(cond.get("message") or "") if cond.get("status") == "True" else ""
    return (
        SUSPENDED,
        "Suspended",
        message or "The job is suspended: its pods are stopped. Resume it to start them again.",
    )


#: The Failed reason when activeDeadlineSeconds ran out (the Trainer then deletes the JobSet).
DEADLINE_EXCEEDED = "DeadlineExceeded"

#: Why a Created TrainJob will not start, when the Trainer says so only in an event.
RECONCILE_FAILED = "TrainJobResourcesCreationFailed"


def event_time(ev: dict[str, Any]) -> datetime:
    """When an Event (as core/v1 serves it) was last seen: a series' `lastObservedTime` (an
    events.k8s.io recorder, as the Trainer's, keeps `eventTime` at the first occurrence and
    counts repeats in `series`), else `lastTimestamp`, `eventTime`, `firstTimestamp`; compared
    as times (`...:00Z` and `...:00.5Z` do not sort as strings)."""
    series = ev.get("series") or {}
    for value in (series.get("lastObservedTime"), ev.get("lastTimestamp"), ev.get("eventTime"),
                  ev.get("firstTimestamp")):  # fmt: skip
        when = parse_time(value)
        if when is not None:
            return when
    return datetime.min.replace(tzinfo=UTC)


#: The Job controller's reason when the API server refuses a pod (Pod Security, quota, ...).
FAILED_CREATE = "FailedCreate"
#: What Pod Security admission puts in a refusal ("violates PodSecurity "restricted:latest": ...").
POD_SECURITY_REFUSAL = "violates PodSecurity"


def _when(e: dict[str, Any]) -> str:
    return str(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp") or "")


def _is_child_job(obj: dict[str, Any], job_name: str, rjobs: Iterable[str]) -> bool:
    """`<trainjob>-<replicated job>-<index>`: a Job of this TrainJob's JobSet."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    rjob, _, index = job_name.removeprefix(name + "-").rpartition("-")
    return job_name.startswith(name + "-") and index.isdigit() and rjob in rjobs


def reconcile_failure(
    obj: dict[str, Any], events: list[dict[str, Any]], rjobs: Iterable[str] = STEP_NAMES
) -> tuple[str, str] | None:
    """(reason, message) of why a Created TrainJob does not start, from Warning events; None
    when none says.

    The Trainer reports a reconcile that fails (its JobSet refused by the JobSet webhook, a
    runtime gone) only as a `TrainJobResourcesCreationFailed` event about the TrainJob (same
    uid); the Job controller reports a pod the API server refuses (Pod Security admission, a
    quota) only as a `FailedCreate` event about the Job (`<name>-<replicated job>-<index>`, no
    pod exists; `rjobs` are the runtime's replicated jobs). The TrainJob's own event wins; of each kind the newest, and a Job's only when
    it is not older than the TrainJob (an earlier job of the same name left its events).
    """
    meta = obj.get("metadata") or {}
    uid, name = meta.get("uid"), meta.get("name")
    created = str(meta.get("creationTimestamp") or "")
    mine, jobs = [], []
    for e in events:
        inv = e.get("involvedObject") or {}
        if e.get("type") != "Warning":
            continue
        if inv.get("kind") == "TrainJob" and inv.get("name") == name:
            if inv.get("uid") in (None, "", uid):
                mine.append(e)
        elif (
            inv.get("kind") == "Job"
            and e.get("reason") == FAILED_CREATE
            and _is_child_job(obj, str(inv.get("name") or ""), set(rjobs))
            and _when(e) >= created
        ):
            jobs.append(e)
    if mine:
        ev = max(mine, key=event_time)
        text = str(ev.get("message") or ev.get("reason") or "")
        return (
            str(ev.get("reason") or RECONCILE_FAILED),
            f"The Kubeflow Trainer cannot create this job's pods, so it will not start: {text}",
        )
    if not jobs:
        return None
    ev = max(jobs, key=_when)
    text = str(ev.get("message") or "").removeprefix("Error creating: ")
    job = (ev.get("involvedObject") or {}).get("name")
    count = int(ev.get("count") or 1)
    tries = f" ({count} tries so far)" if count > 1 else ""
    message = (
        f"The cluster refuses to create the pods of Job {job}, so the job does not start; the "
        f"Job controller keeps retrying{tries}: {text}"
    )
    if POD_SECURITY_REFUSAL in text:
        message += (
            " This namespace enforces a Pod Security level that the pods break, and that will "
            "not change by itself: delete the job and submit it again with the PodSecurity"
            "('restricted') option (it sets allowPrivilegeEscalation=false, drops all "
            "capabilities, runAsNonRoot with a non-root user and the RuntimeDefault seccomp "
            "profile on every container), or use a namespace without that label."
        )
    return FAILED_CREATE, message


def will_not_start(reason: str, message: str) -> bool:
    """A waiting reason that no wait will clear: a reconcile failure, a Pod Security refusal."""
    return reason != FAILED_CREATE or POD_SECURITY_REFUSAL in message
