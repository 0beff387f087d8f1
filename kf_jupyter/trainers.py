"""Framework-aware trainers: a function plus how many nodes/processes run it, per framework."""

from __future__ import annotations

import json
import os
from abc import ABC
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import ValidationError
from .script import Script, validate_script, validate_script_args
from .validation import normalize_resources, validate_image, validate_positive


@dataclass(kw_only=True)
class BaseTrainer(ABC):  # noqa: B024  (abstract by intent; no abstract method)
    """What every trainer has: the function, its keyword arguments, nodes, resources, image.

    Instead of `func`, `script` runs a whole program as `__main__` (a file's path, read when the
    job is submitted, or a `Script`); `script_args` is its `sys.argv[1:]` (with `func` too).

    Subclasses set `supported_frameworks` (runtime framework labels, in preference order) and
    `policy` (the Trainer ML policy that runs them: torch, mpi, jax, xgboost or plain).
    """

    supported_frameworks: ClassVar[tuple[str, ...]] = ()
    policy: ClassVar[str] = "plain"

    func: Callable[..., Any] | None = None
    func_args: dict[str, Any] | None = None
    num_nodes: int | None = None
    resources_per_node: dict[str, Any] | None = None
    image: str | None = None
    script: str | os.PathLike[str] | Script | None = None
    script_args: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if type(self) is BaseTrainer:
            raise TypeError("BaseTrainer is abstract; use TorchTrainer, MPITrainer, ...")
        if self.script is not None:
            if self.func is not None:
                raise ValidationError(
                    "Give either func (a function) or script (a Python file run as __main__), "
                    "not both."
                )
            validate_script(self.script)
        validate_script_args(self.script_args)
        if self.func is not None and not callable(self.func):
            raise ValidationError(
                f"func must be a Python function, got {type(self.func).__name__}. Pass the "
                "function itself (train, not train())."
            )
        if self.num_nodes is not None:
            validate_positive("num_nodes", self.num_nodes)
        if self.image is not None:
            validate_image(self.image)
        normalize_resources(self.resources_per_node)
        self.validate_func_args()

    def validate_func_args(self) -> None:
        """func_args must be a dict of JSON-serialisable values with identifier keys."""
        if self.func_args is None:
            return
        if not isinstance(self.func_args, Mapping):
            raise ValidationError(
                "func_args must be a dict of keyword arguments, for example "
                "{'lr': 0.01, 'epochs': 3}; they are passed to the function with **."
            )
        for key, value in self.func_args.items():
            if not isinstance(key, str) or not key.isidentifier():
                raise ValidationError(
                    f"func_args key {key!r} is not a valid keyword argument name."
                )
            try:
                json.dumps(value, allow_nan=True)
            except (TypeError, ValueError) as exc:
                raise ValidationError(
                    f"func_args[{key!r}] is a {type(value).__name__}, which cannot be sent to "
                    f"the job as JSON ({exc}). Pass plain numbers, strings, lists and dicts, and "
                    "build richer objects inside the function."
                ) from None

    @property
    def framework(self) -> str:
        """The preferred framework label."""
        return self.supported_frameworks[0] if self.supported_frameworks else "plain"

    @property
    def procs_per_node(self) -> int | None:
        """Processes per node, where the framework has the notion."""
        return None

    def resources(self) -> dict[str, str]:
        """resources_per_node as Kubernetes resource names and quantities."""
        return normalize_resources(self.resources_per_node)


@dataclass(kw_only=True)
class TorchTrainer(BaseTrainer):
    """PyTorch distributed: `torchrun` per node, `num_proc_per_node` workers each.

    `max_restarts` and `monitor_interval` become `torchrun` flags in the generated command, so a
    cluster and a local run both honour them.
    """

    supported_frameworks: ClassVar[tuple[str, ...]] = ("torch",)
    policy: ClassVar[str] = "torch"

    num_proc_per_node: int | None = None
    max_restarts: int | None = None
    monitor_interval: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_proc_per_node is not None:
            validate_positive("num_proc_per_node", self.num_proc_per_node)
        if self.max_restarts is not None and (
            isinstance(self.max_restarts, bool)
            or not isinstance(self.max_restarts, int)
            or self.max_restarts < 0
        ):
            raise ValidationError(
                f"max_restarts must be a whole number ≥ 0, got {self.max_restarts!r}."
            )
        if self.monitor_interval is not None and (
            isinstance(self.monitor_interval, bool)
            or not isinstance(self.monitor_interval, int | float)
            or not self.monitor_interval > 0
        ):
            raise ValidationError(
                f"monitor_interval must be a number of seconds > 0, got {self.monitor_interval!r}."
            )

    @property
    def procs_per_node(self) -> int | None:
        return self.num_proc_per_node


@dataclass(kw_only=True)
class MPITrainer(BaseTrainer):
    """MPI (OpenMPI): `mpirun` over a hostfile of `num_nodes` × `num_proc_per_node` slots."""

    supported_frameworks: ClassVar[tuple[str, ...]] = ("mpi", "deepspeed", "mlx")
    policy: ClassVar[str] = "mpi"

    num_proc_per_node: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_proc_per_node is not None:
            validate_positive("num_proc_per_node", self.num_proc_per_node)

    @property
    def procs_per_node(self) -> int | None:
        return self.num_proc_per_node


@dataclass(kw_only=True)
class JAXTrainer(BaseTrainer):
    """JAX multi-process: one process per node; `jax.distributed.initialize` is done for you.

    Code that calls `jax.distributed.initialize` itself is detected: the runner then does not
    call it first, and fills in the arguments the call leaves out from the Trainer's `JAX_*`
    variables. Set `initialize_distributed=False` to turn the built-in step off entirely.
    """

    supported_frameworks: ClassVar[tuple[str, ...]] = ("jax",)
    policy: ClassVar[str] = "jax"

    initialize_distributed: bool = True


@dataclass(kw_only=True)
class XGBoostTrainer(BaseTrainer):
    """XGBoost distributed: rank 0 runs the collective tracker, every rank joins the communicator.

    Code that starts its own `RabitTracker` / `collective.CommunicatorContext` (Kubeflow's own
    example does) is detected and left to do so; set `setup_collective=False` when the set-up
    happens where the scan cannot see it (a helper module).
    """

    supported_frameworks: ClassVar[tuple[str, ...]] = ("xgboost",)
    policy: ClassVar[str] = "xgboost"

    setup_collective: bool = True


TRAINER_CLASSES: dict[str, type[BaseTrainer]] = {
    "torch": TorchTrainer,
    "mpi": MPITrainer,
    "jax": JAXTrainer,
    "xgboost": XGBoostTrainer,
}

__all__ = [
    "TRAINER_CLASSES",
    "BaseTrainer",
    "JAXTrainer",
    "MPITrainer",
    "TorchTrainer",
    "XGBoostTrainer",
]
