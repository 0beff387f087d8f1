"""The torch policy: `torchrun` per node, configured by the PET_* variables."""

from __future__ import annotations

from typing import Any

from .base import JobShape, Policy


class TorchPolicy(Policy):
    """torchrun reads PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR/PORT."""

    name = "torch"
    reserved_env = frozenset(
        {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
    )

    def launcher(self, trainer: Any) -> list[str]:
        words = ["exec", "torchrun"]
        if getattr(trainer, "max_restarts", None) is not None:
            words += ["--max-restarts", str(int(trainer.max_restarts))]
        if getattr(trainer, "monitor_interval", None) is not None:
            words += ["--monitor-interval", repr(float(trainer.monitor_interval))]
        return words

    def node_env(self, shape: JobShape, index: int, master: str, port: int) -> dict[str, str]:
        return {
            "PET_NNODES": str(shape.num_nodes),
            "PET_NPROC_PER_NODE": str(shape.num_proc_per_node)
            if shape.num_proc_per_node
            else "auto",
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": str(port),
        }
