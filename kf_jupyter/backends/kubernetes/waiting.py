"""Why a TrainJob that has not started is waiting, from its pods (pure functions of their JSON).

There is no Pending condition on a TrainJob: the reason is in its pods. The scheduler marks a pod
it cannot place `PodScheduled=False / Unschedulable` with the same text as its `FailedScheduling`
event ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."); the kubelet puts image errors
(`ErrImagePull`, `ImagePullBackOff`, `InvalidImageName`) and config errors
(`CreateContainerConfigError`) in the container's waiting state; a runtime's initializers
(dataset, model) run before the trainer's pods start. A job Kueue holds is told apart earlier,
from its suspension (`status.suspension`).
"""

from __future__ import annotations

from typing import Any

from ...constants import LAUNCHER_JOB, NODE_JOB
from .pods import pod_container, pod_phase, pod_source

IMAGE_ERRORS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CONFIG_ERRORS = ("CreateContainerConfigError", "CreateContainerError")
INITIALIZERS = ("dataset-initializer", "model-initializer")


def _unschedulable(pod: dict[str, Any]) -> str | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            if c.get("reason") == "Unschedulable":
                return str(c.get("message") or "no node can run it")
    return None


def _container_waiting(pod: dict[str, Any]) -> tuple[str, str, str] | None:
    """(reason, message, image) of the step's container while it waits on an error."""
    main = pod_container(pod)
    images = {
        c.get("name"): c.get("image", "") for c in pod.get("spec", {}).get("containers") or []
    }
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != main:
            continue
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in IMAGE_ERRORS or reason in CONFIG_ERRORS:
            image = str(cs.get("image") or images.get(main) or "")
            return reason, str(waiting.get("message") or ""), image
    return None


def waiting_reason(pods: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(reason, message) for a job whose trainer is not running yet; None when nothing says.

    Errors first (image, config, scheduling), then the initializers still at work.
    """
    for pod in pods:
        source = pod_source(pod)[2]
        err = _container_waiting(pod)
        if err is not None:
            reason, message, image = err
            if reason in IMAGE_ERRORS:
                text = f"{source} cannot pull its image {image}"
                return "ImagePullBackOff", text + (f": {message}" if message else ".")
            return reason, f"{source}: {message or reason}"
    for pod in pods:
        why = _unschedulable(pod)
        if why is not None:
            return "Unschedulable", f"{pod_source(pod)[2]} cannot be scheduled: {why}"
    trainer_up = any(
        pod_source(p)[0] in (NODE_JOB, LAUNCHER_JOB) and pod_phase(p) != "Pending" for p in pods
    )
    busy = [
        f"{pod_source(p)[2]} {pod_phase(p)}"
        for p in pods
        if pod_source(p)[0] in INITIALIZERS and pod_phase(p) not in ("Succeeded",)
    ]
    if busy and not trainer_up:
        return "Initializing", "Waiting for the runtime's initializers: " + ", ".join(busy) + "."
    return None


def pod_state(pod: dict[str, Any]) -> str:
    """One pod's state in the cluster's own words: its phase, or while it is Pending what it
    waits on (unscheduled, an init container, its container's waiting reason such as
    ContainerCreating or ImagePullBackOff)."""
    phase = pod_phase(pod)
    if phase != "Pending":
        return phase
    status = pod.get("status") or {}
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return "Unschedulable"
    for cs in status.get("initContainerStatuses") or []:
        state = cs.get("state") or {}
        if "running" in state:
            return f"init container {cs.get('name')} running"
        waiting = (state.get("waiting") or {}).get("reason")
        if waiting and waiting != "PodInitializing":
            return f"init container {cs.get('name')}: {waiting}"
    main = pod_container(pod)
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == main:
            reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
            if reason:
                return str(reason)
    return "Pending"


def pods_phase(pods: list[dict[str, Any]]) -> str:
    """The startup phase of a Created or Running job from its pods (the newest per step):
    "Waiting for the Trainer to create the pods", "Pods: 1/2 running · 1 ContainerCreating",
    "All 2 pods running" (kf_jupyter/phases.py has the local one)."""
    if not pods:
        return "Waiting for the Trainer to create the pods"
    trainer = [p for p in pods if pod_source(p)[0] not in INITIALIZERS]
    parts = [
        f"{pod_source(p)[2]}: {pod_state(p)}"
        for p in pods
        if pod_source(p)[0] in INITIALIZERS and pod_phase(p) != "Succeeded"
    ]
    states = [pod_state(p) for p in trainer]
    running = states.count("Running")
    if trainer and running == len(trainer) and not parts:
        return f"All {len(trainer)} pods running" if len(trainer) > 1 else "The pod is running"
    counts: dict[str, int] = {}
    for s in states:
        if s != "Running":
            counts[s] = counts.get(s, 0) + 1
    if trainer:
        rest = ", ".join(f"{n} {s}" for s, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        parts.append(f"Pods: {running}/{len(trainer)} running" + (f" · {rest}" if rest else ""))
    return " · ".join(parts)
