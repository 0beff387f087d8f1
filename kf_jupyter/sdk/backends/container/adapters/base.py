"""The SDK's container engine protocol (`...container.adapters.base`); kf-jupyter has none."""

from __future__ import annotations

import abc
from collections.abc import Iterator


class BaseContainerClientAdapter(abc.ABC):
    """What a Docker/Podman adapter does for the SDK's container backend (not used here)."""

    @abc.abstractmethod
    def ping(self) -> None:
        """Check the engine answers."""

    @abc.abstractmethod
    def create_network(self, name: str, labels: dict[str, str]) -> str:
        """Create a network; return its id."""

    @abc.abstractmethod
    def delete_network(self, network_id: str) -> None:
        """Delete a network."""

    @abc.abstractmethod
    def create_and_start_container(
        self,
        image: str,
        command: list[str],
        name: str,
        network_id: str,
        environment: dict[str, str],
        labels: dict[str, str],
        volumes: dict[str, dict[str, str]],
        working_dir: str,
    ) -> str:
        """Start a container; return its id."""

    @abc.abstractmethod
    def get_container(self, container_id: str) -> object:
        """The engine's container object."""

    @abc.abstractmethod
    def container_logs(self, container_id: str, follow: bool) -> Iterator[str]:
        """The container's output."""

    @abc.abstractmethod
    def stop_container(self, container_id: str, timeout: int = 10) -> None:
        """Stop a container."""

    @abc.abstractmethod
    def remove_container(self, container_id: str, force: bool = True) -> None:
        """Remove a container."""

    @abc.abstractmethod
    def pull_image(self, image: str) -> None:
        """Pull an image."""

    @abc.abstractmethod
    def image_exists(self, image: str) -> bool:
        """The image is present locally."""

    @abc.abstractmethod
    def run_oneoff_container(self, image: str, command: list[str]) -> str:
        """Run a command in a throw-away container; return its output."""

    @abc.abstractmethod
    def container_status(self, container_id: str) -> tuple[str, int | None]:
        """(status, exit code)."""

    def get_container_ip(self, container_id: str, network_id: str) -> str | None:
        """The container's address on a network."""
        return None

    def list_containers(self, filters: dict[str, list[str]] | None = None) -> list[dict]:
        """The containers matching `filters`."""
        return []

    def get_network(self, network_id: str) -> dict | None:
        """A network's description."""
        return None

    def wait_for_container(self, container_id: str, timeout: int | None = None) -> int:
        """Wait for the container to exit; return its exit code."""
        raise NotImplementedError
