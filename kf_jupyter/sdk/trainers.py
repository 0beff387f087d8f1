"""An SDK trainer (`CustomTrainer`, `CustomTrainerContainer`, `BuiltinTrainer`, or the SDK's own
objects) as kf-jupyter's framework trainer, options and RuntimeConfig (pure functions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..config import RuntimeConfig
from ..errors import ValidationError
from ..runtimes import Runtime as KFRuntime
from ..trainers import BaseTrainer, JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer


@dataclass(kw_only=True)
class TorchTuneTrainer(BaseTrainer):
    """The SDK's `BuiltinTrainer` on a torchtune runtime: the runtime's `tune run` recipe,
    changed by arguments (cluster only: the runtime's initializers bring model and dataset)."""

    supported_frameworks: ClassVar[tuple[str, ...]] = ("torchtune",)
    policy: ClassVar[str] = "torch"


@dataclass(kw_only=True)
class RuntimeFrameworkTrainer(BaseTrainer):
    """A function on a runtime with no known ML policy: one process per node, no set-up."""

    policy: ClassVar[str] = "plain"
    runtime_framework: str = "unknown"

    def __post_init__(self) -> None:
        object.__setattr__(self, "supported_frameworks", (self.runtime_framework,))
        super().__post_init__()


def _kind(obj: Any) -> str:
    return type(obj).__name__


def _check_number(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValidationError(f"{name} must be a whole number, got {value!r}.")


def to_trainer(trainer: Any, runtime: KFRuntime, backend: str) -> BaseTrainer:
    """kf-jupyter's framework trainer for an SDK trainer on this runtime (by its ML policy).

    torch -> TorchTrainer (torchrun; processes per node from resources, as the Trainer does),
    mpi (deepspeed, mlx) -> MPITrainer, jax -> JAXTrainer, xgboost -> XGBoostTrainer with
    `setup_collective=False` (SDK code starts its own tracker), anything else -> one process
    per node. A `CustomTrainerContainer` becomes the framework trainer with an image and no
    function (cluster only). `None`: the runtime's own defaults.
    """
    kind = _kind(trainer)
    if kind == "BuiltinTrainer":
        return _builtin_trainer(trainer, runtime, backend)
    common: dict[str, Any] = {}
    if trainer is not None:
        _check_number("num_nodes", getattr(trainer, "num_nodes", None))
        common = {
            "num_nodes": getattr(trainer, "num_nodes", None),
            "resources_per_node": getattr(trainer, "resources_per_node", None),
            "image": getattr(trainer, "image", None),
        }
    if kind == "CustomTrainer":
        common.update(func=trainer.func, func_args=trainer.func_args)
        if not callable(trainer.func):
            raise ValidationError(
                f"CustomTrainer func must be a Python function, got {type(trainer.func).__name__}."
            )
    elif kind == "CustomTrainerContainer":
        if backend == "local":
            raise ValidationError(
                f"CustomTrainerContainer runs the image {trainer.image!r} as the trainer, and the "
                "local backend cannot run container images: it starts your function as local "
                "processes with the kernel's Python. Wrap the training code in a function and "
                "pass CustomTrainer(func=...) to run it locally, or submit this trainer to a "
                "cluster with TrainerClient(backend_config=KubernetesBackendConfig(...))."
            )
    elif trainer is not None:
        raise ValidationError(
            f"trainer must be a CustomTrainer, a CustomTrainerContainer or a BuiltinTrainer, got "
            f"{kind}."
        )
    if backend == "local" and common.get("resources_per_node"):
        keys = {str(k).lower() for k in common["resources_per_node"]}
        if keys & {"tpu", "google.com/tpu"}:
            raise ValidationError(
                "resources_per_node asks for TPUs (google.com/tpu), and the local backend runs "
                "your function as processes on this machine, which has no TPU. Submit the job "
                "to a cluster with TPU nodes with TrainerClient(KubernetesBackendConfig(...)) "
                "(get_tpu_num_nodes(...) gives num_nodes for a slice), or drop the TPU request "
                "to try the code locally on CPU."
            )
    policy = runtime.ml_policy
    if policy == "torch":
        return TorchTrainer(**common)
    if policy == "mpi":
        return MPITrainer(**common)
    if policy == "jax":
        return JAXTrainer(**common)
    if policy == "xgboost":
        return XGBoostTrainer(setup_collective=False, **common)
    return RuntimeFrameworkTrainer(runtime_framework=runtime.framework, **common)


def _builtin_trainer(trainer: Any, runtime: KFRuntime, backend: str) -> BaseTrainer:
    config = getattr(trainer, "config", None)
    if _kind(config) != "TorchTuneConfig":
        raise ValidationError(
            f"The BuiltinTrainer config is invalid: {config!r}. Pass "
            "BuiltinTrainer(config=TorchTuneConfig(...))."
        )
    if runtime.framework != "torchtune":
        raise ValidationError(
            f"BuiltinTrainer can't be used with runtime {runtime.name!r} (framework "
            f"{runtime.framework!r}): it configures the fine-tuning recipe of a torchtune runtime "
            "such as 'torchtune-llama3.2-1b' (client.list_runtimes() lists them)."
        )
    if backend == "local":
        raise ValidationError(
            f"BuiltinTrainer fine-tunes the pre-trained model of runtime {runtime.name!r} with "
            "the torchtune recipe in the runtime's trainer image; on a cluster the runtime's "
            "initializers first download that model and the dataset into /workspace. The local "
            "backend runs no images or initializers, so there is no model here to fine-tune. "
            "Submit it to a cluster with TrainerClient(KubernetesBackendConfig(...)), or, to "
            "fine-tune locally, write the training loop as a function and run it with "
            "CustomTrainer(func=...) on 'torch-distributed' (or use TransformersTrainer)."
        )
    _check_number("num_nodes", getattr(config, "num_nodes", None))
    return TorchTuneTrainer(
        num_nodes=config.num_nodes or None,
        resources_per_node=config.resources_per_node or None,
    )


def builtin_options(trainer: Any, runtime: KFRuntime, initializer: Any = None) -> list[Any]:
    """The trainer's command and args for a `BuiltinTrainer`, as the SDK writes them.

    The command is the runtime's entrypoint (`tune run`); the args override the recipe's
    config (`dtype=bf16`, `model.lora_rank=8`, `dataset.data_dir=/workspace/dataset/...`).
    """
    from ..options import TrainerArgs, TrainerCommand
    from .backends.kubernetes.utils import get_args_using_torchtune_config
    from .constants.constants import TORCH_TUNE_COMMAND

    opts: list[Any] = [TrainerCommand(list(TORCH_TUNE_COMMAND))]
    args = get_args_using_torchtune_config(trainer.config, initializer)
    opts.append(TrainerArgs(args))
    return opts


def runtime_config(trainer: Any) -> RuntimeConfig | None:
    """Packages, index URLs and env of an SDK trainer as kf-jupyter's RuntimeConfig."""
    if trainer is None or _kind(trainer) == "BuiltinTrainer":
        return None
    packages = getattr(trainer, "packages_to_install", None)
    urls = getattr(trainer, "pip_index_urls", None)
    env = getattr(trainer, "env", None)
    if env is not None and not isinstance(env, Mapping):
        raise ValidationError("env must be a dict of environment variable names to strings.")
    return RuntimeConfig(
        packages_to_install=list(packages) if packages else None,
        pip_index_urls=list(urls) if urls else None,
        env=dict(env) if env else None,
    )
