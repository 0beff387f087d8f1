"""The SDK's Kubernetes helpers (`kubeflow.trainer.backends.kubernetes.utils`), same meaning.

Where the SDK takes or returns its generated API models (`models.TrainerV1alpha1Trainer`, ...)
these take and return the same objects as API JSON (dicts with camelCase keys), the form
kf-jupyter builds and sends; model objects with `to_dict()` are accepted as input too. The
command that runs a function is kf-jupyter's (quoted, see docs/decisions.md), not the SDK's
heredoc: same meaning, safe for any source text.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

from ...constants import constants
from ...types import types
from ...utils import get_tpu_num_nodes, update_trainjob_status

TYPE_CHECKING = False

__all__ = [
    "get_args_from_dataset_preprocess_config",
    "get_args_from_peft_config",
    "get_args_using_torchtune_config",
    "get_command_using_train_func",
    "get_container_devices",
    "get_dataset_initializer",
    "get_model_initializer",
    "get_optional_initializer_envs",
    "get_resources_per_node",
    "get_runtime_trainer",
    "get_runtime_trainer_container",
    "get_script_for_python_packages",
    "get_tpu_num_nodes",
    "get_trainer_cr_from_builtin_trainer",
    "get_trainer_cr_from_custom_trainer",
    "get_trainjob_initializer_step",
    "get_trainjob_node_step",
    "update_trainjob_status",
]


def _json(obj: Any) -> Any:
    """API JSON for a dict or a generated model object (`to_dict()`), None stays None."""
    if obj is None or isinstance(obj, Mapping):
        return obj
    for method in ("to_dict", "model_dump"):
        fn = getattr(obj, method, None)
        if callable(fn):
            try:
                return fn(by_alias=True) if method == "model_dump" else fn()
            except TypeError:
                return fn()
    raise ValueError(f"Expected an API object (a dict), got {type(obj).__name__}.")


def get_container_devices(resources: Any) -> tuple[str, str] | None:
    """The device type and count of a container's `resources` limits (None: no limits)."""
    limits = (_json(resources) or {}).get("limits")
    if not limits:
        return None
    mig = [k for k in limits if k.startswith(constants.GPU_MIG_PREFIX)]
    if constants.GPU_LABEL in limits:
        device, key = constants.GPU_LABEL.split("/")[1], constants.GPU_LABEL
    elif constants.TPU_LABEL in limits:
        device, key = constants.TPU_LABEL.split("/")[1], constants.TPU_LABEL
    elif mig:
        if len(mig) > 1:
            raise ValueError(f"Multiple MIG resource types are not supported yet: {mig}")
        device, key = mig[0].split("/")[1], mig[0]
    elif constants.NPU_LABEL in limits:
        device, key = "npu", constants.NPU_LABEL
    elif constants.CPU_LABEL in limits:
        device, key = constants.CPU_LABEL, constants.CPU_LABEL
    else:
        raise ValueError(f"Unknown device type in the container resources: {limits}")
    count = limits[key]
    if count is None:
        raise ValueError(f"Failed to get device count for resources: {limits}")
    return device, str(count)


def get_runtime_trainer_container(replicated_jobs: list[Any]) -> dict[str, Any] | None:
    """The `node` container of the replicated job labelled as the trainer step, if any."""
    for rjob in replicated_jobs or []:
        rjob = _json(rjob) or {}
        template = rjob.get("template") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        if constants.TRAINJOB_ANCESTOR_LABEL not in labels:
            continue
        pod = (((template.get("spec") or {}).get("template") or {}).get("spec")) or {}
        for container in pod.get("containers") or []:
            if container.get("name") == constants.NODE:
                return container
    return None


