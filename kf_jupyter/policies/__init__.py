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


#: The policies the Kubeflow Trainer itself enforces (mlPolicy.<name>); any other policy's
#: environment is set by the job's command on a cluster (see `Policy.command_env`).
TRAINER_POLICIES = frozenset({"torch", "mpi", "jax", "xgboost"})


def get_policy(name: str) -> Policy:
    """The policy for an ML policy name: built-in, else a plugin's, else the plain policy."""
    policy = POLICIES.get(name)
    if policy is not None:
        return policy
    from ..plugins import get_policy as plugin_policy

    return plugin_policy(name) or POLICIES["plain"]


def reserved_env() -> frozenset[str]:
    """Every name the Trainer (or a plugin policy) injects for some policy."""
    from ..plugins import registry

    out: set[str] = set()
    for p in [*POLICIES.values(), *registry().policies.values()]:
        out |= p.reserved_env
    return frozenset(out)


__all__ = [
    "POLICIES",
    "TRAINER_POLICIES",
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
