"""What the Trainer reads from `resourcesPerNode`: GPUs per node and torch's `numProcPerNode: auto`.

One place for both backends. Kubeflow Trainer v2.3:
- `pkg/runtime/runtime.go` `GetNumGPUPerNode`/`numGPU`: the GPU count is the quantity of the
  first resource whose name contains "gpu" (case-insensitive: `nvidia.com/gpu`, `amd.com/gpu`,
  ...), from the requests, else the limits, as `Quantity.Value()` (rounded up).
- `pkg/runtime/framework/plugins/torch/torch.go` `EnforceMLPolicy`/`calculateNumProcPerNode`:
  with `auto`, a node with GPUs keeps `auto` (torchrun then starts one process per visible GPU:
  the pod's GPU count), else `max(1, cpu)`, the CPU request rounded up, else the CPU limit, a
  missing cpu counting 0, so 1 (torch.go:121-135, 227-240). That holds without any resources too:
  `resourcesPerNode` then defaults to an empty one, never to torchrun's one per CPU.

The resources are the TrainJob's `resourcesPerNode`, else the runtime's `node` container's
(`build.node_resources`); each function takes either `{"requests": ..., "limits": ...}` or a flat
name -> quantity map (a trainer's `resources()`, which the TrainJob sends as both).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

_SUFFIX = {
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def quantity_value(quantity: str) -> int:
    """A Kubernetes quantity as `resource.Quantity.Value()` gives it: rounded up to an integer."""
    text = str(quantity).strip()
    for suffix in sorted(_SUFFIX, key=len, reverse=True):
        if text.endswith(suffix):
            return math.ceil(Fraction(text[: -len(suffix)]) * _SUFFIX[suffix])
    return math.ceil(Fraction(text))


def is_gpu_resource(name: str) -> bool:
    """The Trainer counts this resource as GPUs (its name contains "gpu")."""
    return "gpu" in name.lower()


def as_requirements(resources: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """`{"requests": ..., "limits": ...}` from either that form or a flat map (both parts)."""
    resources = dict(resources or {})
    if resources and set(resources) <= {"requests", "limits", "claims"}:
        return {
            "requests": dict(resources.get("requests") or {}),
            "limits": dict(resources.get("limits") or {}),
        }
    return {"requests": resources, "limits": resources}


def _gpus_in(resource_list: Mapping[str, Any]) -> int:
    for name, quantity in resource_list.items():
        if is_gpu_resource(str(name)):
            return quantity_value(quantity)
    return 0


def gpus_per_node(resources: Mapping[str, Any] | None) -> int:
    """GPUs each node gets: the first GPU resource's quantity, rounded up, from the requests,
    else the limits (0 if none)."""
    req = as_requirements(resources)
    return _gpus_in(req["requests"]) or _gpus_in(req["limits"])


def cpus_per_node(resources: Mapping[str, Any] | None) -> int:
    """The CPU request rounded up, else the CPU limit, else 0 (torch.go getNumCPUPerNode)."""
    req = as_requirements(resources)
    request = quantity_value(req["requests"].get("cpu") or 0)
    return request or quantity_value(req["limits"].get("cpu") or 0)


def auto_procs_per_node(resources: Mapping[str, Any] | None) -> int:
    """What `numProcPerNode: auto` becomes on a node with these resources: the GPU count when
    GPUs are asked for (what torchrun's `auto` starts in such a pod), else max(1, cpu)."""
    return gpus_per_node(resources) or max(1, cpus_per_node(resources))