def get_runtime_trainer(
    framework: str, replicated_jobs: list[Any], ml_policy: Any
) -> types.RuntimeTrainer:
    """The SDK's `RuntimeTrainer` of a runtime: type, image, devices, nodes, entrypoint."""
    container = get_runtime_trainer_container(replicated_jobs)
    if not (container and container.get("image")):
        raise ValueError(f"Runtime doesn't have trainer container {replicated_jobs}")
    policy = _json(ml_policy) or {}
    trainer = types.RuntimeTrainer(
        trainer_type=types.TrainerType.BUILTIN_TRAINER
        if framework == types.TORCH_TUNE
        else types.TrainerType.CUSTOM_TRAINER,
        framework=framework,
        image=container["image"],
    )
    if devices := get_container_devices(container.get("resources")):
        trainer.device, trainer.device_count = devices
    mpi = policy.get("mpi")
    if mpi and mpi.get("numProcPerNode"):
        trainer.device_count = str(mpi["numProcPerNode"])
    nodes = policy.get("numNodes")
    if trainer.device_count.isdigit() and nodes:
        trainer.device_count = str(int(trainer.device_count) * nodes)
    if nodes:
        trainer.num_nodes = nodes
    if framework == types.TORCH_TUNE:
        trainer.set_command(constants.TORCH_TUNE_COMMAND)
    elif policy.get("torch") is not None:
        trainer.set_command(constants.TORCH_COMMAND)
    elif mpi:
        trainer.set_command(constants.MPI_COMMAND)
    else:
        trainer.set_command(constants.DEFAULT_COMMAND)
    return trainer


def _step(name: str, container: Mapping[str, Any], pod_name: str, pod_status: Any) -> types.Step:
    status = _json(pod_status)
    step = types.Step(name=name, status=status.get("phase") if status else None, pod_name=pod_name)
    if devices := get_container_devices(container.get("resources")):
        step.device, step.device_count = devices
    return step


def get_trainjob_initializer_step(pod_name: str, pod_spec: Any, pod_status: Any) -> types.Step:
    """The `dataset-initializer` / `model-initializer` step of a pod."""
    names = {constants.DATASET_INITIALIZER, constants.MODEL_INITIALIZER}
    spec = _json(pod_spec) or {}
    container = next(c for c in spec.get("containers") or [] if c.get("name") in names)
    return _step(container["name"], container, pod_name, pod_status)


def get_trainjob_node_step(
    pod_name: str,
    pod_spec: Any,
    pod_status: Any,
    trainjob_runtime: types.Runtime,
    replicated_job_name: str,
    job_index: int,
) -> types.Step:
    """The `node-N` step of a pod (MPI: the launcher is node-0, the nodes shift by one)."""
    spec = _json(pod_spec) or {}
    container = next(c for c in spec.get("containers") or [] if c.get("name") == constants.NODE)
    step = _step(f"{constants.NODE}-{job_index}", container, pod_name, pod_status)
    command = trainjob_runtime.trainer.command
    if command and command[0] == "mpirun" and replicated_job_name != constants.LAUNCHER:
        step.name = f"{constants.NODE}-{job_index + 1}"
    for env in container.get("env") or []:
        value = env.get("value")
        if value and value.isdigit() and env.get("name") == constants.TORCH_ENV_NUM_PROC_PER_NODE:
            step.device_count = value
    return step


def get_resources_per_node(resources_per_node: dict[str, Any]) -> dict[str, Any]:
    """`resourcesPerNode` (requests = limits) from `{"gpu": 4, "cpu": 5, "memory": "10G"}`."""
    from ....errors import ValidationError
    from ....validation import normalize_resources

    try:
        resources = normalize_resources(resources_per_node)
    except ValidationError as exc:
        raise ValueError(str(exc)) from None
    return {"limits": dict(resources), "requests": dict(resources)}


def get_script_for_python_packages(
    packages_to_install: list[str],
    pip_index_urls: list[str],
    install_log_file: str = "pip_install.log",
) -> str:
    """A bash snippet that pip-installs the packages from the index URLs (every value quoted)."""
    opts = []
    if pip_index_urls:
        opts = ["--index-url", pip_index_urls[0]]
        for url in pip_index_urls[1:]:
            opts += ["--extra-index-url", url]
    argv = ["python", "-m", "pip", "install", "--quiet", "--no-warn-script-location", *opts]
    argv += list(packages_to_install)
    cmd = " ".join(shlex.quote(a) for a in argv)
    log = shlex.quote(install_log_file)
    names = shlex.quote(" ".join(packages_to_install))
    return (
        f"if PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1 {cmd} >{log} 2>&1; then\n"
        f"  echo Successfully installed Python packages: {names}\n"
        f"else\n  echo ERROR: Failed to install Python packages: {names} >&2\n"
        f"  cat {log} >&2\n  exit 1\nfi\n"
    )


