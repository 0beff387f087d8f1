"""Between the SDK's shapes and kf-jupyter's: configs and trainers in, runtimes and jobs out.

Pure functions (no I/O). Objects of the real `kubeflow` package are read by their fields, so
SDK objects and `kf_jupyter.sdk` objects both work.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..backends.kubernetes.config import KubernetesBackendConfig
from ..backends.local.config import LocalBackendConfig
from ..config import RuntimeConfig
from ..constants import RUNTIME_KIND
from ..errors import ValidationError
from ..runtimes import Runtime as KFRuntime
from ..trainers import BaseTrainer, JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer
from ..types import COMPLETE, CREATED, FAILED, RUNNING
from ..types import Event as KFEvent
from ..types import TrainJob as KFTrainJob
from .types import (
    UNKNOWN,
    Event,
    Runtime,
    RuntimeKind,
    RuntimeTrainer,
    Step,
    TrainerType,
    TrainJob,
)

log = logging.getLogger("kf_jupyter.sdk")

LOCAL_IMAGE = "local"


# -- backend configs ---------------------------------------------------------------------------


@dataclass
class LocalProcessBackendConfig:
    """The SDK's local-process backend config; kf-jupyter's local backend runs the job.

    `cleanup_venv` is accepted for compatibility: kf-jupyter builds no per-job venv (packages
    go into a cached layered environment, see docs/local-backend.md).
    """

    cleanup_venv: bool = True


@dataclass
class ContainerBackendConfig:
    """The SDK's Docker/Podman backend config; kf-jupyter runs the job as local processes.

    The fields are accepted for compatibility and not used: no container is started.
    """

    pull_policy: str = "IfNotPresent"
    auto_remove: bool = True
    container_host: str | None = None
    container_runtime: str | None = None


_K8S_FIELDS = ("namespace", "config_file", "context", "client_configuration")


def backend_config(config: Any) -> LocalBackendConfig | KubernetesBackendConfig:
    """kf-jupyter's backend config for an SDK-style one (None: the local backend)."""
    if config is None:
        return LocalBackendConfig()
    if isinstance(config, LocalBackendConfig | KubernetesBackendConfig):
        return config
    kind = type(config).__name__
    if kind == "KubernetesBackendConfig":
        return KubernetesBackendConfig(**{f: getattr(config, f, None) for f in _K8S_FIELDS})
    if kind == "LocalProcessBackendConfig":
        return LocalBackendConfig()
    if kind == "ContainerBackendConfig":
        log.info(
            "ContainerBackendConfig: kf-jupyter runs the job as local processes, not containers"
        )
        return LocalBackendConfig()
    raise ValidationError(
        f"backend_config must be KubernetesBackendConfig, LocalProcessBackendConfig, "
        f"ContainerBackendConfig (from kf_jupyter.sdk or kubeflow.trainer), kf-jupyter's "
        f"LocalBackendConfig, or None for the local backend; got {kind}."
    )


# -- runtimes out -------------------------------------------------------------------------------

_COMMANDS: dict[str, tuple[str, ...]] = {
    "torch": ("torchrun",),
    "mpi": ("mpirun", "--hostfile", "/etc/mpi/hostfile"),
}


def to_sdk_runtime(rt: KFRuntime, backend: str) -> Runtime:
    """The SDK view of a runtime (kf-jupyter's own stays in `.source`)."""
    builtin = rt.framework == "torchtune"
    trainer = RuntimeTrainer(
        trainer_type=TrainerType.BUILTIN_TRAINER if builtin else TrainerType.CUSTOM_TRAINER,
        framework=rt.framework,
        image=rt.image or (LOCAL_IMAGE if backend == "local" else ""),
        num_nodes=rt.num_nodes or 1,
        device_count=str(rt.num_proc_per_node * (rt.num_nodes or 1))
        if rt.ml_policy == "mpi" and rt.num_proc_per_node
        else UNKNOWN,
    )
    if builtin:
        trainer.set_command(("tune", "run"))
    else:
        trainer.set_command(_COMMANDS.get(rt.ml_policy, ("python3",)))
    namespaced = rt.kind == RUNTIME_KIND
    kind = RuntimeKind.TRAINING_RUNTIME if namespaced else RuntimeKind.CLUSTER_TRAINING_RUNTIME
    return Runtime(name=rt.name, trainer=trainer, kind=kind, source=rt)


def placeholder_runtime(name: str, framework: str, backend: str) -> Runtime:
    """The SDK view of a job's runtime that no longer exists (deleted since)."""
    return to_sdk_runtime(KFRuntime(name=name, framework=framework or "unknown"), backend)


# -- jobs out -----------------------------------------------------------------------------------

_LOCAL_PHASE = {CREATED: "Pending", RUNNING: "Running", COMPLETE: "Succeeded", FAILED: "Failed"}


