"""The Kubeflow SDK's options for every backend (`kubeflow.trainer.options.common`): `Name`."""

from __future__ import annotations

from ...options import Name
from ..backends.base import RuntimeBackend
from ..types.types import BuiltinTrainer, CustomTrainer, CustomTrainerContainer

__all__ = ["BuiltinTrainer", "CustomTrainer", "CustomTrainerContainer", "Name", "RuntimeBackend"]