def _kf_runtime(runtime: types.Runtime) -> Any:
    from ....runtimes import Runtime as KFRuntime

    source = getattr(runtime, "source", None)
    if isinstance(source, KFRuntime):
        return source
    command = tuple(getattr(runtime.trainer, "command", ()) or ())
    policy = "torch" if "torchrun" in " ".join(command) else "plain"
    if command and command[0] == "mpirun":
        policy = "mpi"
    return KFRuntime(name=runtime.name, framework=runtime.trainer.framework, ml_policy=policy)


def _trainer_spec(runtime: types.Runtime, trainer: Any) -> dict[str, Any]:
    from ....build import build_trainjob
    from ...trainers import runtime_config, to_trainer

    rt = _kf_runtime(runtime)
    job = build_trainjob(
        to_trainer(trainer, rt, "kubernetes"), rt, runtime_config(trainer), name="sdk-helper"
    )
    return job["spec"].get("trainer", {})


def get_command_using_train_func(
    runtime: types.Runtime,
    train_func: Callable[..., Any],
    train_func_parameters: dict[str, Any] | None,
    pip_index_urls: list[str],
    packages_to_install: list[str] | None,
) -> list[str]:
    """The trainer command that installs the packages and runs `train_func(**parameters)`."""
    if not callable(train_func):
        raise ValueError(
            f"Training function must be callable, got function type: {type(train_func)}"
        )
    trainer = types.CustomTrainer(
        func=train_func,
        func_args=train_func_parameters,
        packages_to_install=packages_to_install,
        pip_index_urls=list(pip_index_urls or []),
    )
    return list(_trainer_spec(runtime, trainer).get("command") or [])


def get_trainer_cr_from_custom_trainer(runtime: types.Runtime, trainer: Any) -> dict[str, Any]:
    """`spec.trainer` for a `CustomTrainer` or `CustomTrainerContainer` on `runtime`."""
    return _trainer_spec(runtime, trainer)


def get_trainer_cr_from_builtin_trainer(
    runtime: types.Runtime,
    trainer: types.BuiltinTrainer,
    initializer: types.Initializer | None = None,
) -> dict[str, Any]:
    """`spec.trainer` for a `BuiltinTrainer`: nodes, resources, `tune run` and its args."""
    config = trainer.config
    if type(config).__name__ != "TorchTuneConfig":
        raise ValueError(f"The BuiltinTrainer config is invalid: {config}")
    out: dict[str, Any] = {}
    if config.num_nodes:
        out["numNodes"] = config.num_nodes
    if config.resources_per_node:
        out["resourcesPerNode"] = get_resources_per_node(config.resources_per_node)
    out["command"] = list(runtime.trainer.command)
    out["args"] = get_args_using_torchtune_config(config, initializer)
    return out


def _enum_value(value: Any, kind: str) -> str:
    if type(value).__name__ != kind or not hasattr(value, "value"):
        raise ValueError(f"Invalid {kind}: {value}.")
    return str(value.value)