def sdk_step_name(source: str, policy: str) -> str:
    """The SDK's name of a step: MPI jobs count the launcher as `node-0` and shift the nodes."""
    if policy != "mpi":
        return source
    if source == "launcher":
        return "node-0"
    if source.startswith("node-") and source[5:].isdigit():
        return f"node-{int(source[5:]) + 1}"
    return source


def to_sdk_job(job: KFTrainJob, runtime: Runtime) -> TrainJob:
    """The SDK view of a job: steps named and phased as the SDK names them on a cluster."""
    policy = getattr(runtime.source, "ml_policy", "") or ""
    count = str(job.num_proc_per_node) if job.num_proc_per_node else UNKNOWN
    steps = []
    for s in job.steps:
        status = _LOCAL_PHASE.get(s.status, s.status) if job.backend == "local" else s.status
        steps.append(
            Step(
                name=sdk_step_name(s.name, policy),
                status=status,
                pod_name=getattr(s, "pod_name", None) or s.name,
                device=s.device or UNKNOWN,
                device_count=getattr(s, "device_count", None) or count,
            )
        )
    steps.sort(key=lambda st: _step_order(st.name))
    return TrainJob(
        name=job.name,
        runtime=runtime,
        steps=steps,
        num_nodes=job.num_nodes,
        creation_timestamp=job.creation_time,
        status=job.status,
        reason=job.reason,
        message=job.message,
        trainer_status=getattr(job, "trainer_status", None),
    )


def _step_order(name: str) -> tuple[int, int, str]:
    if name.startswith("node-") and name[5:].isdigit():
        return (1, int(name[5:]), name)
    return (0, 0, name)


def to_sdk_event(ev: KFEvent, job: str) -> Event:
    """The SDK view of an event (`Kind/name` split; locally the TrainJob or a Process)."""
    kind, sep, name = (ev.involved_object or "").partition("/")
    if not sep:  # a local event: about the job, or one of its processes (node-0, launcher)
        name = ev.involved_object or job
        kind = "TrainJob" if name == job else "Process"
    return Event(
        involved_object_kind=kind,
        involved_object_name=name,
        message=ev.message,
        reason=ev.reason,
        event_time=ev.time,
    )


# -- trainers in --------------------------------------------------------------------------------


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


# -- initializers -------------------------------------------------------------------------------


def _initializer_env(init: Any, skip: set[str]) -> list[dict[str, str]]:
    env = []
    for f in dataclasses.fields(init):
        if f.name in skip:
            continue
        value = getattr(init, f.name)
        if value is None:
            continue
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        env.append({"name": f.name.upper(), "value": str(value)})
    return env


def initializer_spec(part: Any) -> dict[str, Any]:
    """One `spec.initializer.dataset|model` entry, as the SDK writes it."""
    if not dataclasses.is_dataclass(part) or not isinstance(
        getattr(part, "storage_uri", None), str
    ):
        raise ValidationError(
            f"An initializer dataset/model must be a HuggingFace or S3 initializer with a "
            f"storage_uri, got {_kind(part)}."
        )
    if _kind(part) == "DataCacheInitializer":
        env = [
            {"name": "CLUSTER_SIZE", "value": str(part.num_data_nodes + 1)},
            {"name": "METADATA_LOC", "value": str(part.metadata_loc)},
            *_initializer_env(part, {"storage_uri", "metadata_loc", "num_data_nodes"}),
        ]
    else:
        env = _initializer_env(part, {"storage_uri"})
    out: dict[str, Any] = {"storageUri": part.storage_uri}
    if env:
        out["env"] = env
    return out


@dataclass
class InitializerOption:
    """Writes `spec.initializer` (datasets and models are downloaded on a cluster only)."""

    initializer: Any

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        name = str(getattr(backend, "name", backend))
        if name == "local":
            raise ValidationError(
                "initializer= downloads a dataset or model into /workspace on a cluster before "
                "training; the local backend does not run initializers. Download the data inside "
                "your function (or beforehand into a local folder) for local runs, and pass the "
                "initializer only when submitting to a cluster."
            )
        spec = job_spec.setdefault("spec", {})
        init: dict[str, Any] = {}
        if getattr(self.initializer, "dataset", None) is not None:
            init["dataset"] = initializer_spec(self.initializer.dataset)
        if getattr(self.initializer, "model", None) is not None:
            init["model"] = initializer_spec(self.initializer.model)
        if init:
            spec["initializer"] = init


__all__ = [
    "ContainerBackendConfig",
    "InitializerOption",
    "LocalProcessBackendConfig",
    "RuntimeFrameworkTrainer",
    "backend_config",
    "placeholder_runtime",
    "runtime_config",
    "to_sdk_event",
    "to_sdk_job",
    "to_sdk_runtime",
    "to_trainer",
]
