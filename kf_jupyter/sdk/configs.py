"""The SDK's backend configs, and kf-jupyter's config for each (no I/O)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..backends.kubernetes.config import KubernetesBackendConfig
from ..backends.local.config import LocalBackendConfig
from ..errors import ValidationError

log = logging.getLogger("kf_jupyter.sdk")


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
