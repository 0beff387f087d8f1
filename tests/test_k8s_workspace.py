"""Workspace shipping on the real API server harness (issue 11).

The workspace reaches every node as a ConfigMap owned by the TrainJob, mounted through
`spec.runtimePatches`; the stand-in kubelet writes the ConfigMap's files at the mount path (see
tests/k8s_cluster/standin.py) and, as garbage collector, deletes the ConfigMaps a deleted
TrainJob owns.
"""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import time
from typing import Any

import pytest

from kf_jupyter import JAXTrainer, RuntimeConfig
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.constants import GROUP, VERSION
from kf_jupyter.errors import ValidationError
from kf_jupyter.workspace import Workspace
from tests.manifests import assert_valid_trainjob

from .test_workspace import make_notebook_folder

pytestmark = pytest.mark.slow


def rank_report() -> dict:
    """Every rank: import the notebook's module, read its data file, print where it runs."""
    import json
    import os
    import sys

    import datautils

    ds = datautils.MyDataset()
    out = {
        "rank": os.environ["JAX_PROCESS_ID"],
        "rows": len(ds),
        "first": ds.rows[0],
        "cwd": os.getcwd(),
        "module_dir": datautils.where(),
        "on_path": sys.path[0],
        "listing": sorted(os.listdir(".")),
    }
    print("REPORT " + json.dumps(out), flush=True)
    return out


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    return KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )


def _configmaps(api: Any, namespace: str) -> list[Any]:
    from kubernetes import client

    return client.CoreV1Api(api).list_namespaced_config_map(namespace).items


def _trainjobs(api: Any, namespace: str) -> list[Any]:
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "trainjobs")["items"]


@pytest.mark.usefixtures("trainjob_status_gate")  # the token mount beside ours
def test_two_node_job_imports_the_notebooks_module_on_the_cluster(
    backend: Any, k8s_standin: Any, k8s_cluster: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    from kubernetes import client

    api = k8s_cluster.api_client()
    nb = make_notebook_folder(tmp_path / "nb")
    monkeypatch.chdir(nb)
    trainer = JAXTrainer(func=rank_report, num_nodes=2, initialize_distributed=False)

    plan = backend.dry_run(trainer)
    assert plan["configmap"]["kind"] == "ConfigMap"
    assert "datautils.py" in str(plan["workspace"]["files"])
    assert "outputs/" in plan["workspace"]["skipped"]
    assert _configmaps(api, backend.namespace) == []  # a dry run creates nothing

    name = backend.train(trainer)
    # edited after submit: the job runs the snapshot taken at submit time
    (nb / "data.csv").write_text("changed,9\n")
    (nb / "datautils.py").write_text("raise ImportError('edited after submit')\n")

    tj = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, backend.namespace, "trainjobs", name
    )
    assert_valid_trainjob({k: v for k, v in tj.items() if k != "status"})
    cm = client.CoreV1Api(api).read_namespaced_config_map(f"{name}-workspace", backend.namespace)
    # owned by the TrainJob, so the garbage collector deletes it with the job
    [owner] = cm.metadata.owner_references
    assert (owner.api_version, owner.kind, owner.name, owner.uid) == (
        f"{GROUP}/{VERSION}",
        "TrainJob",
        name,
        tj["metadata"]["uid"],
    )
    with tarfile.open(
        fileobj=io.BytesIO(base64.b64decode(cm.binary_data["workspace.tar.gz"])), mode="r:gz"
    ) as tar:
        shipped = set(tar.getnames())
    assert {"datautils.py", "data.csv"} <= shipped
    assert not any(n.startswith(("outputs", "myenv", "__pycache__", ".ipynb")) for n in shipped)
    assert "train.ipynb" not in shipped and "run.log" not in shipped

    job = backend.wait_for_job_status(name, timeout=180)
    assert job.status == "Complete"
    reports = {}
    for line in backend.get_job_logs(name):
        if "REPORT " in line:
            r = json.loads(line.split("REPORT ", 1)[1])
            reports[r["rank"]] = r
    assert sorted(reports) == ["0", "1"], reports
    for r in reports.values():
        assert r["rows"] == 3 and r["first"] == ["a", "1"]
        assert r["cwd"] == r["module_dir"] == r["on_path"]
        assert "outputs" not in r["listing"] and "datautils.py" in r["listing"]
    assert reports["0"]["cwd"] != reports["1"]["cwd"]  # one copy per pod, as on two nodes
    assert backend.get_job_result(name)["rows"] == 3
    # the pods mount it through the runtime patch (the stand-in applies it as the Trainer would)
    pod = client.CoreV1Api(api).read_namespaced_pod(f"{name}-node-0-1", backend.namespace)
    assert [v.config_map.name for v in pod.spec.volumes if v.config_map] == [f"{name}-workspace"]
    # beside the TrainJobStatus plugin's token mount, as the JobSet holds both
    assert [m.mount_path for m in pod.spec.containers[0].volume_mounts] == [
        "/var/run/kf-jupyter/workspace",
        "/var/run/secrets/kubeflow/trainer",
    ]

    backend.delete_job(name)
    deadline = time.monotonic() + 60
    while [c for c in _configmaps(api, backend.namespace) if c.metadata.name.startswith(name)]:
        assert time.monotonic() < deadline, "the stand-in's GC did not delete the ConfigMap"
        time.sleep(0.2)


