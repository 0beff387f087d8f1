"""Every TrainJob the tool can build passes what a real cluster checks (issue 19): the TrainJob
CRD's schema and CEL rules, the Trainer webhook, and the JobSet webhook's name limits on the
JobSet built from it; and so do its updates (suspend, resume, Kueue's admission).

Pure: the checks are the harness's admission webhook's (tests/k8s_cluster), run in-process over
every trainer, option, resource kind, node count, workspace on/off and queue."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer
from kf_jupyter.backends.kubernetes import workspace
from kf_jupyter.build import fit_runtime_patches
from kf_jupyter.config import RuntimeConfig, SecretRef
from kf_jupyter.constants import PATCH_MANAGER
from kf_jupyter.options import (
    ActiveDeadlineSeconds,
    Annotations,
    ContainerOverride,
    Labels,
    ManagedBy,
    Name,
    PodSecurity,
    PodSpecOverride,
    PodTemplateOverride,
    PodTemplateOverrides,
    Queue,
    RuntimePatch,
    SpecAnnotations,
    SpecLabels,
    TrainerArgs,
    TrainerCommand,
    Warm,
)
from kf_jupyter.runtimes import Runtime
from tests.k8s_cluster.crds import load_runtimes
from tests.k8s_cluster.pod_security import violations
from tests.k8s_cluster.trainer_model import build_jobset, strategic_merge
from tests.manifests import assert_valid_trainjob, cluster_refusals

RUNTIMES = {r["metadata"]["name"]: r for r in load_runtimes()}


def _train(x: int = 1) -> None:
    print(x)


RESOURCES = [None, {"cpu": "2"}, {"cpu": "500m", "memory": "1Gi"}, {"nvidia.com/gpu": 2},
             {"cpu": 4, "memory": "8Gi", "nvidia.com/gpu": 1}]  # fmt: skip
TRAINERS: list[tuple[str, Any]] = []
for nodes, res in itertools.product([None, 1, 2, 3], RESOURCES):
    kw = {"num_nodes": nodes, "resources_per_node": res}
    TRAINERS += [
        ("torch-distributed", TorchTrainer(func=_train, **kw)),
        ("torch-distributed", TorchTrainer(func=_train, num_proc_per_node=2, **kw)),
        ("torchtune-llama3.2-1b", TorchTrainer(func=_train, **kw)),
        ("deepspeed-distributed", MPITrainer(func=_train, **kw)),
        ("mlx-distributed", MPITrainer(func=_train, num_proc_per_node=2, **kw)),
        ("jax-distributed", JAXTrainer(func=_train, **kw)),
        ("xgboost-distributed", XGBoostTrainer(func=_train, **kw)),
    ]


def _options(runtime: str) -> list[list[Any]]:
    jobs = [rj["name"] for rj in RUNTIMES[runtime]["spec"]["template"]["spec"]["replicatedJobs"]]
    trainer_jobs = [j for j in jobs if j in ("node", "launcher")]
    override = PodTemplateOverrides(
        PodTemplateOverride(
            trainer_jobs,
            metadata={"labels": {"team": "a"}, "annotations": {"note": "x"}},
            spec=PodSpecOverride(
                node_selector={"pool": "gpu"},
                tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                volumes=[{"name": "data", "emptyDir": {}}],
                containers=[ContainerOverride("node", volume_mounts=[
                    {"name": "data", "mountPath": "/data"}])],
                service_account_name="trainer",
                image_pull_secrets=[{"name": "regcred"}],
            ),
        )
    )  # fmt: skip
    raw = RuntimePatch({"template": {"metadata": {"labels": {"raw": "1"}}}}, manager="u.io/raw")
    return [
        [],
        [Name("my-job-1"), Labels({"a": "b"}), Annotations({"c": "d"})],
        [SpecLabels({"x": "y"}), SpecAnnotations({"z": "w"}), override],
        [raw, ActiveDeadlineSeconds(600), Warm(False)],
        [TrainerCommand(["python", "-c", "print(1)"]), TrainerArgs(["--epochs", "2"])],
        [Queue("team-q")],
        [Queue("team-q"), ManagedBy("kueue.x-k8s.io/multikueue")],
        [ManagedBy("trainer.kubeflow.org/trainjob-controller"), override, raw],
        [PodSecurity(), override, raw, Queue("team-q")],
    ]


OPTION_SETS = len(_options("torch-distributed"))


def _build(runtime: str, trainer: Any, options: list[Any], ws: bool, folder: Path) -> Any:
    from kf_jupyter.build import build_trainjob

    rt = Runtime.from_manifest(RUNTIMES[runtime])
    if any(isinstance(o, TrainerCommand) for o in options):
        trainer = type(trainer)(**{**trainer.__dict__, "func": None})
    rc = RuntimeConfig(
        env={"A": "1", "TOKEN": SecretRef("s", "k")},
        packages_to_install=["six"],
        pip_index_urls=["https://pypi.org/simple"],
        workspace=str(folder) if ws else False,
    )
    job = build_trainjob(trainer, rt, rc, options, backend="kubernetes")
    workspace.prepare(job, trainer, rc, str(folder))
    fit_runtime_patches(job)
    return job


def _created(job: dict[str, Any]) -> dict[str, Any]:
    """As the API server stores it: the Trainer defaulter stamps each runtime patch's time."""
    obj = copy.deepcopy(job)
    for p in obj["spec"].get("runtimePatches") or []:
        p["time"] = "2026-01-01T00:00:00Z"
    return obj


