"""The jax policy: one process per node; JAX_NUM_PROCESSES / JAX_PROCESS_ID / coordinator."""

from __future__ import annotations

from typing import Any, ClassVar

from .base import JobShape, Policy


class JaxPolicy(Policy):
    """The runner calls jax.distributed.initialize with these (JAX reads only the address)."""

    name = "jax"
    setup: ClassVar[str] = "jax"
    reserved_env = frozenset({"JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS"})

    def launcher(self, trainer: Any) -> list[str]:
        return ["exec", "python3"]

    def runner_setup(self, trainer: Any) -> str:
        return self.setup if getattr(trainer, "initialize_distributed", True) else "none"

    def node_env(self, shape: JobShape, index: int, master: str, port: int) -> dict[str, str]:
        return {
            "JAX_NUM_PROCESSES": str(shape.num_nodes),
            "JAX_PROCESS_ID": str(index),
            "JAX_COORDINATOR_ADDRESS": f"{master}:{port}",
        }
