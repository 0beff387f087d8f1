"""The one paragraph the container engine pieces answer with (kf-jupyter runs no containers)."""

from __future__ import annotations


def no_containers(what: str) -> ValueError:
    """The error for SDK code that reaches for a container engine directly."""
    return ValueError(
        f"{what} talks to a Docker or Podman engine, and kf-jupyter starts no containers: with "
        "ContainerBackendConfig (or LocalProcessBackendConfig) it runs CustomTrainer functions "
        "as local processes with the kernel's Python. Use TrainerClient(ContainerBackendConfig()) "
        "and CustomTrainer(func=...) to run locally, or submit an image "
        "(CustomTrainerContainer) to a cluster with TrainerClient(KubernetesBackendConfig(...))."
    )
