"""An SDK trainer (`CustomTrainer`, `CustomTrainerContainer`, or the SDK's own objects) as
kf-jupyter's framework trainer and RuntimeConfig (pure functions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..config import RuntimeConfig
from ..errors import ValidationError
from ..runtimes import Runtime as KFRuntime
from ..trainers import BaseTrainer, JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer


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
            f"trainer must be a CustomTrainer or a CustomTrainerContainer, got {kind}. "
            "BuiltinTrainer (torchtune fine-tuning) is not supported by kf_jupyter.sdk; use the "
            "Kubeflow SDK itself for it."
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


def runtime_config(trainer: Any) -> RuntimeConfig | None:
    """Packages, index URLs and env of an SDK trainer as kf-jupyter's RuntimeConfig."""
    if trainer is None:
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
