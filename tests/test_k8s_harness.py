"""The Kubernetes test harness itself: real API server, real Trainer CRDs, the stand-in."""

from __future__ import annotations

import base64
import shutil
import time
from collections.abc import Callable
from typing import Any, TypeVar

import jsonschema
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s_cluster.apiserver import ApiServer
from tests.k8s_cluster.crds import GROUP, VERSION, crd_schema
from tests.k8s_cluster.standin import StandIn

pytestmark = pytest.mark.slow
T = TypeVar("T")


def wait_for(fn: Callable[[], T | None], timeout: float = 60, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = fn()
        except ApiException as e:  # not created yet
            if e.status != 404:
                raise
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def trainjob(name: str, command: list[str], num_nodes: int = 1, **trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": num_nodes, "command": command, **trainer},
        },
    }


def condition(custom: Any, ns: str, name: str) -> dict[str, Any] | None:
    tj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", name)
    for c in tj.get("status", {}).get("conditions", []):
        if c["type"] in ("Complete", "Failed") and c["status"] == "True":
            return c
    return None


def pods(core: Any, ns: str, selector: str) -> list[Any]:
    return list(core.list_namespaced_pod(ns, label_selector=selector).items)


@pytest.fixture
def apis(k8s_cluster: ApiServer) -> tuple[client.CoreV1Api, Any]:
    api = k8s_cluster.api_client()
    return client.CoreV1Api(api), client.CustomObjectsApi(api)


def test_crd_schema_validates_without_a_server() -> None:
    schema = crd_schema("TrainJob")
    good = trainjob("ok", ["true"], num_nodes=2)
    jsonschema.validate(good, schema)
    bad = trainjob("bad", ["true"], num_nodes=-1)
    with pytest.raises(jsonschema.ValidationError, match="minimum"):
        jsonschema.validate(bad, schema)
    # the 1.20 fix: no `default: ""` left anywhere
    assert '"default": ""' not in str(schema).replace("'", '"')


def test_trainjobs_are_served(apis: tuple[Any, Any], k8s_namespace: str) -> None:
    _, custom = apis
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "trainjobs")
    assert (listed["kind"], listed["items"]) == ("TrainJobList", [])


def test_default_runtimes_with_framework_labels(apis: tuple[Any, Any]) -> None:
    _, custom = apis
    items = custom.list_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes")["items"]
    frameworks = {
        r["metadata"]["name"]: r["metadata"]["labels"]["trainer.kubeflow.org/framework"]
        for r in items
    }
    assert frameworks["torch-distributed"] == "torch"
    assert frameworks["torch-distributed-with-cache"] == "torch"
    assert frameworks["jax-distributed"] == "jax"
    assert frameworks["xgboost-distributed"] == "xgboost"
    assert frameworks["deepspeed-distributed"] == "deepspeed"
    assert frameworks["mlx-distributed"] == "mlx"
    assert frameworks["torchtune-llama3.2-1b"] == "torchtune"
    assert sorted(set(frameworks.values())) == [
        "deepspeed",
        "jax",
        "mlx",
        "torch",
        "torchtune",
        "xgboost",
    ]


def test_invalid_trainjob_is_rejected_with_field_errors(
    apis: tuple[Any, Any], k8s_namespace: str
) -> None:
    _, custom = apis
    body = trainjob("bad", ["true"], num_nodes=-1)
    body["spec"]["runtimeRef"]["name"] = ""
    with pytest.raises(ApiException) as exc:
        custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "trainjobs", body)
    assert exc.value.status == 422
    assert "spec.trainer.numNodes" in exc.value.body
    assert "spec.runtimeRef.name" in exc.value.body


def test_limited_user_is_confined_to_team_a(k8s_cluster: ApiServer) -> None:
    custom = client.CustomObjectsApi(k8s_cluster.api_client(limited=True))
    assert (
        custom.list_namespaced_custom_object(GROUP, VERSION, "team-a", "trainjobs")["items"] == []
    )
    with pytest.raises(ApiException) as exc:
        custom.list_namespaced_custom_object(GROUP, VERSION, "team-b", "trainjobs")
    assert exc.value.status == 403
    assert custom.list_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes")["items"]


