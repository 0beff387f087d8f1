"""pytest fixtures: a real API server with the Trainer CRDs, the stand-in, kubeconfigs, namespaces.

- ``k8s_cluster`` (session): started ``ApiServer`` with CRDs, default runtimes, team-a/team-b RBAC,
  and the admission webhooks of a Trainer + JobSet cluster (``admission.py``: CEL, Trainer, JobSet).
- ``k8s_standin`` (session): the ``StandIn`` (Trainer controller + JobSet + kubelet) running on it.
- ``k8s_admin_kubeconfig`` / ``k8s_limited_kubeconfig`` (session): kubeconfig paths (str).
- ``k8s_namespace`` (function): a fresh namespace name; its TrainJobs are deleted afterwards.
- ``k8s_bare_cluster`` (session, lazy): a second ``ApiServer`` without CRDs.

Missing binary / etcd / manifests turn into ``pytest.skip`` with a plain message.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.k8s_cluster import HarnessUnavailable, crds, rbac
from tests.k8s_cluster.admission import AdmissionServer
from tests.k8s_cluster.apiserver import ApiServer
from tests.k8s_cluster.standin import StandIn

TIMINGS: dict[str, float] = {}


def _start(name: str) -> ApiServer:
    server = ApiServer(name)
    try:
        return server.start()
    except HarnessUnavailable as e:
        server.stop()
        pytest.skip(f"no Kubernetes API server for tests: {e}")


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[ApiServer]:
    t0 = time.monotonic()
    try:
        crds.load_crds()  # fail (skip) before starting anything
    except HarnessUnavailable as e:
        pytest.skip(f"no Kubeflow Trainer CRDs for tests: {e}")
    server = _start("kf-test")
    webhooks = AdmissionServer(server.kubeconfig_path, *server.server_cert, server.ca_file)
    try:
        api = server.api_client()
        webhooks.start()
        crds.install(api, before_runtimes=lambda: webhooks.install(api))
        rbac.install(api)
        server.webhooks = webhooks  # type: ignore[attr-defined]
        TIMINGS["apiserver_start_s"] = server.start_seconds
        TIMINGS["session_setup_s"] = time.monotonic() - t0
        TIMINGS["rss_after_setup_mb"] = server.rss_bytes() / 2**20
        yield server
    finally:
        if server.pids():
            TIMINGS["rss_at_end_mb"] = server.rss_bytes() / 2**20
        server.stop()
        webhooks.stop()


@pytest.fixture(scope="session")
def k8s_standin(k8s_cluster: ApiServer) -> Iterator[StandIn]:
    standin = StandIn(k8s_cluster.kubeconfig_path, *k8s_cluster.server_cert).start()
    try:
        yield standin
    finally:
        standin.stop()


@pytest.fixture(scope="session")
def k8s_admin_kubeconfig(k8s_cluster: ApiServer) -> str:
    return k8s_cluster.kubeconfig_path


@pytest.fixture(scope="session")
def k8s_limited_kubeconfig(k8s_cluster: ApiServer) -> str:
    return k8s_cluster.limited_kubeconfig_path


@pytest.fixture
def k8s_namespace(k8s_cluster: ApiServer) -> Iterator[str]:
    """A fresh namespace. Without a controller-manager, deleting it leaves it Terminating."""
    from kubernetes import client

    api = k8s_cluster.api_client()
    name = f"kft-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    yield name
    custom: Any = client.CustomObjectsApi(api)
    custom.delete_collection_namespaced_custom_object(crds.GROUP, crds.VERSION, name, "trainjobs")
    client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture(scope="session")
def k8s_bare_cluster() -> Iterator[ApiServer]:
    """A second API server without any CRDs; only started when a test asks for it."""
    server = _start("kf-bare")
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        figures = ", ".join(f"{k}={v:.1f}" for k, v in TIMINGS.items())
        terminalreporter.write_line(f"k8s harness: {figures}")


@pytest.fixture
def trainjob_status_gate() -> Iterator[None]:
    """The Trainer's TrainJobStatus feature gate on for one test (off by default, as in
    Trainer v2.3.0: tests/k8s_cluster/trainer_plugins.py FEATURE_GATES)."""
    from tests.k8s_cluster import trainer_plugins

    old = trainer_plugins.FEATURE_GATES["TrainJobStatus"]
    trainer_plugins.FEATURE_GATES["TrainJobStatus"] = True
    try:
        yield
    finally:
        trainer_plugins.FEATURE_GATES["TrainJobStatus"] = old
