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
