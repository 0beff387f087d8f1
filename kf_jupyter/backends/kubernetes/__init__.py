"""Kubernetes backend (Kubeflow Trainer TrainJobs); the `kubernetes` client is imported only
when a `KubernetesBackend` is created (`backend` assembles it from one module per concern)."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """`kf_jupyter.backends.kubernetes.KubernetesBackend`, imported on first use."""
    if name == "KubernetesBackend":
        from .backend import KubernetesBackend

        return KubernetesBackend
    raise AttributeError(name)
