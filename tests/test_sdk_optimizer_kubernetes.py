"""The Kubeflow SDK's optimizer code on the cluster harness, with only the imports changed
(`kubeflow.optimizer` -> `kf_jupyter.sdk.optimizer`, `kubeflow.trainer` -> `kf_jupyter.sdk`).

Trainer v2.3.0 has no OptimizationJob (docs/decisions.md): the trials are TrainJobs the client's
sweep driver creates, whether or not the cluster serves the (controller-less, post-v2.3.0)
OptimizationJob API; `test_a_served_optimizationjob_api_still_runs_trials_from_the_client` checks
that the second case is said and still works.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from typing import Any

import pytest

from kf_jupyter.sdk import CustomTrainer, KubernetesBackendConfig, TrainJobTemplate
from kf_jupyter.sdk.optimizer import (
    GridSearch,
    Objective,
    OptimizerClient,
    RandomSearch,
    Result,
    Search,
    TrialConfig,
)
from tests.test_sweeps_kubernetes import plain_runtime

pytestmark = pytest.mark.slow


# -- the SDK's example (OptimizerClient.optimize's docstring), a function that prints its loss --


def train_fn(learning_rate, num_epochs):
    import math

    lr = float(learning_rate)
    for epoch in range(int(num_epochs)):
        loss = (math.log10(lr) + 2) ** 2 + 1 / (epoch + 1)
        print(f"epoch={epoch} loss={loss}")


def expected_loss(params: dict[str, str]) -> float:
    return (math.log10(float(params["learning_rate"])) + 2) ** 2 + 1 / int(params["num_epochs"])


@pytest.fixture
def config(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any, tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    return KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)


def _trainjobs(k8s_cluster: Any, namespace: str, selector: str) -> list[str]:
    from kubernetes import client as k8s

    items = k8s.CustomObjectsApi(k8s_cluster.api_client()).list_namespaced_custom_object(
        "trainer.kubeflow.org",
        "v1alpha1",
        namespace,
        "trainjobs",
        label_selector=selector,
    )["items"]
    return [o["metadata"]["name"] for o in items if not o["metadata"].get("deletionTimestamp")]


def test_sdk_example_runs_on_the_cluster_and_another_process_follows_it(
    config, k8s_cluster
) -> None:
    template = TrainJobTemplate(
        runtime="torch-distributed", trainer=CustomTrainer(func=train_fn, num_nodes=1)
    )
    client = OptimizerClient(config)
    opt_id = client.optimize(
        trial_template=template,
        trial_config=TrialConfig(num_trials=4, parallel_trials=2),
        search_space={
            "learning_rate": Search.loguniform(0.001, 0.1),
            "num_epochs": Search.choice([2, 3]),
        },
        objectives=[Objective(metric="loss", direction="minimize")],
        algorithm=RandomSearch(random_state=11),
    )
    # another process (a restarted kernel) lists the sweep and waits for it
    code = (
        "import sys, json\n"
        "from kf_jupyter.sdk import KubernetesBackendConfig\n"
        "from kf_jupyter.sdk.optimizer import OptimizerClient\n"
        "c = OptimizerClient(KubernetesBackendConfig(namespace=sys.argv[1], config_file=sys.argv[2]))\n"
        "names = [j.name for j in c.list_jobs()]\n"
        "job = c.wait_for_job_status(sys.argv[3], timeout=600)\n"
        "print(json.dumps({'names': names, 'status': job.status, 'trials': len(job.trials)}))\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", code, config.namespace, config.config_file, opt_id],
        capture_output=True,
        text=True,
        timeout=660,
        check=False,
    )
    assert other.returncode == 0, other.stderr[-3000:]
    seen = json.loads(other.stdout.strip().splitlines()[-1])
    assert seen == {"names": [opt_id], "status": "Complete", "trials": 4}

    job = client.get_job(opt_id)
    assert job.status == "Complete" and len(job.trials) == 4
    assert {t.trainjob.status for t in job.trials} == {"Complete"}
    best = client.get_best_results(opt_id)
    assert isinstance(best, Result)
    losses = {t.name: expected_loss(t.parameters) for t in job.trials}
    best_trial = min(job.trials, key=lambda t: losses[t.name])
    assert best.parameters == best_trial.parameters
    (metric,) = best.metrics
    assert metric.name == "loss" and math.isclose(float(metric.min), losses[best_trial.name])
    assert all(set(t.parameters) == {"learning_rate", "num_epochs"} for t in job.trials)
    logs = list(client.get_job_logs(opt_id))
    assert any(line.startswith("epoch=0 loss=") for line in logs)
    reasons = {e.reason for e in client.get_job_events(opt_id)}
    assert "TrialsFromClient" in reasons
    client.delete_job(opt_id)
    deadline = time.monotonic() + 60
    while _trainjobs(k8s_cluster, config.namespace, f"kf-jupyter.io/sweep={opt_id}"):
        assert time.monotonic() < deadline, "trials not deleted"
        time.sleep(0.3)
    assert client.list_jobs() == []


def plain_fn(lr: str) -> None:
    import os

    if float(lr) > 0.5:
        raise RuntimeError("this learning rate diverges")
    print(f"loss={float(lr) * 2} lr_env={os.environ['KUBEFLOW_TRAINER_OPT_LR']}")


#: A stand-in for the OptimizationJob CRD of Trainer master after v2.3.0 (which has no
#: controller): only its name matters here, for API discovery.
OPTIMIZATIONJOB_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "optimizationjobs.trainer.kubeflow.org"},
    "spec": {
        "group": "trainer.kubeflow.org",
        "scope": "Namespaced",
        "names": {"plural": "optimizationjobs", "singular": "optimizationjob",
                  "kind": "OptimizationJob", "listKind": "OptimizationJobList"},
        "versions": [{"name": "v1alpha1", "served": True, "storage": True,
                      "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {
                          "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}  # fmt: skip


def test_a_served_optimizationjob_api_still_runs_trials_from_the_client(
    config, k8s_cluster
) -> None:
    from kubernetes import client as k8s

    from kf_jupyter.sweeps.kubernetes import KubernetesSweeps, optimizationjob_served

    api = k8s_cluster.api_client()
    ext = k8s.ApiextensionsV1Api(api)
    sweeps = KubernetesSweeps(config)
    assert not optimizationjob_served(sweeps.api)
    ext.create_custom_resource_definition(OPTIMIZATIONJOB_CRD)
    try:
        deadline = time.monotonic() + 60
        while not optimizationjob_served(sweeps.api):
            assert time.monotonic() < deadline, "CRD not served"
            time.sleep(0.3)
        plain_runtime(k8s_cluster, config.namespace)
        client = OptimizerClient(config)
        opt_id = client.optimize(
            trial_template=TrainJobTemplate(
                runtime="plain", trainer=CustomTrainer(func=plain_fn, num_nodes=1)
            ),
            trial_config=TrialConfig(num_trials=3, parallel_trials=3),
            search_space={"lr": Search.choice(["0.1", "0.9", "0.2"])},
            algorithm=GridSearch(),
        )
        job = client.wait_for_job_status(opt_id, timeout=300)
        by_lr = {t.parameters["lr"]: t for t in job.trials}
        assert by_lr["0.9"].trainjob.status == "Failed"  # recorded; the sweep completed
        assert client.get_best_results(opt_id).parameters == {"lr": "0.1"}
        events = {e.reason: e.message for e in client.get_job_events(opt_id)}
        assert "no Trainer release has a controller" in events["TrialsFromClient"]
        custom = k8s.CustomObjectsApi(api)
        assert not custom.list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", config.namespace, "optimizationjobs"
        )["items"]
        client.delete_job(opt_id)
    finally:
        ext.delete_custom_resource_definition(OPTIMIZATIONJOB_CRD["metadata"]["name"])
