"""Kubeflow SDK shapes beyond CustomTrainer (issue 23): BuiltinTrainer (torchtune), the
TrainJobTemplate example, backend configs from their SDK module paths, log line endings.

The torchtune TrainJob is compared with the one the installed SDK's own builder
(`KubernetesBackend._get_trainjob_spec`) makes for the same objects.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

import kf_jupyter.sdk as sdk
from kf_jupyter.build import build_trainjob
from kf_jupyter.errors import ValidationError
from kf_jupyter.runtimes import Runtime as KFRuntime
from kf_jupyter.sdk.initializers import InitializerOption
from kf_jupyter.sdk.trainers import builtin_options, to_trainer

TUNE = "torchtune-llama3.2-1b"


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def configs(mod: Any) -> dict[str, tuple[Any, Any]]:
    """The same TorchTune set-ups, built from `mod` (kubeflow.trainer or kf_jupyter.sdk)."""
    full = mod.TorchTuneConfig(
        dtype=mod.DataType.BF16,
        batch_size=4,
        epochs=2,
        loss=mod.Loss.CEWithChunkedOutputLoss,
        num_nodes=2,
        peft_config=mod.LoraConfig(lora_rank=8, lora_alpha=16, lora_dropout=0.1, use_dora=True),
        dataset_preprocess_config=mod.TorchTuneInstructDataset(
            source=mod.DataFormat.JSON,
            split="train[:10%]",
            train_on_input=False,
            new_system_prompt="Be brief.",
            column_map={"input": "question", "output": "answer"},
        ),
        resources_per_node={"gpu": 2, "memory": "16Gi"},
    )
    init = mod.Initializer(
        dataset=mod.HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca/data"),
        model=mod.HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B-Instruct"),
    )
    file_init = mod.Initializer(
        dataset=mod.HuggingFaceDatasetInitializer(storage_uri="org/set/train.json")
    )
    return {
        "defaults": (mod.TorchTuneConfig(), None),
        "full": (full, init),
        "dataset-file": (mod.TorchTuneConfig(epochs=1), file_init),
        "lora-only": (mod.TorchTuneConfig(peft_config=mod.LoraConfig()), None),
    }


def sdk_spec(config: Any, initializer: Any) -> dict[str, Any]:
    """What the Kubeflow SDK itself submits (its own builder, no cluster needed)."""
    kf = pytest.importorskip("kubeflow.trainer")
    from kubeflow.trainer.backends.kubernetes.backend import KubernetesBackend
    from kubeflow.trainer.constants import constants
    from kubeflow.trainer.types import types as kt

    rt = kt.Runtime(
        name=TUNE,
        trainer=kt.RuntimeTrainer(
            trainer_type=kt.TrainerType.BUILTIN_TRAINER, framework="torchtune", image="x"
        ),
        kind=kt.RuntimeKind.CLUSTER_TRAINING_RUNTIME,
    )
    rt.trainer.set_command(constants.TORCH_TUNE_COMMAND)
    backend = object.__new__(KubernetesBackend)
    spec = backend._get_trainjob_spec(
        runtime=rt, initializer=initializer, trainer=kf.BuiltinTrainer(config=config)
    )
    return spec.to_dict()


def our_spec(config: Any, initializer: Any) -> dict[str, Any]:
    rt = KFRuntime(name=TUNE, framework="torchtune", ml_policy="torch")
    trainer = sdk.BuiltinTrainer(config=config)
    opts = builtin_options(trainer, rt, initializer)
    if initializer is not None:
        opts.append(InitializerOption(initializer))
    job = build_trainjob(to_trainer(trainer, rt, "kubernetes"), rt, None, opts, name="tune-1")
    return job["spec"]


def same_meaning(spec: Any) -> Any:
    """A spec with the two differences that mean nothing: a quantity as the number 2.0 (the
    SDK) or the string "2" (kf-jupyter; the API server stores both as "2"), and an empty `env`
    list (the SDK) or none (kf-jupyter)."""
    if isinstance(spec, dict):
        out = {}
        for key, value in spec.items():
            if key == "env" and value == []:
                continue
            if key in ("limits", "requests") and isinstance(value, dict):
                value = {
                    k: float(v) if str(v).replace(".", "", 1).isdigit() else v
                    for k, v in value.items()
                }
            out[key] = same_meaning(value)
        return out
    if isinstance(spec, list):
        return [same_meaning(v) for v in spec]
    return spec


@pytest.mark.parametrize("case", ["defaults", "full", "dataset-file", "lora-only"])
def test_builtin_trainer_builds_the_trainjob_the_sdk_builds(case: str) -> None:
    kf = pytest.importorskip("kubeflow.trainer")
    theirs = sdk_spec(*configs(kf)[case])
    ours = copy.deepcopy(our_spec(*configs(sdk)[case]))
    # the API group is the default the API server fills in; the SDK leaves it out
    assert ours["runtimeRef"].pop("apiGroup") == "trainer.kubeflow.org"
    assert same_meaning(ours) == same_meaning(theirs)
    if case == "full":
        args = ours["trainer"]["args"]
        assert "model.lora_rank=8" in args and "dtype=bf16" in args
        assert "dataset.data_dir=/workspace/dataset/data" in args
        assert ours["trainer"]["command"] == ["tune", "run"]


def test_builtin_trainer_locally_says_why_not_and_what_to_do(state) -> None:
    client = sdk.TrainerClient()
    with pytest.raises(ValidationError) as err:
        client.train(runtime=TUNE, trainer=sdk.BuiltinTrainer(config=sdk.TorchTuneConfig(epochs=1)))
    msg = str(err.value)
    assert "no model" in msg and "KubernetesBackendConfig" in msg and "\n" not in msg
    assert client.list_jobs() == []


def test_builtin_trainer_needs_a_torchtune_runtime() -> None:
    rt = KFRuntime(name="torch-distributed", framework="torch", ml_policy="torch")
    with pytest.raises(ValidationError, match="torchtune runtime"):
        to_trainer(sdk.BuiltinTrainer(config=sdk.TorchTuneConfig()), rt, "kubernetes")


def test_tpu_request_locally_is_one_clear_paragraph(state) -> None:
    client = sdk.TrainerClient()
    trainer = sdk.CustomTrainer(
        func=print, num_nodes=sdk.get_tpu_num_nodes(1, "2x4"), resources_per_node={"tpu": 4}
    )
    with pytest.raises(ValidationError) as err:
        client.train(runtime="torch-distributed", trainer=trainer)
    assert "TPU" in str(err.value) and "KubernetesBackendConfig" in str(err.value)


def hello(greeting: str = "hi") -> None:
    import os

    print(f"{greeting} from {os.environ['DMLC_TASK_ID']}")
    print("second line")


def test_the_sdks_pytorch_distributed_simple_shape_runs(state) -> None:
    """`examples/trainer/pytorch_distributed_simple.py`: a TrainJobTemplate, the local backend
    config imported from `backends.localprocess.backend`, `train(**template)`."""
    from kf_jupyter.sdk import CustomTrainer, TrainerClient, TrainJobTemplate
    from kf_jupyter.sdk.backends.localprocess.backend import LocalProcessBackendConfig
    from kf_jupyter.sdk.options import Name

    client = TrainerClient(backend_config=LocalProcessBackendConfig())
    template = TrainJobTemplate(
        runtime="xgboost-distributed",
        trainer=CustomTrainer(func=hello, func_args={"greeting": "hey"}, num_nodes=1),
    )
    name = client.train(**template, options=[Name("tmpl-1")])
    assert name == "tmpl-1"
    job = client.wait_for_job_status(name, timeout=120, polling_interval=1)
    assert job.status == "Complete"
    assert list(client.get_job_logs(name)) == ["hey from 0", "second line"]


def test_container_backend_lines_keep_their_newline(state, capsys) -> None:
    """Kubeflow's container notebook prints `print(line, end="")`: lines must end in \\n."""
    from kf_jupyter.sdk import ContainerBackendConfig, CustomTrainer, TrainerClient

    client = TrainerClient(backend_config=ContainerBackendConfig())
    name = client.train(
        runtime="xgboost-distributed", trainer=CustomTrainer(func=hello, num_nodes=1)
    )
    client.wait_for_job_status(name, timeout=120, polling_interval=1)
    lines = list(client.get_job_logs(name))
    assert lines == ["hi from 0\n", "second line\n"]
    for line in client.get_job_logs(name, follow=True):
        print(line, end="")
    assert capsys.readouterr().out == "hi from 0\nsecond line\n"
    with pytest.raises(ValidationError, match="container images"):
        client.train(trainer=sdk.CustomTrainerContainer(image="busybox"))


