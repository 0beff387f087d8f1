"""Pod Security admission (issue 19 item 11), pure: the harness's stand-in for the API server's
check (tests/k8s_cluster/pod_security.py) words its refusals as a real cluster does, the tool's
own check (kf_jupyter/pod_security.py) finds the same violations before submitting, and the
`PodSecurity` option makes every default runtime's pods pass `restricted`."""

from __future__ import annotations

from typing import Any

import pytest

from kf_jupyter import JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer
from kf_jupyter import pod_security as tool
from kf_jupyter.build import build_trainjob
from kf_jupyter.errors import OptionError
from kf_jupyter.options import (
    ContainerOverride,
    PodSecurity,
    PodSpecOverride,
    PodTemplateOverride,
    PodTemplateOverrides,
)
from kf_jupyter.runtimes import Runtime
from tests.k8s_cluster import pod_security as harness
from tests.k8s_cluster.crds import load_runtimes
from tests.k8s_cluster.trainer_model import build_jobset

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
BASELINE = {"pod-security.kubernetes.io/enforce": "baseline"}
RUNTIMES = {r["metadata"]["name"]: r for r in load_runtimes()}


def _pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


# What real clusters printed (quoted in public write-ups of `kubectl apply` in a restricted
# namespace), and the pods that produced them.
REAL = [
    (
        _pod("security-violations", {
            "containers": [{"name": "violation-container", "image": "nginx", "securityContext": {
                "privileged": True, "runAsUser": 0,
                "capabilities": {"add": ["NET_ADMIN", "SYS_ADMIN"]}}}],
            "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}]}),
        'pods "security-violations" is forbidden: violates PodSecurity "restricted:latest": '
        'privileged (container "violation-container" must not set securityContext.privileged='
        'true), allowPrivilegeEscalation != false (container "violation-container" must set '
        'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container '
        '"violation-container" must set securityContext.capabilities.drop=["ALL"]; container '
        '"violation-container" must not include "NET_ADMIN", "SYS_ADMIN" in securityContext.'
        'capabilities.add), restricted volume types (volume "host-root" uses restricted volume '
        'type "hostPath"), runAsNonRoot != true (pod or container "violation-container" must '
        "set securityContext.runAsNonRoot=true), runAsUser=0 (container \"violation-container\" "
        'must not set runAsUser=0), seccompProfile (pod or container "violation-container" must '
        'set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")',
    ),
    (
        _pod("privileged-pod", {
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "privileged-pod-nginx", "image": "nginx", "securityContext": {
                "runAsNonRoot": False, "runAsUser": 0, "capabilities": {"drop": ["ALL"]}}}]}),
        'pods "privileged-pod" is forbidden: violates PodSecurity "restricted:latest": '
        'allowPrivilegeEscalation != false (container "privileged-pod-nginx" must set '
        "securityContext.allowPrivilegeEscalation=false), runAsNonRoot != true (container "
        '"privileged-pod-nginx" must not set securityContext.runAsNonRoot=false), runAsUser=0 '
        '(container "privileged-pod-nginx" must not set runAsUser=0)',
    ),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "message"), REAL, ids=["many", "explicit"])
def test_the_harness_refuses_with_the_real_clusters_words(pod: dict, message: str) -> None:
    assert harness.refusal(pod, RESTRICTED) == message
    # the tool names the same checks, in the same order
    reasons = [v.split(" (")[0] for v in tool.violations(pod["spec"], "restricted")]
    assert reasons == [r.split(" (")[0] for r in message.split('"restricted:latest": ')[1]
                       .split("), ")]  # fmt: skip


def test_levels_versions_and_labels_that_do_not_enforce() -> None:
    pod = _pod("p", {"hostNetwork": True, "hostPID": True, "containers": [{"name": "c"}]})
    assert harness.refusal(pod, {"pod-security.kubernetes.io/enforce": "privileged"}) is None
    assert harness.refusal(pod, {"pod-security.kubernetes.io/warn": "restricted"}) is None
    assert harness.refusal(pod, {"pod-security.kubernetes.io/audit": "restricted"}) is None
    text = harness.refusal(pod, {**BASELINE, "pod-security.kubernetes.io/enforce-version": "v1.30"})
    assert text == (
        'pods "p" is forbidden: violates PodSecurity "baseline:v1.30": host namespaces '
        "(hostNetwork=true, hostPID=true)"
    )
    assert tool.enforced_level({"pod-security.kubernetes.io/enforce": "bogus"}) == (
        "restricted",
        "latest",
    )


def _job(runtime: str, trainer: Any, options: list[Any]) -> tuple[dict[str, Any], Runtime]:
    rt = Runtime.from_manifest(RUNTIMES[runtime])
    return build_trainjob(trainer, rt, None, options, backend="kubernetes"), rt


def _hello() -> None:
    print("hello")


