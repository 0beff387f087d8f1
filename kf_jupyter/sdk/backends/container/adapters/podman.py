"""The SDK's Podman adapter (`...container.adapters.podman`): refused, kf-jupyter runs no containers."""

from __future__ import annotations

from .._refuse import no_containers
from .base import BaseContainerClientAdapter


class PodmanClientAdapter(BaseContainerClientAdapter):
    """A Podman engine client in the SDK; here constructing one says why there is none."""

    def __new__(cls, host: str | None = None) -> PodmanClientAdapter:
        raise no_containers("PodmanClientAdapter")


__all__ = ["BaseContainerClientAdapter", "PodmanClientAdapter"]
