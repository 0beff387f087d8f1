"""build_trainjob: every manifest validates against the real CRD and the official models."""

from __future__ import annotations

import logging

import pytest

from kf_jupyter import (
    JAXTrainer,
    MPITrainer,
    OptionError,
    Runtime,
    RuntimeConfig,
    RuntimeMismatchError,
    SecretRef,
    TorchTrainer,
    ValidationError,
    XGBoostTrainer,
    build_launch_plan,
    build_trainjob,
)
from kf_jupyter.options import (
    ActiveDeadlineSeconds,
    Annotations,
    ContainerOverride,
    Labels,
    Name,
    PodSpecOverride,
    PodTemplateOverride,
    PodTemplateOverrides,
    RuntimePatch,
    SpecAnnotations,
    SpecLabels,
    TrainerArgs,
    TrainerCommand,
)
from kf_jupyter.policies import JobShape, get_policy
from tests.k8s_cluster.crds import load_runtimes
from tests.manifests import assert_valid_trainjob


def train(lr: float = 0.1, epochs: int = 1) -> dict:
    import os

    return {"rank": os.environ.get("RANK"), "lr": lr}


@pytest.fixture(scope="module")
def rts() -> dict[str, Runtime]:
    return {o["metadata"]["name"]: Runtime.from_manifest(o) for o in load_runtimes()}


TRAINERS = [
    TorchTrainer(func=train, func_args={"lr": 0.5}, num_nodes=2, num_proc_per_node=2),
    TorchTrainer(func=train, max_restarts=2, monitor_interval=1.5, resources_per_node={"cpu": 2}),
    MPITrainer(func=train, num_nodes=2, num_proc_per_node=2),
    JAXTrainer(func=train, num_nodes=2),
    XGBoostTrainer(func=train, num_nodes=2, resources_per_node={"gpu": 1, "memory": "8Gi"}),
]
RUNTIME_FOR = {
    "TorchTrainer": "torch-distributed",
    "MPITrainer": "deepspeed-distributed",
    "JAXTrainer": "jax-distributed",
    "XGBoostTrainer": "xgboost-distributed",
}


