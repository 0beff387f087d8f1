"""The torch policy: `torchrun` per node, configured by the PET_* variables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import JobShape, Policy, ProcessSpec, Procs, auto_procs


class TorchPolicy(Policy):
    """torchrun reads PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR/PORT."""

    name = "torch"
    reserved_env = frozenset(
        {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
    )

    def procs_per_node(
        self, explicit: int | None, runtime_nproc: int | None, resources: Mapping[str, Any] | None
    ) -> Procs:
        """The job's numProcPerNode, else `auto` (torch.go:121-135; the runtime's value is not
        read for torch)."""
        if explicit:
            return Procs(explicit, str(explicit), f"numProcPerNode {explicit} (set by the job)")
        return auto_procs(resources)

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
            "PET_NPROC_PER_NODE": shape.nproc_env
            or (str(shape.num_proc_per_node) if shape.num_proc_per_node else "auto"),
            "PET_NODE_RANK": str(index),
            "PET_MASTER_ADDR": master,
            "PET_MASTER_PORT": str(port),
        }

    def local_processes(self, shape: JobShape, port: int, job_dir: str) -> list[ProcessSpec]:
        """One torchrun per node; `auto` is resolved to the number a cluster starts (never
        torchrun's own `auto`, which is one per local CPU without a GPU)."""
        out = super().local_processes(shape, port, job_dir)
        for ps in out:
            ps.env["PET_NPROC_PER_NODE"] = str(shape.procs)
        return out
