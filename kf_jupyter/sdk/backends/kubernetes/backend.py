"""The SDK's `KubernetesBackend` (`kubeflow.trainer.backends.kubernetes.backend`).

Submits TrainJobs to a cluster through kf-jupyter's Kubernetes backend: jobs are watched rather
than polled, logs come from every pod of a step, and the function runs from a quoted command.
"""

from __future__ import annotations

from typing import Any

from ....backends.kubernetes.config import KubernetesBackendConfig
from ...client import KFBackend
from ...configs import backend_config
from ..base import RuntimeBackend


class KubernetesBackend(KFBackend):
    """The Kubeflow Trainer on a cluster (`KubernetesBackendConfig`: kubeconfig, namespace)."""

    def __init__(self, cfg: Any) -> None:
        super().__init__(backend_config(cfg if cfg is not None else KubernetesBackendConfig()))
        if self.backend_name != "kubernetes":
            raise ValueError(
                f"KubernetesBackend takes a KubernetesBackendConfig, got {type(cfg).__name__}."
            )

    def verify_backend(self) -> None:
        """Check that the cluster answers and has the Trainer's runtimes API (raises if not)."""
        self.client.list_runtimes()


__all__ = ["KubernetesBackend", "KubernetesBackendConfig", "RuntimeBackend"]