@pytest.mark.parametrize("trainer", TRAINERS, ids=lambda t: type(t).__name__)
def test_manifest_validates_for_every_trainer(trainer, rts) -> None:
    rt = rts[RUNTIME_FOR[type(trainer).__name__]]
    job = build_trainjob(trainer, rt, RuntimeConfig(env={"A": "1"}))
    assert_valid_trainjob(job)
    st = job["spec"]["trainer"]
    assert st["command"][:2] == ["bash", "-c"]
    assert job["spec"]["runtimeRef"] == {
        "name": rt.name,
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    if trainer.num_nodes:
        assert st["numNodes"] == trainer.num_nodes


def test_everything_at_once_validates(rts) -> None:
    trainer = TorchTrainer(
        func=train,
        func_args={"lr": 0.01, "epochs": 3},
        num_nodes=2,
        num_proc_per_node=2,
        max_restarts=1,
        resources_per_node={"cpu": "500m", "memory": "2Gi"},
        image="pytorch/pytorch:2.13.0",
    )
    rc = RuntimeConfig(
        packages_to_install=["transformers[torch]"],
        pip_index_urls=["https://pypi.org/simple", "https://mirror.example.com/simple"],
        env={"LR": "0.1", "HF_TOKEN": SecretRef("hf", "token")},
    )
    options = [
        Name("mnist-ddp"),
        Labels({"team": "ml"}),
        Annotations({"example.com/note": "free text: ok"}),
        SpecLabels({"kueue.x-k8s.io/queue-name": "q"}),
        SpecAnnotations({"a.b/c": "d"}),
        PodTemplateOverrides(
            PodTemplateOverride(
                target_jobs=["node"],
                metadata={"labels": {"pod": "yes"}},
                spec=PodSpecOverride(
                    node_selector={"gpu-type": "a100"},
                    tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                    containers=[
                        ContainerOverride(
                            name="node", volume_mounts=[{"name": "data", "mountPath": "/data"}]
                        ),
                        # (a side container's env needs a runtime that has one: torch-distributed
                        # has only `node`, so a `sidecar` here is refused, test_k8s_fidelity.py)
                    ],
                    service_account_name="trainer",
                    image_pull_secrets=[{"name": "regcred"}],
                ),
            )
        ),
        ActiveDeadlineSeconds(3600),
    ]
    job = build_trainjob(trainer, rts["torch-distributed"], rc, options)
    assert_valid_trainjob(job)
    assert job["metadata"]["name"] == "mnist-ddp"
    assert job["metadata"]["labels"]["team"] == "ml"
    assert job["spec"]["activeDeadlineSeconds"] == 3600
    (patch,) = job["spec"]["runtimePatches"]
    assert patch["manager"] == "kf-jupyter.io/kf-jupyter"
    tmpl = patch["trainingRuntimeSpec"]["template"]
    assert tmpl["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "q"}
    pod = tmpl["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"gpu-type": "a100"}
    assert pod["metadata"]["labels"] == {"pod": "yes"}
    env = {e["name"]: e for e in job["spec"]["trainer"]["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
    }
    assert job["spec"]["trainer"]["resourcesPerNode"]["limits"]["cpu"] == "500m"
    script = job["spec"]["trainer"]["command"][2]
    assert "--max-restarts 1" in script
    # Index URLs travel in the environment, never in the command (credentials, issue 13).
    assert "example.com" not in script and "pypi.org" not in script
    assert env["KF_JUPYTER_PIP_INDEX_0"]["value"] == "https://pypi.org/simple"
    assert env["KF_JUPYTER_PIP_INDEX_1"]["value"] == "https://mirror.example.com/simple"
    assert 'PIP_EXTRA_INDEX_URL="${KF_JUPYTER_PIP_INDEX_1}"' in script


def test_torch_flags_land_in_command(rts) -> None:
    t = TorchTrainer(func=train, max_restarts=3, monitor_interval=0.5, num_proc_per_node=2)
    job = build_trainjob(t, rts["torch-distributed"])
    script = job["spec"]["trainer"]["command"][2]
    assert "exec torchrun --max-restarts 3 --monitor-interval 0.5 " in script
    assert job["spec"]["trainer"]["numProcPerNode"] == 2


def test_custom_option_callable(rts) -> None:
    def suspend(job_spec, trainer, backend):
        job_spec["spec"]["suspend"] = True

    job = build_trainjob(TorchTrainer(func=train), rts["torch-distributed"], options=[suspend])
    assert job["spec"]["suspend"] is True
    assert_valid_trainjob(job)


def test_raw_runtime_patch_parity(rts) -> None:
    patch = RuntimePatch(
        {"template": {"metadata": {"labels": {"x": "y"}}}}, manager="example.com/tool"
    )
    job = build_trainjob(TorchTrainer(func=train), rts["torch-distributed"], options=[patch])
    assert job["spec"]["runtimePatches"][0]["manager"] == "example.com/tool"
    assert_valid_trainjob(job)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ([Name("a"), Name("b")], "Two Name options"),
        ([TrainerCommand(["python", "x.py"])], "cannot be used with a trainer that has func="),
        ([TrainerArgs(["--x"])], "func_args instead"),
        (["not callable"], "is not callable"),
    ],
)
def test_contradicting_options(options, words, rts) -> None:
    with pytest.raises(OptionError) as info:
        build_trainjob(TorchTrainer(func=train), rts["torch-distributed"], options=options)
    assert words in str(info.value)


def test_name_twice_is_an_error(rts) -> None:
    with pytest.raises(OptionError):
        build_trainjob(
            TorchTrainer(func=train), rts["torch-distributed"], options=[Name("a")], name="b"
        )


def test_trainer_command_without_func(rts) -> None:
    job = build_trainjob(
        TorchTrainer(num_nodes=1),
        rts["torch-distributed"],
        options=[TrainerCommand(["torchrun", "train.py"]), TrainerArgs(["--epochs=3"])],
    )
    assert job["spec"]["trainer"]["command"] == ["torchrun", "train.py"]
    assert job["spec"]["trainer"]["args"] == ["--epochs=3"]
    assert_valid_trainjob(job)


def test_env_on_node_container_through_patch_is_refused() -> None:
    with pytest.raises(OptionError) as info:
        PodTemplateOverride(
            ["node"], spec=PodSpecOverride(containers=[ContainerOverride("node", env=[{}])])
        )
    assert "RuntimeConfig(env=...)" in str(info.value)


def test_placement_options_skipped_locally_with_one_warning(rts, caplog) -> None:
    opts = [
        PodTemplateOverrides(
            PodTemplateOverride(["node"], spec=PodSpecOverride(node_selector={"a": "b"}))
        ),
        SpecLabels({"a": "b"}),
        Labels({"team": "x"}),
    ]
    with caplog.at_level(logging.WARNING, logger="kf_jupyter.options"):
        job = build_trainjob(
            TorchTrainer(func=train), rts["torch-distributed"], options=opts, backend="local"
        )
    assert "runtimePatches" not in job["spec"]
    assert job["metadata"]["labels"]["team"] == "x"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "PodTemplateOverrides(node_selector)" in warnings[0].getMessage()
    assert "SpecLabels" in warnings[0].getMessage()


def test_kubernetes_only_option_on_local_is_an_error(rts) -> None:
    class K8sOnly(Labels):
        backends = frozenset({"kubernetes"})

    with pytest.raises(OptionError) as info:
        build_trainjob(
            TorchTrainer(func=train),
            rts["torch-distributed"],
            options=[K8sOnly({"a": "b"})],
            backend="local",
        )
    assert "not compatible with the local backend" in str(info.value)


@pytest.mark.parametrize("name", ["PET_NNODES", "PET_MASTER_ADDR", "KF_JUPYTER_WORKDIR"])
def test_reserved_env(name, rts) -> None:
    with pytest.raises(ValidationError) as info:
        build_trainjob(
            TorchTrainer(func=train), rts["torch-distributed"], RuntimeConfig(env={name: "x"})
        )
    assert name in str(info.value)


def test_reserved_env_is_per_policy(rts) -> None:
    with pytest.raises(ValidationError):
        build_trainjob(
            JAXTrainer(func=train),
            rts["jax-distributed"],
            RuntimeConfig(env={"JAX_PROCESS_ID": "1"}),
        )
    # PET_* are torch's; a JAX job may use them freely.
    build_trainjob(
        JAXTrainer(func=train), rts["jax-distributed"], RuntimeConfig(env={"PET_X": "1"})
    )


@pytest.mark.parametrize(
    "name", ["Upper", "1abc", "a" * 64, "with_underscore", "../etc", "ends-", ""]
)
def test_invalid_job_names(name, rts) -> None:
    with pytest.raises(ValidationError) as info:
        build_trainjob(TorchTrainer(func=train), rts["torch-distributed"], name=name)
    assert "RFC 1035" in str(info.value)


def test_wrong_runtime_for_trainer(rts) -> None:
    with pytest.raises(RuntimeMismatchError):
        build_trainjob(TorchTrainer(func=train), rts["jax-distributed"])


def test_lambda_and_sourceless_functions(rts) -> None:
    with pytest.raises(ValidationError) as info:
        build_trainjob(TorchTrainer(func=lambda: None), rts["torch-distributed"])
    assert "lambda" in str(info.value)
    ns: dict = {}
    exec("def f():\n    return 1\n", ns)
    with pytest.raises(ValidationError) as info2:
        build_trainjob(TorchTrainer(func=ns["f"]), rts["torch-distributed"])
    assert "source of function 'f' cannot be found" in str(info2.value)


def test_nested_function_is_dedented(rts) -> None:
    def outer():
        def inner_train(x=1):
            return x

        return inner_train

    job = build_trainjob(TorchTrainer(func=outer()), rts["torch-distributed"])
    # (this module uses postponed annotations, so the shipped source starts with that import)
    assert (
        "printf '%s' 'from __future__ import annotations\ndef inner_train(x=1):\n    return x\n'"
        in job["spec"]["trainer"]["command"][2]
    )


def test_policy_env_matches_facts() -> None:
    shape = JobShape("job", num_nodes=2, num_proc_per_node=4, gpus_per_node=0)
    assert get_policy("torch").cluster_env(shape, 1) == {
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": "4",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "job-node-0-0.job",
        "PET_MASTER_PORT": "29500",
    }
    assert get_policy("jax").cluster_env(shape, 1) == {
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "1",
        "JAX_COORDINATOR_ADDRESS": "job-node-0-0.job:29500",
    }
    assert get_policy("xgboost").cluster_env(JobShape("job", 2, None, 4), 1) == {
        "DMLC_TRACKER_URI": "job-node-0-0.job",
        "DMLC_TRACKER_PORT": "29500",
        "DMLC_TASK_ID": "1",
        "DMLC_NUM_WORKER": "8",
    }
    mpi = get_policy("mpi")
    assert mpi.cluster_env(shape, 0)["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert mpi.cluster_hostfile(shape) == ("job-node-0-0.job slots=4\njob-node-0-1.job slots=4\n")
    assert get_policy("torch").cluster_env(JobShape("j", 1), 0)["PET_NPROC_PER_NODE"] == "auto"


def test_local_plan_maps_hosts_and_keeps_secrets_out(rts) -> None:
    trainer = TorchTrainer(func=train, num_nodes=2, num_proc_per_node=2)
    rc = RuntimeConfig(env={"A": "1", "TOKEN": SecretRef("s", "k")})
    job = build_trainjob(trainer, rts["torch-distributed"], rc, backend="local")
    plan = build_launch_plan(job, trainer, rts["torch-distributed"], 41234, "/tmp/x")
    assert [p.name for p in plan.processes] == ["node-0", "node-1"]
    p1 = plan.processes[1]
    assert p1.env["PET_MASTER_ADDR"] == "127.0.0.1" and p1.env["PET_MASTER_PORT"] == "41234"
    assert p1.env["PET_NODE_RANK"] == "1" and p1.env["A"] == "1"
    assert p1.argv == job["spec"]["trainer"]["command"]
    assert "TOKEN" not in p1.env and p1.secret_env["TOKEN"] == SecretRef("s", "k")
    mpi = MPITrainer(func=train, num_nodes=2, num_proc_per_node=2)
    mplan = build_launch_plan(
        build_trainjob(mpi, rts["deepspeed-distributed"], backend="local"),
        mpi,
        rts["deepspeed-distributed"],
        1,
        "/tmp/j",
    )
    (launcher,) = mplan.processes
    assert launcher.files == {"/tmp/j/hostfile": "127.0.0.1 slots=4\n"}
    assert launcher.env["OMPI_MCA_orte_default_hostfile"] == "/tmp/j/hostfile"
