"""The built-in local runtimes: one per framework, found by the same rules as on a cluster."""

from __future__ import annotations

from ...constants import FRAMEWORK_LABEL
from ...runtimes import Runtime

LOCAL_RUNTIME_KIND = "LocalRuntime"


def _local(framework: str) -> Runtime:
    return Runtime(
        name=f"local-{framework}",
        kind=LOCAL_RUNTIME_KIND,
        framework=framework,
        ml_policy=framework,
        labels={FRAMEWORK_LABEL: framework},
    )


#: torch, mpi, jax and xgboost, in that order.
LOCAL_RUNTIMES: tuple[Runtime, ...] = tuple(_local(f) for f in ("torch", "mpi", "jax", "xgboost"))