def test_over_limit_workspace_creates_nothing_on_the_cluster(
    backend: Any, k8s_cluster: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    api = k8s_cluster.api_client()
    nb = make_notebook_folder(tmp_path / "nb")
    (nb / "big.csv").write_bytes(b"1," * (3 * 1024 * 1024))
    monkeypatch.chdir(nb)
    trainer = JAXTrainer(func=rank_report, num_nodes=2, initialize_distributed=False)
    with pytest.raises(ValidationError, match="limit") as err:
        backend.train(trainer, runtime_config=RuntimeConfig(workspace=Workspace(max_bytes=2 << 20)))
    assert "big.csv" in str(err.value) and "Nothing was submitted" in str(err.value)
    # incompressible data over one ConfigMap's 1 MiB, under the (raised) file limit
    (nb / "big.csv").unlink()
    (nb / "noise.bin").write_bytes(os.urandom(1_200_000))
    with pytest.raises(ValidationError, match="more than one ConfigMap holds") as err:
        backend.train(trainer)
    assert "noise.bin" in str(err.value)
    assert _trainjobs(api, backend.namespace) == []
    assert _configmaps(api, backend.namespace) == [] or all(
        not c.metadata.name.endswith("-workspace") for c in _configmaps(api, backend.namespace)
    )


def test_no_workspace_adds_no_patch(backend: Any, tmp_path: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(make_notebook_folder(tmp_path / "nb"))
    trainer = JAXTrainer(func=rank_report, num_nodes=2, initialize_distributed=False)
    plan = backend.dry_run(trainer, runtime_config=RuntimeConfig(workspace=False))
    assert "configmap" not in plan and "runtimePatches" not in plan["trainjob"]["spec"]


def test_configmap_refused_deletes_the_trainjob_again(
    k8s_cluster: Any,
    k8s_limited_kubeconfig: str,
    k8s_namespace: str,
    tmp_path: Any,
    monkeypatch: Any,
) -> None:
    """A user who may create TrainJobs but not ConfigMaps: the job is not left behind waiting."""
    from kubernetes import client

    from kf_jupyter import ForbiddenError
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from tests.k8s_cluster.rbac import LIMITED_USER

    api = k8s_cluster.api_client()
    rbac = client.RbacAuthorizationV1Api(api)
    rules = [
        {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["*"]},
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["trainingruntimes"],
            "verbs": ["get", "list"],
        },
    ]
    rbac.create_namespaced_role(k8s_namespace, {"metadata": {"name": "no-cm"}, "rules": rules})
    rbac.create_namespaced_role_binding(
        k8s_namespace,
        {
            "metadata": {"name": "no-cm"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "no-cm"},
            "subjects": [
                {"kind": "User", "name": LIMITED_USER, "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    monkeypatch.chdir(make_notebook_folder(tmp_path / "nb"))
    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_limited_kubeconfig)
    )
    trainer = JAXTrainer(func=rank_report, num_nodes=2, initialize_distributed=False)
    with pytest.raises(ForbiddenError, match="configmaps"):
        backend.train(trainer, runtime="jax-distributed")
    deadline = time.monotonic() + 30
    while _trainjobs(api, k8s_namespace):  # deleted again (foreground deletion may take a moment)
        assert time.monotonic() < deadline, _trainjobs(api, k8s_namespace)
        time.sleep(0.2)


def test_pod_waits_for_its_configmap_then_runs(
    backend: Any, k8s_standin: Any, k8s_cluster: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    """The stand-in kubelet keeps a pod whose ConfigMap is missing Pending (FailedMount)."""
    from kubernetes import client

    from kf_jupyter.backends.kubernetes import workspace as k8s_ws

    api = k8s_cluster.api_client()
    core = client.CoreV1Api(api)
    monkeypatch.chdir(make_notebook_folder(tmp_path / "nb"))
    held: list[Any] = []
    monkeypatch.setattr(k8s_ws, "ship", lambda b, created, carrier: held.append((created, carrier)))
    trainer = JAXTrainer(func=rank_report, num_nodes=1, initialize_distributed=False)
    name = backend.train(trainer)
    deadline = time.monotonic() + 60
    while True:
        events = core.list_namespaced_event(backend.namespace).items
        if any(e.reason == "FailedMount" for e in events):
            break
        assert time.monotonic() < deadline, "no FailedMount event"
        time.sleep(0.2)
    assert backend.get_job(name).status == "Created"
    monkeypatch.undo()
    created, carrier = held[0]
    k8s_ws.ship(backend, created, carrier)
    assert backend.wait_for_job_status(name, timeout=120).status == "Complete"
    assert backend.get_job_result(name)["rows"] == 3
