"""Issue 19 (e): the harness's JobSet holds what the Trainer v2.3.0 plugins put in it.

The real plugins add their env (`PET_*`, `JAX_*`, `DMLC_*`, `OMPI_*`, `KUBEFLOW_TRAINER_*`),
ports and volumes (MPI's SSH-key Secret and hostfile ConfigMap, the status token projection) to
the runtime's pod sets, and the JobSet plugin writes them into the JobSet's pod templates, from
which the Job controller creates the pods (tests/k8s_cluster/trainer_plugins.py cites the
sources). Before, the stand-in built a JobSet without them and added the env to each pod itself:
these tests read the JobSet the harness created and failed on its pod templates.
"""

from __future__ import annotations

from typing import Any

import pytest

from kf_jupyter import JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.types import COMPLETE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("trainjob_status_gate")]

INDEX = {
    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
}
STATUS = "/var/run/secrets/kubeflow/trainer"


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    cfg = KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    return KubernetesBackend(cfg)


def _noop() -> None:
    pass


def _jobset(k8s_cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    api = client.CustomObjectsApi(k8s_cluster.api_client())
    return api.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", namespace, "jobsets", name
    )


def _node(js: dict[str, Any], rjob: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod spec, container `node`) of replicated job `rjob` in the JobSet."""
    [rj] = [r for r in js["spec"]["replicatedJobs"] if r["name"] == rjob]
    pod = rj["template"]["spec"]["template"]["spec"]
    [c] = [c for c in pod["containers"] if c["name"] == "node"]
    return pod, c


def _env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("valueFrom") or e.get("value") for e in c.get("env") or []}


def _status_parts(namespace: str, name: str, pod: dict[str, Any], c: dict[str, Any]) -> None:
    env = _env(c)
    url = env["KUBEFLOW_TRAINER_SERVER_URL"]
    assert url.endswith(
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
    )
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == f"{STATUS}/token"
    assert {"name": "kubeflow-trainer-token", "mountPath": STATUS, "readOnly": True} in c[
        "volumeMounts"
    ]
    [vol] = [v for v in pod["volumes"] if v["name"] == "kubeflow-trainer-token"]
    token = vol["projected"]["sources"][0]["serviceAccountToken"]
    assert (
        token["audience"]
        == f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
    )


@pytest.mark.parametrize(
    ("trainer", "expected"),
    [
        (TorchTrainer(func=_noop, num_nodes=2), {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1",
                                                 "PET_NODE_RANK": INDEX, "PET_MASTER_PORT": "29500"}),
        (JAXTrainer(func=_noop, num_nodes=2), {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": INDEX}),
        (XGBoostTrainer(func=_noop, num_nodes=2), {"DMLC_NUM_WORKER": "2", "DMLC_TASK_ID": INDEX,
                                                   "DMLC_TRACKER_PORT": "29500"}),
    ],
    ids=["torch", "jax", "xgboost"],
)  # fmt: skip
def test_the_jobset_holds_the_plugins_env_and_the_pods_get_it_from_there(
    backend: Any, k8s_cluster: Any, k8s_namespace: str, trainer: Any, expected: dict[str, Any]
) -> None:
    from kubernetes import client

    name = backend.train(trainer)
    assert backend.wait_for_job_status(name, timeout=240).status == COMPLETE
    pod_spec, c = _node(_jobset(k8s_cluster, k8s_namespace, name), "node")
    env = _env(c)
    assert {k: env.get(k) for k in expected} == expected
    assert {"containerPort": 29500} in [{"containerPort": p["containerPort"]} for p in c["ports"]]
    _status_parts(k8s_namespace, name, pod_spec, c)
    # each pod carries the template's env (and the Job controller's JOB_COMPLETION_INDEX)
    core = client.CoreV1Api(k8s_cluster.api_client())
    for i in range(2):
        pod = core.read_namespaced_pod(f"{name}-node-0-{i}", k8s_namespace)
        pod_env = {e.name for e in pod.spec.containers[0].env}
        assert pod_env == set(env) | {"JOB_COMPLETION_INDEX"}


def test_the_mpi_jobset_holds_the_ssh_keys_hostfile_and_launcher_env(
    backend: Any, k8s_cluster: Any, k8s_namespace: str
) -> None:
    from kubernetes import client

    name = backend.train(MPITrainer(func=_noop, num_nodes=3, num_proc_per_node=2))
    assert backend.wait_for_job_status(name, timeout=240).status == COMPLETE
    js = _jobset(k8s_cluster, k8s_namespace, name)
    lpod, launcher = _node(js, "launcher")
    npod, node = _node(js, "node")
    env = _env(launcher)
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_orte_set_default_slots"] == "2"
    assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"
    assert not any(k.startswith("OMPI_") for k in _env(node))
    assert not any(k.startswith("KUBEFLOW_TRAINER_") for k in _env(node))
    _status_parts(k8s_namespace, name, lpod, launcher)  # the launcher is the trainer step
    ssh = {"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"}
    assert ssh in launcher["volumeMounts"] and ssh in node["volumeMounts"]
    assert {"name": "mpi-hostfile", "mountPath": "/etc/mpi"} in launcher["volumeMounts"]
    assert "mpi-hostfile" not in {m["name"] for m in node.get("volumeMounts") or []}
    [secret_vol] = [v for v in npod["volumes"] if v["name"] == "mpi-ssh-auth"]
    assert secret_vol["secret"]["secretName"] == f"{name}-mpi-ssh-auth"
    [host_vol] = [v for v in lpod["volumes"] if v["name"] == "mpi-hostfile"]
    assert host_vol["configMap"]["name"] == f"{name}-mpi-hostfile"
    # the objects those volumes name, owned by the TrainJob
    core = client.CoreV1Api(k8s_cluster.api_client())
    hostfile = core.read_namespaced_config_map(f"{name}-mpi-hostfile", k8s_namespace).data[
        "hostfile"
    ]
    # deepspeed runs the launcher as a node: 2 node pods + the launcher, in the runtime's order
    assert hostfile == "".join(
        f"{name}-{rj}-0-{i}.{name} slots=2\n"
        for rj, i in (("node", 0), ("node", 1), ("launcher", 0))
    )
    secret = core.read_namespaced_secret(f"{name}-mpi-ssh-auth", k8s_namespace)
    assert secret.type == "kubernetes.io/ssh-auth"
    assert set(secret.data) == {"ssh-privatekey", "ssh-publickey"}
    assert secret.metadata.owner_references[0].kind == "TrainJob"
    assert core.read_namespaced_config_map(f"{name}-tls-config", k8s_namespace).data["ca.crt"]
    backend.delete_job(name)