def test_torch_job_end_to_end_through_the_standin(
    apis: tuple[Any, Any], k8s_standin: StandIn, k8s_namespace: str
) -> None:
    core, custom = apis
    ns = k8s_namespace
    cmd = 'python3 -c \'import os; print(os.environ["PET_NODE_RANK"], os.environ["PET_NNODES"])\''
    body = trainjob("e2e", ["bash", "-c", cmd], num_nodes=2)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", body)

    cond = wait_for(lambda: condition(custom, ns, "e2e"), what="TrainJob e2e to finish")
    assert (cond["type"], cond["reason"]) == ("Complete", "AllJobsCompleted")
    job_pods = pods(core, ns, "jobset.sigs.k8s.io/jobset-name=e2e")
    assert sorted(p.metadata.name for p in job_pods) == ["e2e-node-0-0", "e2e-node-0-1"]
    for pod in job_pods:
        labels = pod.metadata.labels
        rank = labels["batch.kubernetes.io/job-completion-index"]
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        assert pod.metadata.name == f"e2e-node-0-{rank}"
        assert pod.status.phase == "Succeeded"
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["PET_MASTER_ADDR"] == "e2e-node-0-0.e2e"  # the pod keeps the real values
        assert env["PET_MASTER_PORT"] == "29500"
        # through the API server's log proxy to the stand-in kubelet
        text = core.read_namespaced_pod_log(pod.metadata.name, ns, container="node")
        assert text == f"{rank} 2\n"
    tj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", "e2e")
    assert tj["status"]["jobsStatus"] == [
        {"name": "node", "active": 0, "ready": 0, "succeeded": 1, "failed": 0, "suspended": 0}
    ]


def test_failed_job_and_secret_env(
    apis: tuple[Any, Any], k8s_standin: StandIn, k8s_namespace: str
) -> None:
    core, custom = apis
    ns = k8s_namespace
    core.create_namespaced_secret(
        ns, {"metadata": {"name": "tok"}, "data": {"k": base64.b64encode(b"s3cret").decode()}}
    )
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "k"}}}]
    body = trainjob("fails", ["bash", "-c", 'echo "token=$TOKEN"; exit 3'], env=env)
    old_scale, k8s_standin.backoff_scale = k8s_standin.backoff_scale, 0.02
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", body)

        def restarted() -> Any:  # OnFailure (the JobSet webhook's default): restarted in place
            pod = core.read_namespaced_pod("fails-node-0-0", ns)
            cs = (pod.status.container_statuses or [None])[0]
            return pod if cs is not None and cs.last_state.terminated else None

        pod = wait_for(restarted, what="the container restarted")
        assert pod.status.container_statuses[0].last_state.terminated.exit_code == 3
        assert core.read_namespaced_pod_log("fails-node-0-0", ns, previous=True) == (
            "token=s3cret\n"
        )
        cond = wait_for(lambda: condition(custom, ns, "fails"), what="TrainJob fails to finish")
    finally:
        k8s_standin.backoff_scale = old_scale
    assert (cond["type"], cond["reason"]) == ("Failed", "FailedJobs")
    # past backoffLimit the Job's pods are deleted (tests/k8s_cluster/restarts.py)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("fails-node-0-0", ns)
    assert gone.value.status == 404


def test_follow_logs_stream_and_tail(
    apis: tuple[Any, Any], k8s_standin: StandIn, k8s_namespace: str
) -> None:
    core, custom = apis
    ns = k8s_namespace
    script = "for i in 1 2 3 4 5; do echo line $i; sleep 0.4; done"
    custom.create_namespaced_custom_object(
        GROUP, VERSION, ns, "trainjobs", trainjob("follow", ["bash", "-c", script])
    )
    wait_for(
        lambda: core.read_namespaced_pod("follow-node-0-0", ns).status.phase == "Running",
        what="pod Running",
    )
    resp = core.read_namespaced_pod_log("follow-node-0-0", ns, follow=True, _preload_content=False)
    arrivals: list[tuple[float, bytes]] = []
    for chunk in resp.stream(64):
        arrivals.append((time.monotonic(), chunk))
    text = b"".join(c for _, c in arrivals).decode()
    assert text == "".join(f"line {i}\n" for i in range(1, 6))
    assert arrivals[-1][0] - arrivals[0][0] > 0.8, "follow=True returned everything at once"
    tail = core.read_namespaced_pod_log("follow-node-0-0", ns, tail_lines=2)
    assert tail == "line 4\nline 5\n"


def test_restart_apiserver_keeps_data_and_standin_recovers(
    k8s_cluster: ApiServer, k8s_standin: StandIn, k8s_namespace: str
) -> None:
    ns = k8s_namespace
    core = client.CoreV1Api(k8s_cluster.api_client())
    core.create_namespaced_config_map(ns, {"metadata": {"name": "keep"}, "data": {"a": "1"}})
    port = k8s_cluster.port
    seconds = k8s_cluster.restart_apiserver()
    assert seconds < 60
    assert k8s_cluster.port == port
    api = k8s_cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    assert core.read_namespaced_config_map("keep", ns).data == {"a": "1"}
    # the stand-in's watch reconnects and still runs new jobs
    body = trainjob("after", ["bash", "-c", "echo $PET_NODE_RANK"])
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", body)
    cond = wait_for(lambda: condition(custom, ns, "after"), what="TrainJob after restart")
    assert cond["type"] == "Complete"