def test_the_sdks_backend_classes_take_their_configs(state) -> None:
    from kf_jupyter.sdk.backends.base import RuntimeBackend
    from kf_jupyter.sdk.backends.container.adapters.docker import DockerClientAdapter
    from kf_jupyter.sdk.backends.container.backend import ContainerBackend
    from kf_jupyter.sdk.backends.localprocess.backend import LocalProcessBackend

    for backend in (
        LocalProcessBackend(sdk.LocalProcessBackendConfig()),
        ContainerBackend(sdk.ContainerBackendConfig()),
    ):
        assert isinstance(backend, RuntimeBackend)
        assert "torch-distributed" in [r.name for r in backend.list_runtimes()]
    with pytest.raises(ValueError, match="starts no containers"):
        DockerClientAdapter()


@pytest.fixture
def k8s_client(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    return sdk.TrainerClient(
        backend_config=sdk.KubernetesBackendConfig(
            namespace=k8s_namespace, config_file=k8s_admin_kubeconfig
        )
    )


@pytest.mark.slow
def test_builtin_trainer_on_the_api_server(k8s_client, k8s_cluster) -> None:
    from kubernetes import client as k8s

    kf = pytest.importorskip("kubeflow.trainer")
    config, init = configs(sdk)["full"]
    runtime = k8s_client.get_runtime(TUNE)
    assert runtime.trainer.trainer_type == sdk.TrainerType.BUILTIN_TRAINER
    name = k8s_client.train(
        runtime=runtime, initializer=init, trainer=sdk.BuiltinTrainer(config=config)
    )
    obj = k8s.CustomObjectsApi(k8s_cluster.api_client()).get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", k8s_client.backend.namespace, "trainjobs", name
    )
    spec = obj["spec"]
    theirs = sdk_spec(*configs(kf)["full"])
    assert same_meaning(spec["trainer"]) == same_meaning(theirs["trainer"])
    assert same_meaning(spec["initializer"]) == same_meaning(theirs["initializer"])
    assert spec["runtimeRef"]["name"] == TUNE
    assert k8s_client.get_job(name).runtime.name == TUNE
    k8s_client.delete_job(name)


