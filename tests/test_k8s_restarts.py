"""A function that raises on a cluster that restarts it (issue 35 A).

JobSet defaults pods to `restartPolicy: OnFailure` and the Job's `backoffLimit` is 6, so a failed
rank is re-run in the same pod with the kubelet's back-off while the pod says Running, and when
the Job gives up its pods (and logs) are deleted. The harness plays that (restarts.py); the tool
stops a job whose user asked for no restarts at its first failed run, says "attempt k", and keeps
every run's log.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kf_jupyter import TorchTrainer
from kf_jupyter.errors import JobFailedError
from kf_jupyter.types import FAILED

from .k8s_cluster.standin import StandIn
from .test_k8s_backend import _backend
from .test_k8s_harness import GROUP, VERSION, condition, trainjob, wait_for

pytestmark = pytest.mark.slow


@contextlib.contextmanager
def _backoff(standin: StandIn, scale: float) -> Iterator[None]:
    old = getattr(standin, "backoff_scale", 1.0)
    standin.backoff_scale = scale
    try:
        yield
    finally:
        standin.backoff_scale = old


def _pods(core: Any, ns: str, job: str) -> list[Any]:
    sel = f"jobset.sigs.k8s.io/jobset-name={job}"
    return core.list_namespaced_pod(ns, label_selector=sel).items


def raise_after_a_line():
    print("hello-start", flush=True)
    raise ValueError("boom from the user's function")


def test_harness_restarts_in_place_then_the_jobset_deletes_the_pods(
    k8s_cluster: Any, k8s_standin: StandIn, k8s_namespace: str
) -> None:
    """OnFailure from the JobSet webhook, restartCount / lastState / CrashLoopBackOff, the
    previous run's log, backoffLimit 6, then the pods are gone and the TrainJob Failed."""
    api = k8s_cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = k8s_namespace
    body = trainjob("crashes", ["bash", "-c", "echo run-$RANDOM; exit 3"])
    with _backoff(k8s_standin, 0.05):  # 10 s doubling -> 0.5 s doubling
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", body)

        def restarted() -> Any:
            for pod in _pods(core, ns, "crashes"):
                cs = (pod.status.container_statuses or [None])[0]
                if cs is not None and cs.restart_count >= 2 and cs.last_state.terminated:
                    return pod
            return None

        pod = wait_for(restarted, what="a container restarted twice", timeout=120)
        assert pod.spec.restart_policy == "OnFailure"
        assert pod.status.phase == "Running"
        cs = pod.status.container_statuses[0]
        assert cs.last_state.terminated.exit_code == 3
        previous = core.read_namespaced_pod_log(pod.metadata.name, ns, previous=True)
        assert previous.startswith("run-")
        cond = wait_for(lambda: condition(custom, ns, "crashes"), what="fails", timeout=120)
    assert (cond["type"], cond["reason"]) == ("Failed", "FailedJobs")
    assert _pods(core, ns, "crashes") == []  # the JobSet deleted its Jobs: no pod, no log
    events = core.list_namespaced_event(ns).items
    assert any(e.reason == "BackOff" and "crashes-node-0-0" in e.message for e in events)


def test_a_raising_function_fails_the_wait_within_seconds_and_keeps_its_log(
    k8s_admin_kubeconfig: str, k8s_standin: StandIn, k8s_namespace: str
) -> None:
    """No restarts asked: the tool stops the job at the first failed run (the real back-off
    would keep it Running for minutes), with the root cause and the user's line; the log stays
    readable after the pods are gone."""
    backend = _backend(k8s_admin_kubeconfig, k8s_namespace)
    name = backend.train(TorchTrainer(func=raise_after_a_line, num_nodes=1, num_proc_per_node=1))
    start = time.monotonic()
    with pytest.raises(JobFailedError) as err:
        backend.wait_for_job_status(name, timeout=150)
    took = time.monotonic() - start
    assert "ValueError: boom from the user's function" in str(err.value)
    assert "raise ValueError" in str(err.value)  # the user's line
    assert took < 90, took
    job = backend.get_job(name)
    assert (job.status, job.reason) == (FAILED, "RankFailed")
    assert job.failure is not None and job.failure.exc_type == "ValueError"
    assert "attempt 1" in job.message or "attempt 2" in job.message
    core = backend.core
    wait_for(lambda: not _pods(core, k8s_namespace, name), what="pods deleted", timeout=60)
    logs = list(backend.get_job_logs(name))
    assert any("hello-start" in line for line in logs), logs
    assert any("boom from the user's function" in line for line in logs), logs


def test_every_runs_log_is_followed_and_kept_when_restarts_were_asked(
    k8s_admin_kubeconfig: str, k8s_standin: StandIn, k8s_namespace: str
) -> None:
    """max_restarts set: the cluster's restarts go on; the follower reads each run from its
    first line under an attempt line, get_job says which attempt, and after the JobSet deleted
    the pods the whole log of every run is still there."""
    backend = _backend(k8s_admin_kubeconfig, k8s_namespace)
    trainer = TorchTrainer(func=raise_after_a_line, num_nodes=1, num_proc_per_node=1)
    trainer.max_restarts = 1  # torchrun re-runs once in the container; so does the kubelet
    with _backoff(k8s_standin, 0.02):
        name = backend.train(trainer)
        seen: list[str] = []
        notes: list[str] = []

        def probe() -> None:
            while len(notes) < 1 and not done.is_set():
                with contextlib.suppress(Exception):
                    job = backend.get_job(name)
                    if job.reason == "Restarting":
                        notes.append(job.message)
                time.sleep(0.3)

        done = threading.Event()
        t = threading.Thread(target=probe, daemon=True)
        t.start()
        for rec in backend.iter_log_records(name, follow=True):
            seen.append(rec.line)
        done.set()
        t.join(5)
    job = backend.get_job(name)
    assert job.status == FAILED
    starts = sum("hello-start" in line for line in seen)
    headers = [line for line in seen if "attempt" in line and "restarted" in line]
    assert len(headers) >= 5, seen  # runs 2..6 at least (the 7th is killed as it starts)
    assert starts >= 2 * len(headers), seen  # each run's first line (torchrun ran it twice)
    assert notes and "attempt" in notes[0] and "ValueError" in notes[0], notes
    with pytest.raises(ApiException):
        backend.core.read_namespaced_pod(f"{name}-node-0-0", k8s_namespace)
    kept = [line for line in backend.get_job_logs(name)]
    assert sum("hello-start" in line for line in kept) == starts, kept
