"""Progress (`status.trainerStatus`) on the Kubernetes backend, against the real API server.

The stand-in plays the Trainer's status server (written from the facts doc): it injects the
three variables into the trainer pods and writes what is posted through the TrainJob's status
subresource, where the real API server validates it against the real CRD schema.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from kf_jupyter import JAXTrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.constants import GROUP, VERSION
from kf_jupyter.types import COMPLETE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("trainjob_status_gate")]


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    cfg = KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    return KubernetesBackend(cfg)


def sdk_progress():
    import os

    from kubeflow.trainer import update_trainjob_status

    sent = update_trainjob_status(
        progress_percent=42, estimated_remaining_seconds=30, metrics={"loss": 0.25}
    )
    return {"sent": sent, "url": os.environ.get("KUBEFLOW_TRAINER_SERVER_URL", "")}


def report_progress():
    import kf_jupyter

    kf_jupyter.report(step=3, progress=0.5, loss=0.125)
    return 1


def test_the_official_sdk_call_reports_progress_on_a_cluster(backend: Any, admin_api: Any) -> None:
    from kubernetes import client

    name = backend.train(JAXTrainer(func=sdk_progress, initialize_distributed=False))
    job = backend.wait_for_job_status(name, timeout=180)
    assert job.status == COMPLETE
    result = backend.get_job_result(name)
    assert result["sent"] is True and result["url"].startswith("https://127.0.0.1:")
    ts = job.trainer_status
    assert ts is not None
    assert (ts.progress_percentage, ts.estimated_remaining_seconds) == (42, 30)
    assert ts.metrics == {"loss": "0.25"} and ts.last_updated_time is not None
    # what kubectl get trainjob NAME -o jsonpath='{.status.trainerStatus}' shows
    obj = client.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        GROUP, VERSION, backend.namespace, "trainjobs", name
    )
    raw = obj["status"]["trainerStatus"]
    assert raw["progressPercentage"] == 42 and raw["metrics"] == [{"name": "loss", "value": "0.25"}]
    # the pod carries the variables as the Trainer's plugin sets them
    pod = client.CoreV1Api(admin_api).read_namespaced_pod(f"{name}-node-0-0", backend.namespace)
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/var/run/secrets/kubeflow/trainer/token"
    assert env["KUBEFLOW_TRAINER_SERVER_URL"].endswith(
        f"/namespaces/{backend.namespace}/trainjobs/{name}/status"
    )


def test_report_posts_progress_on_a_cluster(backend: Any) -> None:
    name = backend.train(JAXTrainer(func=report_progress, initialize_distributed=False))
    job = backend.wait_for_job_status(name, timeout=180)
    ts = job.trainer_status
    assert ts is not None, "\n".join(backend.get_job_logs(name))
    assert ts.progress_percentage == 50 and ts.metrics == {"loss": "0.125", "step": "3"}
    listed = {j.name: j for j in backend.list_jobs()}
    assert listed[name].trainer_status == ts
    # the log marker stays as the fallback (in the raw records; readable views hide it)
    assert any("##kf-jupyter:report " in rec.line for rec in backend.iter_log_records(name))


def test_the_status_server_refuses_a_wrong_token_and_a_bad_payload(
    backend: Any, k8s_standin: Any, k8s_cluster: Any
) -> None:
    port = k8s_standin._status_httpd.server_address[1]
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{backend.namespace}/trainjobs/x/status"
    ctx = ssl.create_default_context(cafile=k8s_cluster.ca_file)
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}",
        data=json.dumps({"trainerStatus": {"progressPercentage": 5}}).encode(),
        headers={"Authorization": "Bearer guessed"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10, context=ctx)
    assert err.value.code == 403
    assert json.loads(err.value.read())["reason"] == "Forbidden"


@pytest.fixture
def admin_api(k8s_cluster: Any) -> Any:
    return k8s_cluster.api_client()