@pytest.mark.slow
def test_torchtune_job_runs_to_completion_on_the_harness(k8s_client) -> None:
    """A BuiltinTrainer(TorchTuneConfig) job runs to the end on the harness, as a user sees it.

    The stand-in controller gives the trainer pod the command the Trainer builds for `tune run`
    (recipe and config from the job's shape, the runtime's immutable overrides); the torchtune
    image's `tune` is played by tests/k8s_cluster/tune_standin.py, since the real one needs the
    model and GPUs. Before the stand-in had both, the node pod failed (`tune`: not found).
    """
    init = sdk.Initializer(
        dataset=sdk.HuggingFaceDatasetInitializer(storage_uri="hf://tatsu-lab/alpaca/data"),
        model=sdk.HuggingFaceModelInitializer(storage_uri="hf://meta-llama/Llama-3.2-1B-Instruct"),
    )
    config = sdk.TorchTuneConfig(epochs=2, batch_size=2, resources_per_node={"cpu": 1})
    name = k8s_client.train(
        runtime=k8s_client.get_runtime(TUNE), initializer=init, trainer=sdk.BuiltinTrainer(config)
    )
    job = k8s_client.wait_for_job_status(name, {"Complete", "Failed"}, timeout=180)
    logs = list(k8s_client.get_job_logs(name))
    assert job.status == "Complete", "".join(logs)
    steps = {s.name: s.status for s in job.steps}
    assert steps == {
        "dataset-initializer": "Succeeded",
        "model-initializer": "Succeeded",
        "node-0": "Succeeded",
    }
    text = "".join(logs)
    # one node, one process (no GPU, 1 CPU): the Trainer picks the single-device recipe
    assert "recipe full_finetune_single_device, config llama3_2/1B_full_single_device" in text
    assert "stand-in torchtune: epochs=2" in text and "batch_size=2" in text
    assert "checkpointer.checkpoint_dir=/workspace/model" in text  # the runtime's overrides
    assert sum(1 for line in logs if "|Loss: " in line) == 2 * 3
    init_log = "".join(k8s_client.get_job_logs(name, step="model-initializer"))
    assert "hf://meta-llama/Llama-3.2-1B-Instruct" in init_log
    k8s_client.delete_job(name)