def test_deleting_a_trainjob_kills_and_deletes_its_pods(
    apis: tuple[Any, Any], k8s_standin: StandIn, k8s_namespace: str
) -> None:
    core, custom = apis
    ns = k8s_namespace
    body = trainjob("long", ["sleep", "300"], num_nodes=2)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", body)
    sel = "jobset.sigs.k8s.io/jobset-name=long"
    wait_for(
        lambda: (
            all(p.status.phase == "Running" for p in pods(core, ns, sel))
            and len(pods(core, ns, sel)) == 2
        ),
        what="running pods",
    )
    custom.delete_namespaced_custom_object(
        GROUP, VERSION, ns, "trainjobs", "long", propagation_policy="Foreground"
    )
    wait_for(lambda: not pods(core, ns, sel), what="pods deleted")
    wait_for(
        lambda: (
            not custom.list_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs")["items"]
            or None
        ),
        what="TrainJob gone (foreground finalizer dropped)",
    )


def test_bare_cluster_has_no_trainer_crds(k8s_bare_cluster: ApiServer) -> None:
    custom = client.CustomObjectsApi(k8s_bare_cluster.api_client())
    with pytest.raises(ApiException) as exc:
        custom.list_namespaced_custom_object(GROUP, VERSION, "default", "trainjobs")
    assert exc.value.status == 404


@pytest.mark.parametrize(
    ("runtime", "script", "expected"),
    [
        (
            "jax-distributed",
            "echo $JAX_PROCESS_ID $JAX_NUM_PROCESSES ${JAX_COORDINATOR_ADDRESS%:*}",
            ["0 2 127.0.0.1", "1 2 127.0.0.1"],
        ),
        (
            "xgboost-distributed",
            "echo $DMLC_TASK_ID $DMLC_NUM_WORKER $DMLC_TRACKER_URI",
            ["0 2 127.0.0.1", "1 2 127.0.0.1"],
        ),
    ],
)
def test_policy_env_per_framework(
    apis: tuple[Any, Any],
    k8s_standin: StandIn,
    k8s_namespace: str,
    runtime: str,
    script: str,
    expected: list[str],
) -> None:
    core, custom = apis
    ns = k8s_namespace
    body = trainjob("fw", ["bash", "-c", script], num_nodes=2)
    body["spec"]["runtimeRef"]["name"] = runtime
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", body)
    cond = wait_for(lambda: condition(custom, ns, "fw"), what=f"{runtime} job")
    assert cond["type"] == "Complete", cond
    logs = [core.read_namespaced_pod_log(f"fw-node-0-{i}", ns).strip() for i in range(2)]
    assert logs == expected


@pytest.mark.skipif(not shutil.which("mpirun"), reason="OpenMPI (mpirun) is not installed")
def test_mpi_launcher_runs_mpirun_over_the_hostfile(
    apis: tuple[Any, Any], k8s_standin: StandIn, k8s_namespace: str
) -> None:
    core, custom = apis
    ns = k8s_namespace
    cmd = "mpirun --hostfile /etc/mpi/hostfile bash -c 'echo rank=$OMPI_COMM_WORLD_RANK'"
    body = trainjob("mpi", ["bash", "-c", cmd], num_nodes=2)
    body["spec"]["runtimeRef"]["name"] = "deepspeed-distributed"  # runLauncherAsNode: true
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "trainjobs", body)
    cond = wait_for(lambda: condition(custom, ns, "mpi"), what="MPI job")
    assert cond["type"] == "Complete", cond
    names = sorted(p.metadata.name for p in pods(core, ns, "jobset.sigs.k8s.io/jobset-name=mpi"))
    assert names == ["mpi-launcher-0-0", "mpi-node-0-0"]
    launcher = core.read_namespaced_pod("mpi-launcher-0-0", ns)
    env = {e.name: e.value for e in launcher.spec.containers[0].env}
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_orte_set_default_slots"] == "1"
    lines = core.read_namespaced_pod_log("mpi-launcher-0-0", ns).split()
    assert sorted(x for x in lines if x.startswith("rank=")) == ["rank=0", "rank=1"]
