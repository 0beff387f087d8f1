"""What a real Trainer v2.3 cluster would break, handled by the tool (issue 19), on the harness
that now refuses what such a cluster refuses (tests/k8s_cluster/admission.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JobFailedError, JobRejectedError, TorchTrainer, ValidationError
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.config import RuntimeConfig
from kf_jupyter.errors import OptionError
from kf_jupyter.options import (
    Name,
    PodSpecOverride,
    PodTemplateOverride,
    PodTemplateOverrides,
    Queue,
    RuntimePatch,
    TrainerCommand,
)
from kf_jupyter.types import CREATED
from tests.refused_jobs import assert_the_reason_shows_everywhere, create_raw_trainjob


def _train() -> None:
    print("hello")


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    cfg = KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    return KubernetesBackend(cfg)


def _user_patches(n: int) -> list[RuntimePatch]:
    return [
        RuntimePatch({"template": {"metadata": {"labels": {f"l{i}": "v"}}}}, manager=f"u.io/p{i}")
        for i in range(n)
    ]


# -- 1. long names -----------------------------------------------------------------------------


def test_a_name_too_long_for_the_runtime_is_refused_before_submitting(backend: Any) -> None:
    trainer = TorchTrainer(num_nodes=2)
    cmd = TrainerCommand(["true"])
    with pytest.raises(ValidationError) as info:
        backend.train(trainer, runtime="torch-distributed", options=[Name("n" * 49), cmd])
    text = str(info.value)
    assert "has 49 characters" in text and "at most 48" in text
    assert "torch-distributed" in text
    assert backend.list_jobs() == []  # nothing was created
    backend.train(trainer, runtime="torch-distributed", options=[Name("n" * 48), cmd])


def test_a_reconcile_failure_is_the_waiting_reason_and_stops_the_wait(
    backend: Any, k8s_cluster: Any, k8s_namespace: str
) -> None:
    """The TrainJob is accepted, its JobSet refused: the Trainer emits only an event."""
    name = "x" * 50  # what an older kf-jupyter (or kubectl) submits
    create_raw_trainjob(k8s_cluster.api_client(), k8s_namespace, name)
    t0 = time.monotonic()
    with pytest.raises(JobFailedError) as info:
        backend.wait_for_job_status(name, timeout=120)
    assert time.monotonic() - t0 < 60, "waited for the timeout"
    text = str(info.value)
    assert "TrainJobResourcesCreationFailed" in text
    assert "pod names generated for this JobSet will exceed 63 characters" in text
    got = backend.get_job(name)
    assert got.status == CREATED and got.reason == "TrainJobResourcesCreationFailed"
    assert "will exceed 63 characters" in got.message
    # in %kf_jobs, the widget monitor's header (with the message) and the lab's job panel
    assert_the_reason_shows_everywhere(backend, got, "will exceed 63 characters")


# -- 2. runtimePatches within the CRD's maxItems ---------------------------------------------


def test_runtime_patches_ours_merged_to_fit_sixteen(
    backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    override = PodTemplateOverrides(
        PodTemplateOverride(["node"], spec=PodSpecOverride(node_selector={"a": "b"}))
    )
    trainer = TorchTrainer(func=_train)
    # The harness runs Kueue, whose webhook adds a patch to every TrainJob (queued or not):
    # 13 of the user's + ours + the workspace's = 15 (+ Kueue's = 16): as they are
    job = backend.dry_run(trainer, "torch-distributed", options=[*_user_patches(13), override])
    assert len(job["trainjob"]["spec"]["runtimePatches"]) == 15
    # 14 + ours + workspace = 16 (+ Kueue's = 17): ours merged into one, and the API server
    # takes it with Kueue's
    options = [*_user_patches(14), override]
    job = backend.dry_run(trainer, "torch-distributed", options=options)
    patches = job["trainjob"]["spec"]["runtimePatches"]
    assert len(patches) == 15
    [own] = [p for p in patches if p["manager"].startswith("kf-jupyter.io/")]
    pod = own["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert pod["template"]["spec"]["nodeSelector"] == {"a": "b"}
    assert pod["template"]["spec"]["volumes"]  # the workspace's volume is in it
    name = backend.train(trainer, "torch-distributed", options=options)
    backend.wait_for_job_status(name, timeout=120)
    created = backend._get_trainjob(name)["spec"]["runtimePatches"]
    assert len(created) == 16 and created[-1]["manager"] == "kueue.x-k8s.io/manager"


def test_runtime_patches_count_the_one_kueue_adds(backend: Any) -> None:
    trainer = TorchTrainer(func=_train)
    override = PodTemplateOverrides(
        PodTemplateOverride(["node"], spec=PodSpecOverride(node_selector={"a": "b"}))
    )
    options = [*_user_patches(15), override, Queue("team-q")]
    with pytest.raises(OptionError) as info:
        backend.dry_run(trainer, "torch-distributed", RuntimeConfig(workspace=False), options)
    text = str(info.value)
    assert "at most 16" in text and "Kueue" in text and "15 from RuntimePatch" in text


# -- 8. a patch aimed at what the runtime lacks --------------------------------------------------


def test_a_patch_for_a_missing_replicated_job_is_refused_with_the_names(backend: Any) -> None:
    override = PodTemplateOverrides(
        PodTemplateOverride(["launcher"], spec=PodSpecOverride(node_selector={"a": "b"}))
    )
    with pytest.raises(OptionError) as info:
        backend.dry_run(
            TorchTrainer(), "torch-distributed", options=[override, TrainerCommand(["true"])]
        )
    assert "'launcher'" in str(info.value) and "it has 'node'" in str(info.value)


# -- the Trainer webhook's refusal is a rejection, not a permission error ----------------------


def test_trainer_webhook_refusal_says_what_to_fix(backend: Any) -> None:
    patch = RuntimePatch(
        {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
            "template": {"spec": {"containers": [{"name": "node", "env": [
                {"name": "A", "value": "1"}]}]}}}}}]}}},
        manager="u.io/env",
    )  # fmt: skip
    with pytest.raises(JobRejectedError) as info:
        backend.train(
            TorchTrainer(), "torch-distributed", options=[patch, TrainerCommand(["true"])]
        )
    assert "must not have envs for the dataset-initializer" in str(info.value)
    assert "Forbidden" not in str(info.value)


# -- 10. the deadline ----------------------------------------------------------------------------


def test_deadline_keeps_the_streamed_logs_and_says_the_deadline_ended_it(backend: Any) -> None:
    from kf_jupyter.options import ActiveDeadlineSeconds

    script = "echo started; echo line-2; sleep 120"
    name = backend.train(
        TorchTrainer(),
        "torch-distributed",
        options=[TrainerCommand(["bash", "-c", script]), ActiveDeadlineSeconds(8)],
    )
    lines = list(backend.get_job_logs(name, follow=True))  # ends when the pods are deleted
    assert "started" in "".join(lines) and "line-2" in "".join(lines)
    with pytest.raises(JobFailedError) as info:
        backend.wait_for_job_status(name, timeout=120)
    text = str(info.value)
    assert "DeadlineExceeded" in text and "activeDeadlineSeconds=8" in text
    assert "logs are gone" in text
    assert backend.get_job(name).steps == []  # the pods are gone, as on a cluster


# -- 9. Kueue ------------------------------------------------------------------------------------


def _until(fn: Any, seconds: float, what: str) -> Any:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = fn()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_admitted_queued_job_is_not_suspended_behind_kueues_back(
    backend: Any, k8s_standin: Any
) -> None:
    from kf_jupyter.errors import JobStateError

    name = backend.train(
        TorchTrainer(),
        "torch-distributed",
        options=[Queue("fidelity-q"), TrainerCommand(["bash", "-c", "echo up; sleep 60"])],
    )
    backend.wait_for_job_status(name, {"Running"}, timeout=120)
    with pytest.raises(JobStateError) as info:
        backend.suspend_job(name)
    assert "Kueue" in str(info.value) and "active" in str(info.value)
    assert backend.get_job(name).status == "Running"
    # Kueue preempts it: suspended by Kueue, so Created / Queued, never Suspended
    k8s_standin.kueue_held.add("fidelity-q")
    k8s_standin.kueue_preempt(backend.namespace, name)
    job = _until(lambda: (j := backend.get_job(name)).reason == "Queued" and j, 60, "Queued")
    assert job.status == CREATED
    k8s_standin.kueue_release("fidelity-q")
    backend.wait_for_job_status(name, {"Running"}, timeout=120)
    backend.delete_job(name)


def test_multikueue_needs_a_queue_and_says_where_the_pods_run(backend: Any) -> None:
    from kf_jupyter.errors import JobStateError
    from kf_jupyter.options import ManagedBy

    trainer, cmd = TorchTrainer(), TrainerCommand(["true"])
    mk = ManagedBy("kueue.x-k8s.io/multikueue")
    with pytest.raises(OptionError, match="Queue"):
        backend.dry_run(trainer, "torch-distributed", options=[mk, cmd])
    name = backend.train(trainer, "torch-distributed", options=[mk, cmd, Queue("mk-q")])
    job = backend.get_job(name)
    assert job.status == CREATED and job.reason == "MultiKueue"
    assert "worker cluster" in job.message
    with pytest.raises(JobStateError, match="worker cluster"):
        list(backend.get_job_logs(name))