CASES = [
    ("torch-distributed", TorchTrainer(func=_hello, num_nodes=2)),
    ("deepspeed-distributed", MPITrainer(func=_hello, num_nodes=2)),
    ("mlx-distributed", MPITrainer(func=_hello, num_nodes=3)),
    ("jax-distributed", JAXTrainer(func=_hello)),
    ("xgboost-distributed", XGBoostTrainer(func=_hello, num_nodes=2)),
    ("torchtune-llama3.2-1b", TorchTrainer(func=_hello)),
]


@pytest.mark.parametrize(("runtime", "trainer"), CASES, ids=[c[0] for c in CASES])
def test_the_option_makes_every_pod_of_every_default_runtime_pass_restricted(
    runtime: str, trainer: Any
) -> None:
    bare, rt = _job(runtime, trainer, [])
    # without it: refused before submitting, one paragraph naming the level, checks, option
    text = tool.refusal(bare, rt, RESTRICTED, "team")
    assert text is not None and "\n" not in text
    assert "enforces Pod Security 'restricted'" in text
    assert "allowPrivilegeEscalation != false" in text and "seccompProfile" in text
    assert "Add the PodSecurity('restricted') option" in text
    assert tool.refusal(bare, rt, BASELINE, "team") is None  # the defaults pass baseline
    assert tool.refusal(bare, rt, {}, "team") is None
    job, _ = _job(runtime, trainer, [PodSecurity()])
    assert len(job["spec"]["runtimePatches"]) == 1  # in kf-jupyter's one patch
    assert tool.refusal(job, rt, RESTRICTED, "team") is None
    # and the pods of the JobSet the Trainer builds from it pass the harness's check
    js = build_jobset(job, RUNTIMES[runtime])
    for rj in js["spec"]["replicatedJobs"]:
        pod = rj["template"]["spec"]["template"]
        assert harness.violations(pod["spec"], "restricted") == [], rj["name"]
        assert pod["spec"]["securityContext"]["runAsUser"] == 1000
    bare_js = build_jobset(bare, RUNTIMES[runtime])
    assert all(
        harness.violations(rj["template"]["spec"]["template"]["spec"], "restricted")
        for rj in bare_js["spec"]["replicatedJobs"]
    )


def test_the_option_keeps_other_overrides_and_cannot_undo_a_privileged_container() -> None:
    override = PodTemplateOverrides(
        PodTemplateOverride(["node"], spec=PodSpecOverride(
            security_context={"fsGroup": 2000},
            containers=[ContainerOverride("node", security_context={"privileged": True})])))  # fmt: skip
    trainer = TorchTrainer(func=_hello)
    job, rt = _job("torch-distributed", trainer, [PodSecurity(run_as_user=1234), override])
    [patch] = job["spec"]["runtimePatches"]
    [node] = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"fsGroup": 2000, **tool.restricted_pod(1234)}
    assert pod["containers"] == [{"name": "node", "securityContext": {
        "privileged": True, **tool.RESTRICTED_CONTAINER}}]  # fmt: skip
    text = tool.refusal(job, rt, RESTRICTED, "team")
    assert text is not None
    assert 'privileged (container "node" must not set securityContext.privileged=true)' in text
    assert "Besides the PodSecurity('restricted') option, remove" in text
    text = tool.refusal(job, rt, BASELINE, "team")
    assert text is not None and "enforces Pod Security 'baseline'" in text
    assert "PodSecurity(" not in text


def test_the_option_refuses_what_it_cannot_mean() -> None:
    with pytest.raises(OptionError, match="takes level 'restricted'"):
        PodSecurity("baseline")
    with pytest.raises(OptionError, match="non-root user id"):
        PodSecurity(run_as_user=0)


ODD_PODS = [
    {"hostNetwork": True, "hostIPC": True, "containers": [
        {"name": "a", "ports": [{"containerPort": 80, "hostPort": 80}, {"hostPort": 8080}]},
        {"name": "b", "ports": [{"hostPort": 9}]}]},
    {"securityContext": {"seccompProfile": {"type": "Unconfined"}, "runAsUser": 0},
     "initContainers": [{"name": "i", "securityContext": {"runAsNonRoot": True}}],
     "containers": [{"name": "a", "securityContext": {
         "capabilities": {"add": ["SYS_ADMIN", "NET_RAW", "CHOWN"], "drop": ["ALL"]},
         "seccompProfile": {"type": "Bogus"}, "allowPrivilegeEscalation": False}}],
     "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "n", "nfs": {}},
                 {"name": "e", "emptyDir": {}}]},
    {"securityContext": {"runAsNonRoot": False}, "containers": [
        {"name": "a", "securityContext": {"privileged": True, "runAsNonRoot": True}},
        {"name": "b", "securityContext": {"runAsNonRoot": False, "runAsUser": 0}}]},
]  # fmt: skip


@pytest.mark.parametrize("pod", ODD_PODS, ids=["host", "mixed", "explicit"])
@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_the_tool_and_the_harness_find_the_same_violations(pod: dict, level: str) -> None:
    """Two implementations written apart (the tool's, and the harness's stand-in for the API
    server): the tool refuses before submitting exactly what the API server would."""
    found = tool.violations(pod, level)
    assert found and found == [f"{r} ({d})" for r, d in harness.violations(pod, level)]
