"""Why a TrainJob waits (unschedulable, image pull, initializers, Kueue), from its pods: the
pure derivation, and on the API server harness with the stand-in producing those pod states."""

from __future__ import annotations

from typing import Any

import pytest


def _pod(rjob: str, phase: str = "Pending", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"j-{rjob}-0-0",
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                "batch.kubernetes.io/job-completion-index": "0",
            },
        },
        "spec": {
            "containers": [
                {"name": "node" if rjob in ("node", "launcher") else rjob, "image": "img:1"}
            ]
        },
        "status": {"phase": phase, **status},
    }


@pytest.mark.parametrize(
    ("pods", "reason", "text"),
    [
        (
            [_pod("node", conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}])],
            "Unschedulable",
            "node-0 cannot be scheduled: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        ),
        (
            [_pod("node", containerStatuses=[{"name": "node", "image": "reg.invalid/x:1",
                                              "state": {"waiting": {"reason": "ImagePullBackOff",
                                                                    "message": "Back-off pulling image"}}}])],
            "ImagePullBackOff",
            "node-0 cannot pull its image reg.invalid/x:1: Back-off pulling image",
        ),
        (
            [_pod("dataset-initializer", "Running"), _pod("node")],
            "Initializing",
            "Waiting for the runtime's initializers: dataset-initializer Running.",
        ),
        ([_pod("node")], "", ""),
    ],
    ids=["unschedulable", "image-pull", "initializers", "just-pending"],
)  # fmt: skip
def test_why_a_job_waits(pods: list[Any], reason: str, text: str) -> None:
    from kf_jupyter.backends.kubernetes.status import job_status

    assert job_status({}, pods, 1) == ("Created", reason, text)


# -- on the API server harness ---------------------------------------------------------------


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig

    cfg = KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    return KubernetesBackend(cfg)


def _waiting(backend: Any, name: str, reason: str) -> Any:
    import time

    from tests.waits import DEADLINE

    end = time.monotonic() + DEADLINE  # generous: a loaded machine starts pods slowly
    while time.monotonic() < end:
        job = backend.get_job(name)
        if job.reason == reason:
            return job
        time.sleep(0.2)
    raise AssertionError(f"{name}: no {reason} (last: {job.status} {job.reason} {job.message})")


@pytest.mark.slow
def test_a_job_asking_for_a_gpu_no_node_has_says_so(backend: Any) -> None:
    from kf_jupyter import TorchTrainer
    from kf_jupyter.options import TrainerCommand

    trainer = TorchTrainer(num_nodes=1, resources_per_node={"gpu": 1})
    name = backend.train(trainer, options=[TrainerCommand(["bash", "-c", "echo hi"])])
    job = _waiting(backend, name, "Unschedulable")
    assert job.status == "Created"
    assert (
        "node-0 cannot be scheduled" in job.message and "Insufficient nvidia.com/gpu" in job.message
    )
    events = backend.get_job_events(name)
    assert any(e.reason == "FailedScheduling" and "nvidia.com/gpu" in e.message for e in events)
    listed = {j.name: j for j in backend.list_jobs()}
    assert listed[name].reason == "Unschedulable"


@pytest.mark.slow
def test_an_image_that_cannot_be_pulled_is_named(backend: Any) -> None:
    from kf_jupyter import TorchTrainer
    from kf_jupyter.options import TrainerCommand

    image = "registry.example.invalid/team/trainer:1.0"
    trainer = TorchTrainer(num_nodes=1, image=image)
    name = backend.train(trainer, options=[TrainerCommand(["bash", "-c", "echo hi"])])
    job = _waiting(backend, name, "ImagePullBackOff")
    assert job.status == "Created" and f"cannot pull its image {image}" in job.message
    assert any(e.reason in ("Failed", "BackOff") for e in backend.get_job_events(name))


def test_kf_jobs_and_the_monitor_say_why_a_job_waits() -> None:
    from kf_jupyter.magics.render import JOB_HEADERS, job_rows
    from kf_jupyter.types import TrainJob

    job = TrainJob("a", "Created", "kubernetes", reason="Queued", message="Waiting in queue 'q'")
    assert job_rows([job])[0][JOB_HEADERS.index("status")] == "Created (Queued)"
    pytest.importorskip("ipywidgets")
    from kf_jupyter.widgets.monitor import JobMonitor

    class Client:
        backend_name = "kubernetes"

        def get_job(self, name: str) -> TrainJob:
            return job

    monitor = JobMonitor(Client(), "a", records=[], poll_status=False)
    monitor._apply_job(job)
    assert "Queued: Waiting in queue &#x27;q&#x27;" in monitor._header_html()


@pytest.mark.slow
def _runtime_with_dataset_initializer(kubeconfig: str, namespace: str) -> str:
    """torch-distributed plus a dataset-initializer step (a TrainingRuntime in `namespace`): a
    cluster refuses a dataset initializer on a runtime without one (Trainer webhook)."""
    import copy

    from kubernetes import client, config

    from tests.k8s_cluster.crds import load_runtimes

    rt = copy.deepcopy(
        next(r for r in load_runtimes() if r["metadata"]["name"] == "torch-distributed")
    )
    rt["kind"] = "TrainingRuntime"
    rt["metadata"] = {"name": "torch-with-data", "labels": rt["metadata"].get("labels", {})}
    init = {"name": "dataset-initializer", "template": {"metadata": {"labels": {
        "trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}},
        "spec": {"template": {"spec": {"containers": [{
            "name": "dataset-initializer", "image": "ghcr.io/kubeflow/trainer/dataset-initializer",
            "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}],
            "volumes": [{"name": "initializer", "emptyDir": {}}]}}}}}  # fmt: skip
    jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
    for rj in jobs:
        rj["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
    jobs.insert(0, init)
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=kubeconfig))
    api.create_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainingruntimes", rt
    )
    return "torch-with-data"


def test_a_job_whose_initializer_runs_says_so_then_runs(
    backend: Any, k8s_standin: Any, k8s_admin_kubeconfig: str, k8s_namespace: str
) -> None:
    import kf_jupyter.sdk as sdk
    from kf_jupyter import TorchTrainer
    from kf_jupyter.options import TrainerCommand
    from kf_jupyter.sdk.initializers import InitializerOption

    init = sdk.Initializer(dataset=sdk.HuggingFaceDatasetInitializer(storage_uri="hf://org/data"))
    hold = k8s_standin.hold_initializers
    hold.touch()  # the dataset initializer keeps "downloading" until the file is gone
    try:
        opts = [InitializerOption(init), TrainerCommand(["bash", "-c", "echo trained"])]
        runtime = _runtime_with_dataset_initializer(k8s_admin_kubeconfig, k8s_namespace)
        name = backend.train(TorchTrainer(num_nodes=1), runtime, options=opts)
        job = _waiting(backend, name, "Initializing")
        assert job.status == "Created"
        # Pending or Running, as far as the pod got: the trainer waits either way
        assert "dataset-initializer" in job.message, job.message
        assert {s.name for s in job.steps} == {"dataset-initializer"}  # no trainer pod yet
    finally:
        hold.unlink(missing_ok=True)
    job = backend.wait_for_job_status(name, {"Complete"}, timeout=120)
    assert job.reason != "Initializing"
    logs = "".join(backend.get_job_logs(name, step="dataset-initializer"))
    assert "downloaded hf://org/data" in logs
    assert "trained" in "".join(backend.get_job_logs(name))
