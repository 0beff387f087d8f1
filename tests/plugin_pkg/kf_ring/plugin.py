"""The 'ring' framework: every node learns its rank, the world size and rank 0's address.

Declarations only (no framework import), as kf-jupyter imports this module when it loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kf_jupyter.plugins import Plugin
from kf_jupyter.policies import JobShape, Policy
from kf_jupyter.trainers import BaseTrainer


class RingPolicy(Policy):
    """RING_RANK (the node index), RING_WORLD (nodes), RING_ADDR (rank 0's host:port)."""

    name = "ring"
    reserved_env = frozenset({"RING_RANK", "RING_WORLD", "RING_ADDR"})

    def node_env(self, shape: JobShape, index: int, master: str, port: int) -> dict[str, str]:
        return {
            "RING_RANK": str(index),
            "RING_WORLD": str(shape.num_nodes),
            "RING_ADDR": f"{master}:{port}",
        }


@dataclass(kw_only=True)
class RingTrainer(BaseTrainer):
    """Runs the function once per node with the ring environment (`%%ringtrain -n 3`)."""

    supported_frameworks: ClassVar[tuple[str, ...]] = ("ring",)
    policy: ClassVar[str] = "ring"


@dataclass
class RingTag:
    """An option: the label `ring.example.com/tag` on the TrainJob."""

    value: str

    def __call__(self, job: dict[str, Any], trainer: Any, backend: Any) -> None:
        job["metadata"].setdefault("labels", {})["ring.example.com/tag"] = self.value


RUNTIME: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {
        "name": "ring-distributed",
        "labels": {"trainer.kubeflow.org/framework": "ring"},
    },
    "spec": {
        "mlPolicy": {"numNodes": 1},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {"name": "node", "image": "python:3.11-slim"}
                                        ]
                                    }
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}

plugin = Plugin(
    trainers={"ringtrain": RingTrainer},
    policies=[RingPolicy()],
    runtimes=[RUNTIME],
    options={"ring-tag": RingTag},
    description="A toy ring framework",
)
