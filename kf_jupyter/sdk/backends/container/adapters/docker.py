"""The SDK's Docker adapter (`...container.adapters.docker`): refused, kf-jupyter runs no containers."""

from __future__ import annotations

from .._refuse import no_containers
from .base import BaseContainerClientAdapter


class DockerClientAdapter(BaseContainerClientAdapter):
    """A Docker engine client in the SDK; here constructing one says why there is none."""

    def __new__(cls, host: str | None = None) -> DockerClientAdapter:
        raise no_containers("DockerClientAdapter")


__all__ = ["BaseContainerClientAdapter", "DockerClientAdapter"]
