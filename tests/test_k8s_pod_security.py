"""Restricted namespaces on the harness (issue 19 item 11): the harness refuses pods as a cluster's
Pod Security admission does (tests/k8s_cluster/pod_security.py), a refused pod is no pod and only
a `FailedCreate` event on its Job (tests/k8s_cluster/pod_creation.py), and the tool reads it,
refuses such a job before submitting, and runs it with the `PodSecurity` option."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from kf_jupyter import JobFailedError, TorchTrainer, ValidationError
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.options import (
    ContainerOverride,
    PodSecurity,
    PodSpecOverride,
    PodTemplateOverride,
    PodTemplateOverrides,
)
from kf_jupyter.types import COMPLETE, CREATED
from tests.refused_jobs import assert_the_reason_shows_everywhere

pytestmark = pytest.mark.slow
ENFORCE = "pod-security.kubernetes.io/enforce"


def whoami() -> dict:
    import os

    print(f"rank {os.environ.get('RANK')} writes to", os.environ.get("TMPDIR", "/tmp"), flush=True)
    return {"ok": True}


def _label(cluster: Any, namespace: str, level: str) -> None:
    from kubernetes import client

    body = {"metadata": {"labels": {ENFORCE: level}}}
    client.CoreV1Api(cluster.api_client()).patch_namespace(namespace, body)


def _backend(kubeconfig: str, namespace: str) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    cfg = KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig)
    return KubernetesBackend(cfg)


@pytest.fixture
def restricted(k8s_cluster: Any, k8s_namespace: str, k8s_standin: Any) -> str:
    _label(k8s_cluster, k8s_namespace, "restricted")
    return k8s_namespace


@pytest.fixture
def limited_ns(k8s_cluster: Any, k8s_namespace: str, k8s_standin: Any) -> Iterator[str]:
    """A restricted namespace where the `limited` user may run jobs but, like most users, may
    not read the namespace object (so its labels)."""
    from kubernetes import client

    from tests.k8s_cluster.rbac import _TEAM_RULES, LIMITED_USER

    rbac = client.RbacAuthorizationV1Api(k8s_cluster.api_client())
    name = "kf-pss-limited"
    rbac.create_namespaced_role(k8s_namespace, {"metadata": {"name": name}, "rules": _TEAM_RULES})
    rbac.create_namespaced_role_binding(k8s_namespace, {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "User", "name": LIMITED_USER,
                      "apiGroup": "rbac.authorization.k8s.io"}]})  # fmt: skip
    _label(k8s_cluster, k8s_namespace, "restricted")
    yield k8s_namespace


def test_without_the_option_the_job_is_refused_before_submitting(restricted: str, k8s_admin_kubeconfig: str) -> None:  # fmt: skip
    backend = _backend(k8s_admin_kubeconfig, restricted)
    trainer = TorchTrainer(func=whoami, num_nodes=2)
    with pytest.raises(ValidationError) as info:
        backend.train(trainer)
    text = str(info.value)
    assert f"Namespace {restricted!r} enforces Pod Security 'restricted'" in text
    assert "allowPrivilegeEscalation != false" in text and "runAsNonRoot != true" in text
    assert "Add the PodSecurity('restricted') option" in text
    assert backend.list_jobs() == []  # nothing was created
    plan = backend.dry_run(trainer)
    assert plan["pod_security"] == {"level": "restricted:latest", "refused": text}
    from kf_jupyter.dryrun import summary_lines

    [line] = [ln for ln in summary_lines(plan) if ln.startswith("security")]
    assert "REFUSED" in line
    ok = backend.dry_run(trainer, options=[PodSecurity()])
    assert ok["pod_security"] == {"level": "restricted:latest", "refused": None}


def test_unreadable_labels_a_refused_pod_is_the_reason_and_ends_the_wait(
    limited_ns: str, k8s_limited_kubeconfig: str, k8s_cluster: Any
) -> None:
    """The user cannot read the namespace's labels, so the job is submitted; the API server
    refuses each pod (Pod Security), the Job controller says so only in events on the Job."""
    from kubernetes import client

    backend = _backend(k8s_limited_kubeconfig, limited_ns)
    name = backend.train(TorchTrainer(func=whoami, num_nodes=2))
    t0 = time.monotonic()
    with pytest.raises(JobFailedError) as info:
        backend.wait_for_job_status(name, timeout=120)
    assert time.monotonic() - t0 < 60, "waited for the timeout"
    text = str(info.value)
    assert "will not start (FailedCreate)" in text and "\n" not in text
    assert (
        f'Error creating: pods "{name}-node-0-0" is forbidden' not in text  # prefix taken off
        and f'pods "{name}-node-0-0" is forbidden: violates PodSecurity "restricted:latest": '
        'allowPrivilegeEscalation != false (container "node" must set '
        "securityContext.allowPrivilegeEscalation=false), unrestricted capabilities"
        in text
    )
    assert "PodSecurity('restricted')" in text
    got = backend.get_job(name)
    assert got.status == CREATED and got.reason == "FailedCreate" and got.steps == []
    assert "violates PodSecurity" in got.message
    assert_the_reason_shows_everywhere(backend, got)
    # a refused pod is no pod; the Job controller retries with back-off, one event counting up
    core = client.CoreV1Api(k8s_cluster.api_client())
    assert core.list_namespaced_pod(limited_ns).items == []
    end = time.monotonic() + 30
    while True:
        events = [e for e in backend.get_job_events(name) if e.reason == "FailedCreate"]
        raw = core.list_namespaced_event(limited_ns, field_selector="reason=FailedCreate").items
        if any((e.count or 1) >= 2 for e in raw) or time.monotonic() > end:
            break
        time.sleep(0.5)
    assert {e.involved_object for e in events} == {f"Job/{name}-node-0"}
    assert events[0].message.startswith(f'Error creating: pods "{name}-node-0-')
    assert max(e.count or 1 for e in raw) >= 2 and len(raw) == 2  # node-0-0 and node-0-1
    assert {e.source.component for e in raw} == {"job-controller"}


def test_with_the_option_the_pods_are_admitted_and_run_to_completion(
    restricted: str, k8s_admin_kubeconfig: str, k8s_cluster: Any
) -> None:
    from kubernetes import client

    backend = _backend(k8s_admin_kubeconfig, restricted)
    name = backend.train(TorchTrainer(func=whoami, num_nodes=2), options=[PodSecurity()])
    job = backend.wait_for_job_status(name, timeout=240)
    assert job.status == COMPLETE
    assert backend.get_job_result(name) == {"ok": True}
    pods = client.CoreV1Api(k8s_cluster.api_client()).list_namespaced_pod(restricted).items
    assert len(pods) == 2
    for pod in pods:  # non-root-shaped, as the API server admitted it
        sc = pod.spec.security_context
        assert (sc.run_as_non_root, sc.run_as_user) == (True, 1000)
        assert sc.seccomp_profile.type == "RuntimeDefault"
        c = pod.spec.containers[0].security_context
        assert c.allow_privilege_escalation is False and c.capabilities.drop == ["ALL"]


def test_a_baseline_namespace_takes_the_default_pods_and_refuses_a_privileged_one(
    k8s_cluster: Any, k8s_namespace: str, k8s_standin: Any, k8s_admin_kubeconfig: str
) -> None:
    _label(k8s_cluster, k8s_namespace, "baseline")
    backend = _backend(k8s_admin_kubeconfig, k8s_namespace)
    trainer = TorchTrainer(func=whoami)
    assert backend.dry_run(trainer)["pod_security"] == {"level": "baseline:latest",
                                                       "refused": None}  # fmt: skip
    privileged = PodTemplateOverrides(PodTemplateOverride(["node"], spec=PodSpecOverride(
        containers=[ContainerOverride("node", security_context={"privileged": True})])))  # fmt: skip
    with pytest.raises(ValidationError) as info:
        backend.train(trainer, options=[privileged])
    assert "enforces Pod Security 'baseline'" in str(info.value)
    assert 'privileged (container "node" must not set' in str(info.value)
    # submitted anyway (kubectl, an older kf-jupyter): the API server refuses its pod
    from kf_jupyter.build import build_trainjob
    from kf_jupyter.constants import GROUP, VERSION

    rt = next(r for r in backend.list_runtimes() if r.name == "torch-distributed")
    job = build_trainjob(trainer, rt, None, [privileged], backend=backend)
    from kubernetes import client

    client.CustomObjectsApi(k8s_cluster.api_client()).create_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "trainjobs", job
    )
    name = job["metadata"]["name"]
    from tests.test_k8s_waiting import _waiting

    got = _waiting(backend, name, "FailedCreate")
    assert 'violates PodSecurity "baseline:latest": privileged (container "node" must not set ' \
        "securityContext.privileged=true)" in got.message  # fmt: skip
