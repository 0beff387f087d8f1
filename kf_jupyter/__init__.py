"""kf-jupyter: Kubeflow Trainer for notebooks.

Write a training function (or a `%%torchtrain` cell), run it as a distributed job on local
processes, or on a Kubernetes cluster running Kubeflow Trainer by changing one flag.
Heavy modules (the client's backends, kubernetes, ipywidgets) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._labext import _jupyter_labextension_paths as _jupyter_labextension_paths
from .build import build_launch_plan, build_trainjob
from .config import RuntimeConfig, SecretRef
from .errors import (
    AmbiguousRuntimeError,
    BackendError,
    ClusterUnreachableError,
    ForbiddenError,
    JobFailedError,
    JobNotFoundError,
    JobRejectedError,
    JobStateError,
    KFJupyterError,
    NamespaceNotFoundError,
    OptionError,
    PackageInstallError,
    RuntimeMismatchError,
    RuntimeNotFoundError,
    TrainerNotInstalledError,
    ValidationError,
    WaitTimeoutError,
)
from .report import parse_report, report
from .runtimes import Runtime, resolve_runtime, select_runtime
from .trainers import BaseTrainer, JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer
from .types import Event, LogRecord, Step, TrainerStatus, TrainJob
from .workspace import Workspace

if TYPE_CHECKING:
    from .backends.kubernetes.config import KubernetesBackendConfig
    from .backends.local.config import LocalBackendConfig
    from .client import TrainerClient
    from .tier2 import ConfigTrainer
    from .transformers_trainer import TransformersTrainer
    from .widgets.forms import PodOverridesForm, RuntimeConfigForm
    from .widgets.monitor import JobMonitor

__version__ = "0.1.0"

_LAZY = {
    "TrainerClient": ("kf_jupyter.client", "TrainerClient"),
    "LocalBackendConfig": ("kf_jupyter.backends.local.config", "LocalBackendConfig"),
    "KubernetesBackendConfig": ("kf_jupyter.backends.kubernetes.config", "KubernetesBackendConfig"),
    "JobMonitor": ("kf_jupyter.widgets.monitor", "JobMonitor"),
    "ConfigTrainer": ("kf_jupyter.tier2", "ConfigTrainer"),
    "TransformersTrainer": ("kf_jupyter.transformers_trainer", "TransformersTrainer"),
    "RuntimeConfigForm": ("kf_jupyter.widgets.forms", "RuntimeConfigForm"),
    "PodOverridesForm": ("kf_jupyter.widgets.forms", "PodOverridesForm"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kf_jupyter' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext kf_jupyter`: register the training cell magics and line magics."""
    from .magics import load_ipython_extension as _load

    _load(ipython)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "kf_jupyter.server"}]


__all__ = [
    "AmbiguousRuntimeError",
    "BackendError",
    "BaseTrainer",
    "ClusterUnreachableError",
    "ConfigTrainer",
    "Event",
    "ForbiddenError",
    "JAXTrainer",
    "JobFailedError",
    "JobMonitor",
    "JobNotFoundError",
    "JobRejectedError",
    "JobStateError",
    "KFJupyterError",
    "KubernetesBackendConfig",
    "LocalBackendConfig",
    "LogRecord",
    "MPITrainer",
    "NamespaceNotFoundError",
    "OptionError",
    "PackageInstallError",
    "PodOverridesForm",
    "Runtime",
    "RuntimeConfig",
    "RuntimeConfigForm",
    "RuntimeMismatchError",
    "RuntimeNotFoundError",
    "SecretRef",
    "Step",
    "TorchTrainer",
    "TrainJob",
    "TrainerClient",
    "TrainerNotInstalledError",
    "TrainerStatus",
    "TransformersTrainer",
    "ValidationError",
    "WaitTimeoutError",
    "Workspace",
    "XGBoostTrainer",
    "build_launch_plan",
    "build_trainjob",
    "parse_report",
    "report",
    "resolve_runtime",
    "select_runtime",
]
