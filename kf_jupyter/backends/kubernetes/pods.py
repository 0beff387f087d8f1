"""A TrainJob's pods, read from their JSON: which step each is, its container, phase and exit.

Pure functions of the API's JSON (no requests), shared by the job, log and event modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...constants import (
    COMPLETION_INDEX_LABEL,
    JOBSET_NAME_LABEL,
    LAUNCHER_JOB,
    NODE_JOB,
    REPLICATED_JOB_LABEL,
    STEP_NAMES,
    TRAINER_CONTAINER,
)
from ...types import Step

POD_SELECTOR = f"{JOBSET_NAME_LABEL},{REPLICATED_JOB_LABEL} in ({','.join(STEP_NAMES)})"


def pod_selector(job: str) -> str:
    """The SDK's selector for one TrainJob's pods (facts doc)."""
    return f"{JOBSET_NAME_LABEL}={job},{REPLICATED_JOB_LABEL} in ({','.join(STEP_NAMES)})"


def pod_source(pod: dict[str, Any]) -> tuple[str, int, str]:
    """(replicated job, completion index, source name) of a job's pod: node-N, launcher, ..."""
    labels = pod.get("metadata", {}).get("labels") or {}
    rjob = labels.get(REPLICATED_JOB_LABEL, NODE_JOB)
    try:
        index = int(labels.get(COMPLETION_INDEX_LABEL, "0"))
    except ValueError:
        index = 0
    if rjob == NODE_JOB:
        source = f"node-{index}"
    elif index == 0:
        source = rjob
    else:
        source = f"{rjob}-{index}"
    return rjob, index, source


_STEP_ORDER = {"dataset-initializer": 0, "model-initializer": 1, LAUNCHER_JOB: 2, NODE_JOB: 3}


def newest_pods(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One pod per (replicated job, index), the newest (restarts), in step order."""
    best: dict[tuple[str, int], dict[str, Any]] = {}
    for pod in pods:
        rjob, index, _ = pod_source(pod)
        key = (rjob, index)
        meta = pod.get("metadata", {})
        stamp = (meta.get("creationTimestamp") or "", meta.get("name") or "")
        cur = best.get(key)
        if cur is None or stamp > (
            cur["metadata"].get("creationTimestamp") or "",
            cur["metadata"].get("name") or "",
        ):
            best[key] = pod
    return [best[k] for k in sorted(best, key=lambda k: (_STEP_ORDER.get(k[0], 9), k[0], k[1]))]


def pod_container(pod: dict[str, Any]) -> str:
    """The container whose log is the step's log (`node`, else the first one)."""
    containers = pod.get("spec", {}).get("containers") or []
    names = [c.get("name") for c in containers]
    if TRAINER_CONTAINER in names:
        return TRAINER_CONTAINER
    return str(names[0]) if names else TRAINER_CONTAINER


def pod_phase(pod: dict[str, Any]) -> str:
    """The pod's phase (Pending, Running, Succeeded, Failed, Unknown)."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_step(pod: dict[str, Any]) -> Step:
    """A job step from its pod."""
    rjob, index, source = pod_source(pod)
    status = pod.get("status") or {}
    exit_code = None
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == pod_container(pod):
            term = (cs.get("state") or {}).get("terminated")
            if term and term.get("exitCode") is not None:
                exit_code = int(term["exitCode"])
    gpu = False
    for c in pod.get("spec", {}).get("containers") or []:
        res = c.get("resources") or {}
        if any("gpu" in k for part in res.values() if isinstance(part, dict) for k in part):
            gpu = True
    return Step(
        name=source,
        status=pod_phase(pod),
        rank=index if rjob == NODE_JOB else None,
        exit_code=exit_code,
        device="gpu" if gpu else "cpu",
        pod_name=pod.get("metadata", {}).get("name"),
        device_count=pod_device_count(pod),
    )


def pod_device_count(pod: dict[str, Any]) -> str | None:
    """Processes per node as the SDK reports them: the node container's PET_NPROC_PER_NODE when
    a number, else its GPU or CPU limit."""
    for c in pod.get("spec", {}).get("containers") or []:
        if c.get("name") != pod_container(pod):
            continue
        for e in c.get("env") or []:
            if e.get("name") == "PET_NPROC_PER_NODE" and str(e.get("value", "")).isdigit():
                return str(e["value"])
        limits = (c.get("resources") or {}).get("limits") or {}
        for key in ("nvidia.com/gpu", "cpu"):
            if key in limits:
                return str(limits[key])
    return None
