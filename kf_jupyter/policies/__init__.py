"""Framework policies, one module per framework, used by both backends."""

from __future__ import annotations

from .base import (
    JobShape,
    Payload,
    Policy,
    ProcessSpec,
    Procs,
    auto_procs,
)
from .jax import JaxPolicy
from .mpi import MPIPolicy
from .plain import PlainPolicy
from .resources import auto_procs_per_node, cpus_per_node, gpus_per_node
from .torch import TorchPolicy
from .xgboost import XGBoostPolicy

POLICIES: dict[str, Policy] = {
    p.name: p for p in (TorchPolicy(), MPIPolicy(), JaxPolicy(), XGBoostPolicy(), PlainPolicy())
}

#: Names no user env may set, whatever the policy (kf-jupyter's own runner variables).
OWN_ENV_PREFIX = "KF_JUPYTER_"


def get_policy(name: str) -> Policy:
    """The policy for an ML policy name (unknown names get the plain policy)."""
    return POLICIES.get(name, POLICIES["plain"])


def reserved_env() -> frozenset[str]:
    """Every name the Trainer injects for some policy."""
    out: set[str] = set()
    for p in POLICIES.values():
        out |= p.reserved_env
    return frozenset(out)


__all__ = [
    "POLICIES",
    "JobShape",
    "Payload",
    "Policy",
    "ProcessSpec",
    "Procs",
    "auto_procs",
    "auto_procs_per_node",
    "cpus_per_node",
    "get_policy",
    "gpus_per_node",
    "reserved_env",
]
