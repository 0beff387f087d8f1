"""What the Trainer reads from `resourcesPerNode`: GPUs per node and torch's `numProcPerNode: auto`.

One place for both backends. Kubeflow Trainer v2.3:
- `pkg/runtime/runtime.go` `GetNumGPUPerNode`/`numGPU`: the GPU count is the quantity of the
  first resource whose name contains "gpu" (case-insensitive: `nvidia.com/gpu`, `amd.com/gpu`,
  ...), from the requests, else the limits, as `Quantity.Value()` (rounded up).
- `pkg/runtime/framework/plugins/torch/torch.go` `EnforceMLPolicy`/`calculateNumProcPerNode`:
  with `auto` and resources given, a node with a GPU resource keeps `auto` (torchrun then starts
  one process per visible GPU: the pod's GPU count), else `max(1, cpu)` (a missing cpu counts as
  0, so 1). Without resources `auto` stays `auto` (torchrun: one per CPU of the pod).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

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


def gpus_per_node(resources: Mapping[str, str]) -> int:
    """GPUs each node gets: the first GPU resource's quantity, rounded up (0 if none)."""
    for name, quantity in resources.items():
        if is_gpu_resource(name):
            return quantity_value(quantity)
    return 0


def auto_procs_per_node(resources: Mapping[str, str]) -> int | None:
    """What `numProcPerNode: auto` becomes on a node with these resources: the GPU count when
    one is asked for (what torchrun's `auto` starts in such a pod), else max(1, cpu); None
    (stays `auto`) when no resources are given."""
    if not resources:
        return None
    gpus = gpus_per_node(resources)
    if any(is_gpu_resource(n) for n in resources):
        return max(1, gpus) if gpus else None
    cpu = resources.get("cpu")
    return max(1, quantity_value(cpu) if cpu else 0)