def get_args_using_torchtune_config(
    fine_tuning_config: types.TorchTuneConfig,
    initializer: types.Initializer | None = None,
) -> list[str]:
    """The `tune run` overrides for a `TorchTuneConfig` (and a Hugging Face dataset's path)."""
    cfg = fine_tuning_config
    args = []
    if cfg.dtype:
        args.append(f"dtype={_enum_value(cfg.dtype, 'DataType')}")
    if cfg.batch_size:
        args.append(f"batch_size={cfg.batch_size}")
    if cfg.epochs:
        args.append(f"epochs={cfg.epochs}")
    if cfg.loss:
        args.append(f"loss={_enum_value(cfg.loss, 'Loss')}")
    dataset = getattr(initializer, "dataset", None)
    if dataset is not None and type(dataset).__name__ == "HuggingFaceDatasetInitializer":
        uri = dataset.storage_uri
        uri = uri if uri.startswith("hf://") else "hf://" + uri
        parts = urlparse(uri).path.strip("/").split("/")
        rel = "/".join(parts[1:]) if len(parts) > 1 else "."
        key = "data_files" if rel != "." and "." in rel else "data_dir"
        args.append(f"dataset.{key}={os.path.join(constants.DATASET_PATH, rel)}")
    if cfg.peft_config:
        args += get_args_from_peft_config(cfg.peft_config)
    if cfg.dataset_preprocess_config:
        args += get_args_from_dataset_preprocess_config(cfg.dataset_preprocess_config)
    return args


_PEFT_FIELDS = (
    "apply_lora_to_mlp",
    "apply_lora_to_output",
    "lora_rank",
    "lora_alpha",
    "lora_dropout",
    "quantize_base",
    "use_dora",
)


def get_args_from_peft_config(peft_config: types.LoraConfig) -> list[str]:
    """`model.lora_rank=8`, ... for the set fields of a `LoraConfig`."""
    if type(peft_config).__name__ != "LoraConfig":
        raise ValueError(f"Invalid PEFT config type: {type(peft_config)}.")
    args = []
    for name in _PEFT_FIELDS:
        value = getattr(peft_config, name, None)
        if value is not None:
            args.append(f"model.{name}={value}")
    if peft_config.lora_attn_modules:
        args.append(f"model.lora_attn_modules=[{','.join(peft_config.lora_attn_modules)}]")
    return args


def get_args_from_dataset_preprocess_config(
    dataset_preprocess_config: types.TorchTuneInstructDataset,
) -> list[str]:
    """`dataset=torchtune.datasets.instruct_dataset` and the set fields of the dataset config."""
    cfg = dataset_preprocess_config
    if type(cfg).__name__ != "TorchTuneInstructDataset":
        raise ValueError(f"Invalid dataset preprocess config type: {type(cfg)}.")
    args = [f"dataset={constants.TORCH_TUNE_INSTRUCT_DATASET}"]
    if cfg.source:
        args.append(f"dataset.source={_enum_value(cfg.source, 'DataFormat')}")
    if cfg.split:
        args.append(f"dataset.split={cfg.split}")
    if cfg.train_on_input is not None:
        args.append(f"dataset.train_on_input={cfg.train_on_input}")
    if cfg.new_system_prompt:
        args.append(f"dataset.new_system_prompt={cfg.new_system_prompt}")
    if cfg.column_map:
        args.append(f"dataset.column_map={cfg.column_map}")
    return args


def get_optional_initializer_envs(
    initializer: types.BaseInitializer, required_fields: set[str]
) -> list[dict[str, str]]:
    """`[{"name": "ACCESS_TOKEN", "value": ...}, ...]` for the set fields not in `required_fields`."""
    envs = []
    for f in dataclasses.fields(initializer):
        if f.name in required_fields:
            continue
        value = getattr(initializer, f.name)
        if value is None:
            continue
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        envs.append({"name": f.name.upper(), "value": value})
    return envs


def get_dataset_initializer(dataset: Any) -> dict[str, Any]:
    """`spec.initializer.dataset` for a Hugging Face, S3 or data-cache dataset."""
    from ...initializers import initializer_spec

    if type(dataset).__name__ not in (
        "HuggingFaceDatasetInitializer",
        "S3DatasetInitializer",
        "DataCacheInitializer",
    ):
        raise ValueError(f"Dataset initializer type is invalid: {type(dataset)}")
    return initializer_spec(dataset)


def get_model_initializer(model: Any) -> dict[str, Any]:
    """`spec.initializer.model` for a Hugging Face or S3 model."""
    from ...initializers import initializer_spec

    if type(model).__name__ not in ("HuggingFaceModelInitializer", "S3ModelInitializer"):
        raise ValueError(f"Model initializer type is invalid: {type(model)}")
    return initializer_spec(model)
