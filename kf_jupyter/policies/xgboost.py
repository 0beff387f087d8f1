"""The xgboost policy: DMLC_* variables; rank 0 runs the collective tracker (in the runner)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from .base import JobShape, Policy, Procs
from .resources import gpus_per_node


class XGBoostPolicy(Policy):
    """DMLC_TRACKER_URI/PORT point at node 0; DMLC_NUM_WORKER = nodes × (GPUs or 1)."""

    name = "xgboost"
    setup: ClassVar[str] = "xgboost"
    reserved_env = frozenset(
        {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"}
    )

    def procs_per_node(
        self, explicit: int | None, runtime_nproc: int | None, resources: Mapping[str, Any] | None
    ) -> Procs:
        """One worker per GPU with GPUs, else one per node (xgboost.go:100-113; the Trainer's
        XGBoost guide, "Worker Count")."""
        gpus = gpus_per_node(resources)
        if gpus:
            return Procs(gpus, str(gpus), f"one XGBoost worker per GPU ({gpus} GPUs per node)")
        return Procs(1, "1", "one XGBoost worker per node (no GPU; it uses the node's cores)")

    def launch_words(self, trainer: Any, shape: JobShape | None) -> list[str]:
        """With G GPUs per node the runner starts G workers per pod (tasks i*G .. i*G+G-1)."""
        words = self.launcher(trainer)
        if shape is not None and shape.procs > 1:
            words = [f"KF_JUPYTER_WORKERS_PER_NODE={shape.procs}", *words]
        return words

    def runner_setup(self, trainer: Any) -> str:
        return self.setup if getattr(trainer, "setup_collective", True) else "none"

    def node_env(self, shape: JobShape, index: int, master: str, port: int) -> dict[str, str]:
        return {
            "DMLC_TRACKER_URI": master,
            "DMLC_TRACKER_PORT": str(port),
            "DMLC_TASK_ID": str(index),
            "DMLC_NUM_WORKER": str(shape.num_nodes * (shape.gpus_per_node or 1)),
        }
