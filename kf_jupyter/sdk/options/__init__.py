"""The Kubeflow SDK 0.5.0's training options (`kubeflow.trainer.options`), for kf-jupyter.

`Name`, `Labels`, `Annotations`, `TrainerCommand`, `TrainerArgs` and `ActiveDeadlineSeconds` are
kf-jupyter's own options (they also work on the local backend, where the SDK refuses most of
them); `RuntimePatch` takes the SDK's typed patch tree (`TrainingRuntimeSpecPatch`, ...) or a
plain dict. `from_sdk_option` turns an option object of the real SDK into one of these, so
options built with `kubeflow.trainer.options` work too. As in the SDK, the options also live in
`.common` (Name) and `.kubernetes` (the rest).
"""

from __future__ import annotations

from .common import Name
from .kubernetes import (
    SDK_MANAGER,
    ActiveDeadlineSeconds,
    Annotations,
    ContainerPatch,
    JobSetSpecPatch,
    JobSetTemplatePatch,
    JobSpecPatch,
    JobTemplatePatch,
    Labels,
    PodSpecPatch,
    PodTemplatePatch,
    ReplicatedJobPatch,
    RuntimePatch,
    TrainerArgs,
    TrainerCommand,
    TrainingRuntimeSpecPatch,
    from_sdk_option,
    is_sdk_object,
    patch_to_dict,
)

__all__ = [
    "SDK_MANAGER",
    "ActiveDeadlineSeconds",
    "Annotations",
    "ContainerPatch",
    "JobSetSpecPatch",
    "JobSetTemplatePatch",
    "JobSpecPatch",
    "JobTemplatePatch",
    "Labels",
    "Name",
    "PodSpecPatch",
    "PodTemplatePatch",
    "ReplicatedJobPatch",
    "RuntimePatch",
    "TrainerArgs",
    "TrainerCommand",
    "TrainingRuntimeSpecPatch",
    "from_sdk_option",
    "is_sdk_object",
    "patch_to_dict",
]
