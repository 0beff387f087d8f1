"""The xgboost policy: DMLC_* variables; rank 0 runs the collective tracker (in the runner)."""

from __future__ import annotations

from typing import Any, ClassVar

from .base import JobShape, Policy


class XGBoostPolicy(Policy):
    """DMLC_TRACKER_URI/PORT point at node 0; DMLC_NUM_WORKER = nodes × (GPUs or 1)."""

    name = "xgboost"
    setup: ClassVar[str] = "xgboost"
    reserved_env = frozenset(
        {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"}
    )

    def runner_setup(self, trainer: Any) -> str:
        return self.setup if getattr(trainer, "setup_collective", True) else "none"

    def node_env(self, shape: JobShape, index: int, master: str, port: int) -> dict[str, str]:
        return {
            "DMLC_TRACKER_URI": master,
            "DMLC_TRACKER_PORT": str(port),
            "DMLC_TASK_ID": str(index),
            "DMLC_NUM_WORKER": str(shape.num_nodes * (shape.gpus_per_node or 1)),
        }
