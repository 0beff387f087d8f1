"""Configuration of the Kubernetes backend (does not import the kubernetes client)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class KubernetesBackendConfig:
    """Submit TrainJobs to a cluster running Kubeflow Trainer.

    namespace: default from the kubeconfig context, the service-account file, else `default`.
    config_file / context: kubeconfig to use (default: $KUBECONFIG / ~/.kube/config, or the
    in-cluster service account). client_configuration: a ready `kubernetes.client.Configuration`.
    """

    namespace: str | None = None
    config_file: str | None = None
    context: str | None = None
    client_configuration: Any = None
    #: (connect, read) seconds of ordinary API requests (not watches or log streams); None:
    #: (10, 120). The Jupyter server extension sets a short one for requests made for the UI.
    request_timeout: tuple[float, float] | None = None
