"""Issue 19 (e): Kueue's runtime patch, as Kueue adds it (kueue pkg/controller/jobs/trainjob/
trainjob_webhook.go:67-105): its mutating webhook appends its own empty patch to every TrainJob
created where it runs, queued or not (only a queued one is also suspended). The tool reserved
that slot only for queued jobs, so on such a cluster an unqueued job with 16 patches was refused
by the API server (17 after the webhook); and the harness added it only to queued jobs.
"""

from __future__ import annotations

from typing import Any

import pytest

from kf_jupyter.build import KUEUE_PATCH_MANAGER, fit_runtime_patches
from kf_jupyter.errors import OptionError


def _job(n_user: int, n_ours: int = 0, queued: bool = False) -> dict[str, Any]:
    patches = [{"manager": f"u.io/p{i}", "trainingRuntimeSpec": {}} for i in range(n_user)]
    patches += [
        {"manager": f"kf-jupyter.io/p{i}", "trainingRuntimeSpec": {"template": {"metadata": {
            "labels": {f"k{i}": "v"}}}}} for i in range(n_ours)]  # fmt: skip
    labels = {"kueue.x-k8s.io/queue-name": "q"} if queued else {}
    return {"metadata": {"name": "j", "labels": labels}, "spec": {"runtimePatches": patches}}


def test_sixteen_patches_fit_where_kueue_does_not_run() -> None:
    job = _job(14, 2)
    fit_runtime_patches(job, kueue=False)
    assert len(job["spec"]["runtimePatches"]) == 16


def test_where_kueue_runs_its_patch_is_counted_for_an_unqueued_job_too() -> None:
    job = _job(14, 2)
    fit_runtime_patches(job, kueue=True)
    patches = job["spec"]["runtimePatches"]
    assert len(patches) == 15  # ours merged into one: Kueue's makes 16
    [ours] = [p for p in patches if p["manager"].startswith("kf-jupyter.io/")]
    labels = ours["trainingRuntimeSpec"]["template"]["metadata"]["labels"]
    assert labels == {"k0": "v", "k1": "v"}
    with pytest.raises(OptionError) as info:
        fit_runtime_patches(_job(15, 1), kueue=True)
    text = str(info.value)
    assert "17 runtime patches" in text and "Kueue runs on this cluster" in text


def test_the_cluster_is_asked_only_when_the_count_is_at_the_limit() -> None:
    asked: list[int] = []

    def serves_kueue() -> bool:
        asked.append(1)
        return True

    fit_runtime_patches(_job(15), kueue=serves_kueue)
    assert asked == []
    job = _job(15, 1)
    with pytest.raises(OptionError):
        fit_runtime_patches(job, kueue=serves_kueue)
    assert asked == [1]
    queued = _job(15, 1, queued=True)  # queued: Kueue's patch counts without asking
    with pytest.raises(OptionError, match="the job is queued"):
        fit_runtime_patches(queued, kueue=lambda: pytest.fail("asked"))
    carried = _job(15)
    carried["spec"]["runtimePatches"].append({"manager": KUEUE_PATCH_MANAGER})
    fit_runtime_patches(carried, kueue=True)  # Kueue's own already there: 16
    assert len(carried["spec"]["runtimePatches"]) == 16


@pytest.mark.slow
def test_the_harness_gives_every_trainjob_kueues_patch_and_the_tool_fits_it(
    k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any
) -> None:
    from kf_jupyter import TorchTrainer
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
    from kf_jupyter.config import RuntimeConfig
    from kf_jupyter.options import (
        PodSpecOverride,
        PodTemplateOverride,
        PodTemplateOverrides,
        RuntimePatch,
        TrainerCommand,
    )

    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )
    assert backend._serves_kueue()
    user = [
        RuntimePatch({"template": {"metadata": {"labels": {f"l{i}": "v"}}}}, manager=f"u.io/p{i}")
        for i in range(14)
    ]
    override = PodTemplateOverrides(
        PodTemplateOverride(["node"], spec=PodSpecOverride(node_selector={"a": "b"}))
    )
    # 14 + ours = 15, unqueued: Kueue's webhook makes it 16
    name = backend.train(
        TorchTrainer(),
        "torch-distributed",
        RuntimeConfig(workspace=False),
        [*user, override, TrainerCommand(["true"])],
    )
    job = backend._get_trainjob(name)
    managers = [p["manager"] for p in job["spec"]["runtimePatches"]]
    assert len(managers) == 16 and managers[-1] == KUEUE_PATCH_MANAGER
    assert not job["spec"].get("suspend")  # not queued: Kueue does not hold it
    assert backend.wait_for_job_status(name, timeout=120).status == "Complete"
    # one more of the user's: refused by the tool with the reason, not by the API server
    with pytest.raises(OptionError, match="Kueue runs on this cluster"):
        backend.train(
            TorchTrainer(),
            "torch-distributed",
            RuntimeConfig(workspace=False),
            [*user, RuntimePatch({}, manager="u.io/p14"), override, TrainerCommand(["true"])],
        )