def _merge(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (what the tool's suspend/resume PATCH is)."""
    out = copy.deepcopy(obj)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ws")
    (d / "train.py").write_text("print(1)\n")
    return d


@pytest.mark.slow
def test_every_trainjob_the_tool_builds_passes_the_cluster(folder: Path) -> None:
    """Each trainer x runtime x node count x resources, with the option sets and the workspace
    on/off in rotation: every runtime meets every option set and both workspace settings."""
    from kf_jupyter.backends.kubernetes.jobs import suspend_patch

    checked = 0
    failures: list[str] = []
    seen: set[tuple[str, int, bool]] = set()
    for k, (runtime, trainer) in enumerate(TRAINERS):
        opt_i, ws = k % OPTION_SETS, k % 3 != 0
        seen.add((runtime, opt_i, ws))
        options = _options(runtime)[opt_i]
        job = _build(runtime, trainer, options, ws, folder)
        assert_valid_trainjob(job)
        rt = RUNTIMES[runtime]
        where = f"{runtime} {type(trainer).__name__} {trainer.num_nodes} nodes options#{opt_i}"
        failures += [f"{where}: {r}" for r in cluster_refusals(job, rt)]
        if any(isinstance(o, PodSecurity) for o in options):  # every pod passes restricted
            for rj in build_jobset(job, rt)["spec"]["replicatedJobs"]:
                pod = rj["template"]["spec"]["template"]["spec"]
                failures += [
                    f"{where} {rj['name']} pods: {v}" for v in violations(pod, "restricted")
                ]
        created = _created(job)
        # suspend, then resume, as suspend_job / resume_job patch it
        suspended = _merge(created, suspend_patch(True))
        failures += [f"{where} suspend: {r}" for r in cluster_refusals(suspended, rt, created)]
        resumed = _merge(suspended, suspend_patch(False))
        failures += [f"{where} resume: {r}" for r in cluster_refusals(resumed, rt, suspended)]
        if "kueue.x-k8s.io/queue-name" in job["metadata"].get("labels", {}):
            # Kueue: suspended at creation, admitted with its own patch and unsuspended at once
            queued = _merge(created, {"spec": {"suspend": True}})
            patch = {"manager": "kueue.x-k8s.io/manager", "time": "2026-01-01T00:00:01Z",
                     "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
                         {"name": rj.name, "template": {"spec": {"template": {"spec": {
                             "nodeSelector": {"flavor": "a"}}}}}}
                         for rj in Runtime.from_manifest(rt).replicated_jobs]}}}}  # fmt: skip
            admitted = copy.deepcopy(queued)
            admitted["spec"]["runtimePatches"] = [*admitted["spec"].get("runtimePatches", []),
                                                  patch]  # fmt: skip
            admitted["spec"]["suspend"] = False
            assert len(admitted["spec"]["runtimePatches"]) <= 16
            failures += [f"{where} admit: {r}" for r in cluster_refusals(admitted, rt, queued)]
        checked += 1
    assert not failures, "\n".join(failures[:20])
    assert checked == len(TRAINERS)
    for runtime in {r for r, _ in TRAINERS}:
        assert {o for r, o, _ in seen if r == runtime} == set(range(OPTION_SETS)), runtime
        assert {w for r, _, w in seen if r == runtime} == {True, False}, runtime


def test_the_checks_refuse_what_a_cluster_refuses() -> None:
    """The checks above can fail: a patch changed while running, a reserved env, a long name."""
    rt = RUNTIMES["torch-distributed"]
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "x" * 49},
           "spec": {"runtimeRef": {"name": "torch-distributed"},
                    "trainer": {"numNodes": 2, "env": [{"name": "PET_NNODES", "value": "1"}]},
                    "runtimePatches": [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": {
                        "template": {"metadata": {"labels": {"a": "b"}}}}}]}}  # fmt: skip
    refusals = cluster_refusals(job, rt)
    assert any("pod names generated for this JobSet will exceed 63" in r for r in refusals)
    assert any("must not have reserved envs" in r for r in refusals)
    changed = strategic_merge(job, {"spec": {"runtimePatches": [
        {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"metadata": {
            "labels": {"a": "c"}}}}}]}})  # fmt: skip
    assert any(
        "RuntimePatches can only be modified" in r for r in cluster_refusals(changed, rt, job)
    )
