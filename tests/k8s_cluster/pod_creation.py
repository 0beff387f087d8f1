"""TEST STAND-IN for the Job controller's pod creation, as the stand-in's kubelet half needs it.

The stand-in creates a stage's pods through the API server (so the harness's Pod Security
webhook sees them). When the API server refuses a pod (403 Forbidden from Pod Security
admission, or a quota), a real cluster has no pod: the Job controller records a Warning event
`FailedCreate` "Error creating: <the API server's message>" on the Job
(kubernetes `pkg/controller/controller_utils.go` RealPodControl.createPods) and requeues the Job
with exponential back-off, 1 s doubling to 60 s (`pkg/controller/job/job_controller.go`
DefaultJobApiBackOff, MaxJobApiBackOff); the event recorder folds identical repeats into one
event whose `count` grows. The harness makes no Job objects, so the event names the Job a real
cluster would have, `<trainjob>-<replicated job>-0` (kind Job, batch/v1), without a uid.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING, Any

from kubernetes.client.rest import ApiException

if TYPE_CHECKING:
    from tests.k8s_cluster.standin import JobRun, PodRun, StandIn

BACKOFF_FIRST, BACKOFF_MAX = 1.0, 60.0
WEBHOOK_PREFIX = 'admission webhook "pod-security.harness.kf-jupyter.io" denied the request: '


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def refusal_text(e: ApiException) -> str:
    """The API server's message as a real cluster words it (the harness's webhook prefix off:
    there, Pod Security is the API server's own admission plugin)."""
    import json

    try:
        message = str(json.loads(e.body).get("message") or e.reason)
    except (TypeError, ValueError):
        message = str(e.reason)
    return message.removeprefix(WEBHOOK_PREFIX)


def create_pods(standin: StandIn, job: JobRun, tj: dict[str, Any], stage: list[PodRun]) -> bool:
    """Create the stage's pods; retry refused ones with the Job controller's back-off (one
    `FailedCreate` event per Job, its count growing). False when the job ended meanwhile."""
    waiting = list(stage)
    delay = BACKOFF_FIRST
    recorded: dict[tuple[str, str], str] = {}  # (job name, message) -> event name
    while waiting:
        refused = []
        for pod in waiting:
            if job.cancelled.is_set():
                return False
            try:
                standin._create_pod(pod)
            except ApiException as e:
                if e.status not in (403, 422):
                    raise
                refused.append(pod)
                _failed_create(standin, tj, pod, refusal_text(e), recorded)
                continue
            with standin._lock:
                standin._pods[(pod.namespace, pod.name)] = pod
        waiting = refused
        if not waiting:
            return True
        until = time.monotonic() + delay
        while time.monotonic() < until:
            if job.cancelled.is_set() or standin._stop.is_set():
                return False
            if job.deadline is not None and time.monotonic() > job.deadline:
                standin._deadline_exceeded(job, tj)
                return False
            time.sleep(0.05)
        delay = min(delay * 2, BACKOFF_MAX)
    return True


def _failed_create(
    standin: StandIn,
    tj: dict[str, Any],
    pod: PodRun,
    message: str,
    recorded: dict[tuple[str, str], str],
) -> None:
    job_name = f"{tj['metadata']['name']}-{pod.rjob}-0"
    text = f"Error creating: {message}"
    key = (job_name, text)
    core = standin.core
    try:
        if key in recorded:
            ev = standin._retry(core.read_namespaced_event, recorded[key], pod.namespace)
            standin._retry(
                core.patch_namespaced_event,
                recorded[key],
                pod.namespace,
                {"count": int(ev.count or 1) + 1, "lastTimestamp": _now()},
            )
            return
        body = {
            "metadata": {"generateName": f"{job_name}.", "namespace": pod.namespace},
            "involvedObject": {
                "kind": "Job",
                "apiVersion": "batch/v1",
                "name": job_name,
                "namespace": pod.namespace,
            },
            "type": "Warning",
            "reason": "FailedCreate",
            "message": text,
            "count": 1,
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "source": {"component": "job-controller"},
        }
        created = standin._retry(core.create_namespaced_event, pod.namespace, body)
        recorded[key] = created.metadata.name
    except ApiException:
        pass  # an event lost is not the harness's failure
