"""The harness refuses what a Trainer v2.3 + JobSet v0.12 cluster refuses (issue 19).

The API server (1.20) calls the harness's admission webhooks: the CRDs' CEL rules (transition
rules included), the Trainer webhook's checks, and the JobSet webhook's name limits on the JobSet
the stand-in builds as the Trainer does (refused: only a TrainJobResourcesCreationFailed event).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from tests.k8s_cluster import trainer_model
from tests.k8s_cluster.cel import cel_errors
from tests.k8s_cluster.crds import crd_schema, load_runtimes

G, V = "trainer.kubeflow.org", "v1alpha1"


def _tj(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }


def _runtime(name: str) -> dict[str, Any]:
    return next(r for r in load_runtimes() if r["metadata"]["name"] == name)


# -- pure: the rules themselves ----------------------------------------------------------------


def test_cel_rules_at_their_schema_location() -> None:
    schema = crd_schema("TrainJob")
    assert cel_errors(schema, _tj("ok", trainer={"numProcPerNode": 2})) == []
    errs = cel_errors(schema, _tj("Bad_Name", managedBy="me", trainer={"numProcPerNode": 0}))
    assert sorted(map(str, errs)) == [
        '<nil>: Invalid value: "object": metadata.name must match RFC 1035 DNS label format',
        'spec.managedBy: Invalid value: "string": ManagedBy must be '
        "trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set",
        'spec.trainer.numProcPerNode: Invalid value: "integer": numProcPerNode must be greater '
        "than or equal to 1",
    ]


def test_cel_transition_rules_only_on_update_and_where_old_correlates() -> None:
    schema = crd_schema("TrainJob")
    patch = {"manager": "a.io/x", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "volumes": [{"name": "v", "emptyDir": {}}]}}}}}]}}}}  # fmt: skip
    old = _tj("j", trainer={"numNodes": 1}, runtimePatches=[patch])
    new = copy.deepcopy(old)
    assert cel_errors(schema, new, old) == []
    new["spec"]["trainer"]["numNodes"] = 2
    vols = new["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    vols["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"][0]["name"] = "w"
    fields = sorted(e.field for e in cel_errors(schema, new, old))
    assert fields == [
        "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template"
        ".spec.template.spec.volumes",
        "spec.trainer",
    ]
    # a patch of another manager does not correlate: no transition rule runs on it
    new2 = copy.deepcopy(old)
    new2["spec"]["runtimePatches"][0]["manager"] = "b.io/y"
    assert cel_errors(schema, new2, old) == []


def test_default_runtimes_pass_their_cel_rules() -> None:
    schema = crd_schema("ClusterTrainingRuntime")
    for rt in load_runtimes():
        assert cel_errors(schema, rt) == [], rt["metadata"]["name"]


@pytest.mark.parametrize(
    ("runtime", "nodes", "longest"),
    [("torch-distributed", 2, 48), ("torch-distributed", 11, 47), ("deepspeed-distributed", 3, 44)],
)
def test_jobset_pod_name_limit(runtime: str, nodes: int, longest: int) -> None:
    rt = _runtime(runtime)

    def errs(n: int) -> list[str]:
        tj = _tj("a" * n, trainer={"numNodes": nodes})
        tj["metadata"]["namespace"] = "ns"
        return trainer_model.jobset_errors(trainer_model.build_jobset(tj, rt))

    assert errs(longest) == []
    assert trainer_model.POD_NAME_TOO_LONG in errs(longest + 1)[0]


def test_strategic_merge_by_name() -> None:
    rt = _runtime("torch-distributed")
    patch = {"manager": "a.io/x", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "volumeMounts": [{"name": "w", "mountPath": "/w"}]}],
            "volumes": [{"name": "w", "emptyDir": {}}]}}}}}]}}}}  # fmt: skip
    spec = trainer_model.merge_patches(_tj("j", runtimePatches=[patch]), rt)
    [node] = spec["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    [ctr] = pod["containers"]
    assert ctr["image"] and ctr["volumeMounts"] == [{"name": "w", "mountPath": "/w"}]
    assert pod["volumes"] == [{"name": "w", "emptyDir": {}}]


# -- on the API server harness -----------------------------------------------------------------


@pytest.fixture
def custom(k8s_cluster: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(k8s_cluster.api_client())


def _refusal(fn: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    from kubernetes.client.rest import ApiException

    with pytest.raises(ApiException) as info:
        fn(*args, **kwargs)
    import json

    return info.value.status, json.loads(info.value.body)["message"]


def test_api_server_refuses_what_cel_refuses(custom: Any, k8s_namespace: str) -> None:
    code, msg = _refusal(
        custom.create_namespaced_custom_object, G, V, k8s_namespace, "trainjobs",
        _tj("bad-managed-by", managedBy="someone.io/else"),
    )  # fmt: skip
    assert code == 422
    assert msg.endswith(
        'TrainJob.trainer.kubeflow.org "bad-managed-by" is invalid: spec.managedBy: Invalid '
        'value: "string": ManagedBy must be trainer.kubeflow.org/trainjob-controller or '
        "kueue.x-k8s.io/multikueue if set"
    )


def test_api_server_refuses_changing_immutable_fields(custom: Any, k8s_namespace: str) -> None:
    custom.create_namespaced_custom_object(
        G, V, k8s_namespace, "trainjobs", _tj("held", suspend=True, trainer={"numNodes": 1})
    )
    code, msg = _refusal(
        custom.patch_namespaced_custom_object, G, V, k8s_namespace, "trainjobs", "held",
        {"spec": {"trainer": {"numNodes": 2}}},
    )  # fmt: skip
    assert code == 422 and 'spec.trainer: Invalid value: "object": field is immutable' in msg
    # a mutable field changes
    custom.patch_namespaced_custom_object(
        G, V, k8s_namespace, "trainjobs", "held", {"spec": {"suspend": True}}
    )


def test_api_server_refuses_what_the_trainer_webhook_refuses(
    custom: Any, k8s_namespace: str
) -> None:
    tj = _tj("reserved", trainer={"env": [{"name": "PET_NNODES", "value": "3"}]})
    code, msg = _refusal(
        custom.create_namespaced_custom_object, G, V, k8s_namespace, "trainjobs", tj
    )
    assert code == 403
    assert msg.startswith(
        'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '
        "spec.trainer.env: Invalid value: "
    )
    assert msg.endswith("must not have reserved envs, invalid envs configured: [PET_NNODES]")
    patch = {"manager": "kf.io/x", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]}}}}}]}}}}  # fmt: skip
    code, msg = _refusal(
        custom.create_namespaced_custom_object, G, V, k8s_namespace, "trainjobs",
        _tj("patch-env", runtimePatches=[patch]),
    )  # fmt: skip
    assert code == 403 and msg.endswith(
        "must not have envs for the dataset-initializer, model-initializer, node containers"
    )


def test_runtime_patches_get_their_time(custom: Any, k8s_namespace: str) -> None:
    patch = {"manager": "kf.io/x", "trainingRuntimeSpec": {"template": {"metadata": {
        "labels": {"a": "b"}}}}}  # fmt: skip
    created = custom.create_namespaced_custom_object(
        G, V, k8s_namespace, "trainjobs", _tj("timed", suspend=True, runtimePatches=[patch])
    )
    stamp = created["spec"]["runtimePatches"][0]["time"]
    assert stamp.endswith("Z")
    # changing the patch while running is refused by the Trainer webhook
    custom.patch_namespaced_custom_object(
        G, V, k8s_namespace, "trainjobs", "timed", {"spec": {"suspend": False}}
    )
    code, msg = _refusal(
        custom.patch_namespaced_custom_object, G, V, k8s_namespace, "trainjobs", "timed",
        {"spec": {"runtimePatches": [{**patch, "trainingRuntimeSpec": {"template": {"metadata": {
            "labels": {"a": "c"}}}}}]}},
    )  # fmt: skip
    assert (
        code == 403 and "RuntimePatches can only be modified when the TrainJob is suspended" in msg
    )


def test_too_long_for_the_jobset_webhook_only_an_event(
    custom: Any, k8s_namespace: str, k8s_standin: Any, k8s_cluster: Any
) -> None:
    """A 49-character name on a 2-node torch job: the TrainJob is created, its JobSet refused."""
    from kubernetes import client

    name = "n" * 49
    custom.create_namespaced_custom_object(
        G, V, k8s_namespace, "trainjobs",
        _tj(name, trainer={"numNodes": 2, "command": ["true"]}),
    )  # fmt: skip
    core = client.CoreV1Api(k8s_cluster.api_client())
    deadline = time.monotonic() + 60
    events: list[Any] = []
    while time.monotonic() < deadline and not events:
        events = [
            e
            for e in core.list_namespaced_event(k8s_namespace).items
            if e.reason == "TrainJobResourcesCreationFailed"
        ]
        time.sleep(0.3)
    assert events, "no TrainJobResourcesCreationFailed event"
    assert events[0].message == (
        'TrainJob resources reconciliation failed: admission webhook "vjobset.kb.io" denied '
        f'the request: JobSet.jobset.x-k8s.io "{name}" is invalid: spec.replicatedJobs[0].name: '
        f'Invalid value: "{name}-node-0": {trainer_model.POD_NAME_TOO_LONG}'
    )
    tj = custom.get_namespaced_custom_object(G, V, k8s_namespace, "trainjobs", name)
    assert not (tj.get("status") or {}).get("conditions")
    pods = core.list_namespaced_pod(k8s_namespace).items
    assert pods == []


def test_numprocpernode_auto_uses_the_runtimes_resources(
    custom: Any, k8s_namespace: str, k8s_standin: Any, k8s_cluster: Any
) -> None:
    """torch.go EnforceMLPolicy: without the job's resources, the runtime's node container's
    CPU request sets PET_NPROC_PER_NODE (max(1, CPU)); a resource named *gpu* makes it auto."""
    from kubernetes import client

    rt = copy.deepcopy(_runtime("torch-distributed"))
    rt["kind"] = "TrainingRuntime"
    rt["metadata"] = {"name": "torch-3cpu"}
    pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    custom.create_namespaced_custom_object(G, V, k8s_namespace, "trainingruntimes", rt)
    tj = _tj("auto-nproc", trainer={"command": ["true"]})
    tj["spec"]["runtimeRef"] = {"name": "torch-3cpu", "kind": "TrainingRuntime"}
    custom.create_namespaced_custom_object(G, V, k8s_namespace, "trainjobs", tj)
    core = client.CoreV1Api(k8s_cluster.api_client())
    deadline = time.monotonic() + 60
    pods: list[Any] = []
    while time.monotonic() < deadline and not pods:
        pods = core.list_namespaced_pod(k8s_namespace).items
        time.sleep(0.3)
    assert pods, "no pod"
    env = {e.name: e.value for e in pods[0].spec.containers[0].env}
    assert env["PET_NPROC_PER_NODE"] == "3"


def test_pods_come_from_the_jobset_with_the_patches_merged(
    custom: Any, k8s_namespace: str, k8s_standin: Any, k8s_cluster: Any
) -> None:
    """The stand-in creates the JobSet the Trainer builds and runs its pods from it."""
    from kubernetes import client

    patch = {"manager": "kf.io/x", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {"pool": "a"}}}}}}]}}}}  # fmt: skip
    tj = _tj("from-jobset", trainer={"numNodes": 2, "command": ["true"]}, runtimePatches=[patch])
    custom.create_namespaced_custom_object(G, V, k8s_namespace, "trainjobs", tj)
    core = client.CoreV1Api(k8s_cluster.api_client())
    deadline = time.monotonic() + 60
    pods: list[Any] = []
    while time.monotonic() < deadline and len(pods) < 2:
        pods = core.list_namespaced_pod(k8s_namespace).items
        time.sleep(0.3)
    js = custom.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", k8s_namespace, "jobsets", "from-jobset"
    )
    [node] = js["spec"]["replicatedJobs"]
    assert node["template"]["spec"]["completions"] == 2
    assert node["template"]["spec"]["completionMode"] == "Indexed"  # the JobSet defaulter
    pod_tmpl = node["template"]["spec"]["template"]["spec"]
    assert pod_tmpl["nodeSelector"] == {"pool": "a"}
    assert pod_tmpl["containers"][0]["command"] == ["true"]
    assert sorted(p.metadata.name for p in pods) == ["from-jobset-node-0-0", "from-jobset-node-0-1"]
    assert all(p.spec.node_selector == {"pool": "a"} for p in pods)
