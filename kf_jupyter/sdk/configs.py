"""kf-jupyter's backend config for each of the SDK's (no I/O)."""

from __future__ import annotations

import logging
from typing import Any

from ..backends.kubernetes.config import KubernetesBackendConfig
from ..backends.local.config import LocalBackendConfig
from ..errors import ValidationError
from .backends.container.types import ContainerBackendConfig
from .backends.localprocess.types import LocalProcessBackendConfig

log = logging.getLogger("kf_jupyter.sdk")


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


__all__ = ["ContainerBackendConfig", "LocalProcessBackendConfig", "backend_config"]
