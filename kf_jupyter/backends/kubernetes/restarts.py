"""A rank that fails on a cluster that restarts it: what the pods say, and the stop we record.

JobSet defaults every pod template to `restartPolicy: OnFailure` and the Job's `backoffLimit`
stays 6, so a failed trainer container is restarted in the same pod (CrashLoopBackOff) while the
job stays Running; the failed run is only in the container's `lastState` (docs/kubernetes-
backend.md "A failing function"). Pure functions of the API's JSON (no requests).

When the user asked for no restarts (`max_restarts` unset or 0) the TrainJob carries
`kf-jupyter.io/stop-on-failure: "true"`; the waiting client stops such a job at the first
failed run and records it in `kf-jupyter.io/failed` (JSON: source, attempt, exit code, the
container's termination message, time), which makes the job Failed for kf-jupyter.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ...constants import LAUNCHER_JOB, NODE_JOB, TRAINER_CONTAINER
from ...failure import earliest_failure, parse_error_record
from ...types import FAILED, Failure
from .pods import pod_source

STOP_ANNOTATION = "kf-jupyter.io/stop-on-failure"
FAILED_ANNOTATION = "kf-jupyter.io/failed"
#: The Failed reason of a job kf-jupyter stopped at its first failed run.
RANK_FAILED = "RankFailed"


def wants_stop(trainer: Any) -> bool:
    """True when the user asked for no restarts (`max_restarts` unset or 0)."""
    return not getattr(trainer, "max_restarts", None)


def mark_stop_on_failure(job: dict[str, Any], trainer: Any) -> None:
    """Annotate the TrainJob to be stopped at its first failed run, unless restarts were asked."""
    if wants_stop(trainer):
        annotations = job.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[STOP_ANNOTATION] = "true"


def _trainer_status(pod: dict[str, Any]) -> dict[str, Any] | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == TRAINER_CONTAINER:
            return cs
    return statuses[0] if statuses else None


def failed_runs(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's trainer container runs that ended in failure, as the pod still shows them
    (`state.terminated`, `lastState.terminated`), each with its `attempt` (1-based)."""
    if pod_source(pod)[0] not in (NODE_JOB, LAUNCHER_JOB):
        return []
    cs = _trainer_status(pod)
    if cs is None:
        return []
    restarts = int(cs.get("restartCount") or 0)
    out = []
    term = (cs.get("state") or {}).get("terminated")
    if term and int(term.get("exitCode") or 0) != 0:
        out.append({**term, "attempt": restarts + 1})
    last = (cs.get("lastState") or {}).get("terminated")
    if last and int(last.get("exitCode") or 0) != 0:
        waiting = bool((cs.get("state") or {}).get("waiting"))
        # crash-looping: lastState is the run that just ended, not the one before
        attempt = restarts + 1 if waiting and not term else restarts
        if not out or last.get("containerID") != out[0].get("containerID"):
            out.append({**last, "attempt": max(attempt, 1)})
    return out


def restart_count(pod: dict[str, Any]) -> int:
    """How many times the kubelet restarted the pod's trainer container."""
    cs = _trainer_status(pod)
    return int((cs or {}).get("restartCount") or 0)


def first_failed_run(pods: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """(source, run) of the earliest failed trainer run among the pods, else None."""
    found = [(pod_source(p)[2], r) for p in pods for r in failed_runs(p)]
    if not found:
        return None
    return min(found, key=lambda sr: (str(sr[1].get("finishedAt") or ""), sr[0]))


def failure_records(pods: list[dict[str, Any]] | None) -> Failure | None:
    """The earliest runner record among the termination messages of every run the pods show
    (`state` and `lastState`: a restarted container keeps its failure only in `lastState`)."""
    records = []
    for pod in pods or []:
        for run in failed_runs(pod):
            rec = parse_error_record(str(run.get("message") or ""))
            if rec is not None:
                records.append(rec)
        cs = _trainer_status(pod) or {}
        term = (cs.get("state") or {}).get("terminated") or {}
        if pod_source(pod)[0] not in (NODE_JOB, LAUNCHER_JOB) and term.get("message"):
            rec = parse_error_record(str(term["message"]))
            if rec is not None:
                records.append(rec)
    return earliest_failure(records)


def failed_annotation(source: str, run: dict[str, Any]) -> str:
    """The `kf-jupyter.io/failed` value for a failed run (the termination message kept)."""
    return json.dumps(
        {
            "source": source,
            "attempt": int(run.get("attempt") or 1),
            "exitCode": int(run.get("exitCode") or 0),
            "message": str(run.get("message") or "")[:4096],
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )


def stopped_record(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The `kf-jupyter.io/failed` record of a job kf-jupyter stopped, else None."""
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(FAILED_ANNOTATION)
    if not raw:
        return None
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def stopped_status(obj: dict[str, Any]) -> tuple[str, str, str] | None:
    """(Failed, RankFailed, message) of a job kf-jupyter stopped at a failed run, else None."""
    rec = stopped_record(obj)
    if rec is None:
        return None
    queued = bool(
        ((obj.get("metadata") or {}).get("labels") or {}).get("kueue.x-k8s.io/queue-name")
    )
    stop = (
        "the job is under Kueue, which resumes a suspended job it admitted, so its pods keep "
        "retrying until the Job's backoffLimit: delete it to stop them"
        if queued
        else "kf-jupyter suspended the job (its pods are deleted, the TrainJob is kept)"
    )
    message = (
        f"{rec.get('source', '?')} failed on attempt {rec.get('attempt', 1)} with exit code "
        f"{rec.get('exitCode', '?')}; no restarts were asked (max_restarts unset), so {stop}. "
        "Its logs are kept by kf-jupyter: client.get_job_logs(name)."
    )
    return FAILED, RANK_FAILED, message


def stopped_failure(obj: dict[str, Any]) -> Failure | None:
    """The root cause in the stop record (the runner's termination message), else None."""
    rec = stopped_record(obj)
    parsed = parse_error_record(str((rec or {}).get("message") or ""))
    return earliest_failure([parsed]) if parsed else None


def restart_note(pods: list[dict[str, Any]]) -> str:
    """`node-0 is on attempt 3 (restarted after: exit code 1)` for a job whose trainer
    containers were restarted, else ''."""
    notes = []
    for pod in pods:
        count = restart_count(pod)
        if count and pod_source(pod)[0] in (NODE_JOB, LAUNCHER_JOB):
            runs = failed_runs(pod)
            code = runs[-1].get("exitCode") if runs else "?"
            notes.append(
                f"{pod_source(pod)[2]} is on attempt {count + 1} (the kubelet restarted it "
                f"{count} time{'s' if count > 1 else ''} after it failed; last exit code {code})"
            )
    return "; ".join(notes)
