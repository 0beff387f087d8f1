"""Issue 19 (e): a failed reconcile is retried with controller-runtime's back-off and recorded
as one events.k8s.io Event whose series grows, as the Trainer v2.3.0 does
(tests/k8s_cluster/reconcile_events.py cites the sources); the tool shows the newest failure.

Before, the stand-in emitted one core/v1 event and never tried again, and the tool chose the
newest event by `lastTimestamp`/`eventTime` alone, so a repeating failure (whose `eventTime` is
its first occurrence) lost to an older one-off warning.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kf_jupyter.backends.kubernetes.status import reconcile_failure
from kf_jupyter.constants import GROUP, VERSION
from tests.k8s_cluster.reconcile_events import BASE_DELAY, MAX_DELAY, Backoff
from tests.refused_jobs import create_raw_trainjob

TJ = {"metadata": {"name": "j", "uid": "u1"}}


def _warning(reason: str, message: str, **times: Any) -> dict[str, Any]:
    return {
        "type": "Warning",
        "reason": reason,
        "message": message,
        "involvedObject": {"kind": "TrainJob", "name": "j", "uid": "u1"},
        **times,
    }


def test_the_newest_failure_counts_a_series_by_its_last_observation() -> None:
    # a repeating failure first seen at 10:00:00 and last at 10:05:00, read through core/v1
    series = _warning(
        "TrainJobResourcesCreationFailed",
        "TrainJob resources reconciliation failed: refused",
        eventTime="2026-12-02T10:00:00.000001Z",
        series={"count": 7, "lastObservedTime": "2026-12-02T10:05:00.000001Z"},
    )
    # an older one-off warning at 10:01:00, written by a legacy recorder
    other = _warning("SomethingElse", "once", lastTimestamp="2026-12-02T10:01:00Z")
    reason, message = reconcile_failure(TJ, [other, series])
    assert reason == "TrainJobResourcesCreationFailed" and "refused" in message


def test_same_second_times_compare_as_times_not_strings() -> None:
    a = _warning("Older", "a", lastTimestamp="2026-12-02T10:00:01Z")
    b = _warning("Newer", "b", eventTime="2026-12-02T10:00:01.500000Z")
    assert reconcile_failure(TJ, [b, a])[0] == "Newer"
    assert reconcile_failure(TJ, [a, b])[0] == "Newer"


def test_backoff_doubles_per_failure_from_5ms_to_1000s() -> None:
    b = Backoff()
    delays = [b.when("x") for _ in range(20)]
    assert delays[:4] == [BASE_DELAY, 2 * BASE_DELAY, 4 * BASE_DELAY, 8 * BASE_DELAY]
    assert [b.when("x") for _ in range(10)][-1] == MAX_DELAY
    assert b.when("y") == BASE_DELAY  # per item
    b.forget("x")
    assert b.when("x") == BASE_DELAY


@pytest.mark.slow
def test_a_refused_jobset_is_retried_and_its_event_series_grows(
    k8s_cluster: Any, k8s_namespace: str, k8s_standin: Any, k8s_admin_kubeconfig: str
) -> None:
    from kubernetes import client

    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig

    api = k8s_cluster.api_client()
    name = "r" * 50  # accepted as a TrainJob, its JobSet refused by the JobSet webhook
    created = create_raw_trainjob(api, k8s_namespace, name)
    uid = created["metadata"]["uid"]
    events = client.EventsV1Api(api)
    deadline = time.monotonic() + 60
    while k8s_standin.reconcile_failures(uid) < 6 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert k8s_standin.reconcile_failures(uid) >= 6  # retried, not given up after one
    [ev] = [
        e
        for e in events.list_namespaced_event(k8s_namespace).items
        if e.regarding.name == name and e.reason == "TrainJobResourcesCreationFailed"
    ]  # one Event for all the failures
    assert ev.action == "Reconciling" and ev.reporting_controller == "trainer-trainjob-controller"
    assert ev.note.startswith("TrainJob resources reconciliation failed: ")
    assert ev.series.count == 2  # written at the second failure; later ones wait for a refresh
    k8s_standin.flush_event_series()
    [ev] = [
        e for e in events.list_namespaced_event(k8s_namespace).items if e.regarding.name == name
    ]
    assert ev.series.count >= 6
    # the tool reads it through core/v1 and shows it as the job's waiting reason
    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )
    got = backend.get_job(name)
    assert got.reason == "TrainJobResourcesCreationFailed"
    assert "will exceed 63 characters" in got.message
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "trainjobs", name
    )
