"""The Kubeflow SDK 0.5.0's Kubernetes options (`kubeflow.trainer.options.kubernetes`).

`Name`, `Labels`, `Annotations`, `TrainerCommand`, `TrainerArgs` and `ActiveDeadlineSeconds` are
kf-jupyter's own options (they also work on the local backend, where the SDK refuses most of
them); `RuntimePatch` takes the SDK's typed patch tree (`TrainingRuntimeSpecPatch`, ...) or a
plain dict. `from_sdk_option` turns an option object of the real SDK into one of these, so
options built with `kubeflow.trainer.options` work too.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ... import options as _kf
from ...errors import OptionError
from ...options import ActiveDeadlineSeconds, Annotations, Labels, Name, TrainerArgs, TrainerCommand
from ..backends.base import RuntimeBackend
from ..types.types import BuiltinTrainer, CustomTrainer, CustomTrainerContainer

SDK_MANAGER = "trainer.kubeflow.org/kubeflow-sdk"


@dataclass
class ContainerPatch:
    """Changes to one container of the pods: env, volume mounts, security context."""

    name: str
    env: list[dict[str, Any]] | None = None
    volume_mounts: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise OptionError("ContainerPatch name must be the name of a container, e.g. 'node'.")
        for mount in self.volume_mounts or []:
            path = mount.get("mountPath") if isinstance(mount, dict) else None
            if not mount.get("name") or not isinstance(path, str) or not path.startswith("/"):
                raise OptionError(
                    f"ContainerPatch {self.name!r}: each volume mount needs a 'name' and an "
                    f"absolute 'mountPath', got {mount!r}."
                )


@dataclass
class PodSpecPatch:
    """The pod fields a runtime patch may set."""

    service_account_name: str | None = None
    volumes: list[dict[str, Any]] | None = None
    init_containers: list[ContainerPatch] | None = None
    containers: list[ContainerPatch] | None = None
    image_pull_secrets: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None
    node_selector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    scheduling_gates: list[dict[str, Any]] | None = None


@dataclass
class PodTemplatePatch:
    """Pod metadata (labels, annotations) and spec changes."""

    metadata: dict[str, Any] | None = None
    spec: PodSpecPatch | None = None


@dataclass
class JobSpecPatch:
    """Changes to a Job's spec (its pod template)."""

    template: PodTemplatePatch | None = None


@dataclass
class JobTemplatePatch:
    """Changes to a replicated job's Job template."""

    metadata: dict[str, Any] | None = None
    spec: JobSpecPatch | None = None


@dataclass
class ReplicatedJobPatch:
    """Changes to one replicated job of the JobSet (`node`, `launcher`, ...)."""

    name: str
    template: JobTemplatePatch | None = None


@dataclass
class JobSetSpecPatch:
    """Changes to the JobSet spec: per replicated job."""

    replicated_jobs: list[ReplicatedJobPatch] | None = None


@dataclass
class JobSetTemplatePatch:
    """Changes to the JobSet template: metadata and spec."""

    metadata: dict[str, Any] | None = None
    spec: JobSetSpecPatch | None = None


@dataclass
class TrainingRuntimeSpecPatch:
    """A runtime patch's `trainingRuntimeSpec`."""

    template: JobSetTemplatePatch | None = None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def patch_to_dict(obj: Any) -> Any:
    """A patch dataclass tree (ours or the SDK's) as API JSON: camelCase keys, no empty parts."""
    if isinstance(obj, list):
        return [patch_to_dict(x) for x in obj]
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return obj
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        value = patch_to_dict(getattr(obj, f.name))
        if value is None or value == [] or value == {}:
            continue
        out[_camel(f.name)] = value
    return out


@dataclass
class RuntimePatch(_kf.RuntimePatch):
    """A `spec.runtimePatches` entry under the SDK's manager (a typed patch tree or a dict).

    Applied on a cluster; skipped with a warning on the local backend (placement only).
    """

    training_runtime_spec: Any = None
    manager: str = field(default=SDK_MANAGER, init=False, repr=False)

    def __post_init__(self) -> None:
        spec = patch_to_dict(self.training_runtime_spec)
        if spec is None:
            spec = {}
        if not isinstance(spec, dict):
            raise OptionError(
                "RuntimePatch takes a TrainingRuntimeSpecPatch (or its dict form), got "
                f"{type(self.training_runtime_spec).__name__}."
            )
        self.training_runtime_spec = spec


_SIMPLE = {
    "Name": (Name, "name"),
    "Labels": (Labels, "labels"),
    "Annotations": (Annotations, "annotations"),
    "TrainerCommand": (TrainerCommand, "command"),
    "TrainerArgs": (TrainerArgs, "args"),
    "ActiveDeadlineSeconds": (ActiveDeadlineSeconds, "seconds"),
}


def is_sdk_object(obj: Any) -> bool:
    """The object comes from the real Kubeflow SDK package (`kubeflow.*`)."""
    return type(obj).__module__.split(".")[0] == "kubeflow"


def from_sdk_option(option: Any) -> Any:
    """The kf-jupyter option for an option of the real SDK; any other option unchanged.

    The SDK's own options only accept the SDK's own backends, so they are rebuilt here.
    """
    if not is_sdk_object(option):
        return option
    kind = type(option).__name__
    if kind in _SIMPLE:
        cls, attr = _SIMPLE[kind]
        return cls(getattr(option, attr))
    if kind == "RuntimePatch":
        patch = RuntimePatch(patch_to_dict(option.training_runtime_spec))
        patch.manager = str(getattr(option, "manager", SDK_MANAGER) or SDK_MANAGER)
        return patch
    raise OptionError(
        f"The Kubeflow SDK option {kind} has no kf-jupyter equivalent yet. Options that work: "
        f"{', '.join([*_SIMPLE, 'RuntimePatch'])} (from kf_jupyter.sdk.options), or any "
        "callable option(job_spec, trainer, backend)."
    )


__all__ = [
    "SDK_MANAGER",
    "ActiveDeadlineSeconds",
    "Annotations",
    "BuiltinTrainer",
    "ContainerPatch",
    "CustomTrainer",
    "CustomTrainerContainer",
    "JobSetSpecPatch",
    "JobSetTemplatePatch",
    "JobSpecPatch",
    "JobTemplatePatch",
    "Labels",
    "Name",
    "PodSpecPatch",
    "PodTemplatePatch",
    "ReplicatedJobPatch",
    "RuntimeBackend",
    "RuntimePatch",
    "TrainerArgs",
    "TrainerCommand",
    "TrainingRuntimeSpecPatch",
    "from_sdk_option",
    "is_sdk_object",
    "patch_to_dict",
]