@pytest.mark.parametrize(
    ("trainer", "expected"),
    [
        ({"resourcesPerNode": {"limits": {"cpu": "1"}}}, ["full_finetune_single_device", "--config", "llama3_2/1B_full_single_device"]),
        ({}, ["--rdzv_endpoint=tune-1-node-0-0.tune-1:29500", "full_finetune_distributed", "--config", "llama3_2/1B_full"]),
        ({"args": ["model.lora_attn_modules=[q_proj]"], "numProcPerNode": 2}, ["--rdzv_endpoint=tune-1-node-0-0.tune-1:29500", "lora_finetune_distributed", "--config", "llama3_2/1B_lora"]),
        ({"args": ["model.quantize_base=True"], "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}}, ["lora_finetune_single_device", "--config", "llama3_2/1B_qlora_single_device"]),
    ],
)  # fmt: skip
def test_the_harness_completes_a_tune_run_command_as_the_trainer_does(trainer, expected) -> None:
    """The stand-in's copy of torch.go:175-200 / torchtune.go getRecipeAndConfig (v2.3.0): the
    runtime asks for 2 GPUs, so with no resources given it is the distributed recipe."""
    import yaml

    from kf_jupyter.backends.local.runtimes import manifests_dir
    from tests.k8s_cluster.trainer_model import torchtune_command

    path = manifests_dir() / "base/runtimes/torchtune/llama3_2/llama3_2_1B.yaml"
    try:
        with open(path, encoding="utf-8") as fh:
            runtime = yaml.safe_load(fh)
    except OSError:
        pytest.skip("no Trainer manifests beside the repository")
    tj = {
        "metadata": {"name": "tune-1"},
        "spec": {"runtimeRef": {"name": TUNE}, "trainer": {"command": ["tune", "run"], **trainer}},
    }
    command = torchtune_command(tj, runtime, 1, runtime_command(runtime))
    assert command[:2] == ["tune", "run"]
    assert command[2 : 2 + len(expected)] == expected
    assert "output_dir=/workspace/output" in command


def runtime_command(runtime: dict[str, Any]) -> list[str]:
    """The `node` container's command in a runtime manifest."""
    for rj in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        for c in rj["template"]["spec"]["template"]["spec"]["containers"]:
            if c["name"] == "node":
                return list(c.get("command") or [])
    return []
