"""Search algorithms (`kubeflow.optimizer.types.algorithm_types`): `GridSearch`, `RandomSearch`."""

from __future__ import annotations

import abc
from dataclasses import dataclass, fields
from typing import Any


def algorithm_to_katib_spec(obj: Any) -> dict[str, Any]:
    """Katib's `AlgorithmSpec` JSON of an algorithm: its name and its set fields as settings."""
    settings = [
        {"name": f.name, "value": str(getattr(obj, f.name))}
        for f in fields(obj)
        if getattr(obj, f.name) is not None
    ]
    out: dict[str, Any] = {"algorithmName": obj.algorithm_name}
    if settings:
        out["algorithmSettings"] = settings
    return out


class BaseAlgorithm(abc.ABC):
    """Base of the search algorithms."""

    @property
    @abc.abstractmethod
    def algorithm_name(self) -> str:
        """Katib's name of the algorithm (`grid`, `random`)."""

    @abc.abstractmethod
    def _to_katib_spec(self) -> Any:
        raise NotImplementedError()


@dataclass
class GridSearch(BaseAlgorithm):
    """Grid search: every combination of the parameters' values, in order (docs/sweeps.md
    says how continuous ranges are split)."""

    @property
    def algorithm_name(self) -> str:
        """`grid`."""
        return "grid"

    def _to_katib_spec(self) -> dict[str, Any]:
        return algorithm_to_katib_spec(self)


@dataclass
class RandomSearch(BaseAlgorithm):
    """Random search.

    Args:
        random_state: Random seed for reproducibility (the same seed, the same trials).
    """

    random_state: int | None = None

    @property
    def algorithm_name(self) -> str:
        """`random`."""
        return "random"

    def _to_katib_spec(self) -> dict[str, Any]:
        return algorithm_to_katib_spec(self)


#: Registry of supported search algorithms.
ALGORITHM_REGISTRY = {
    GridSearch().algorithm_name: GridSearch,
    RandomSearch().algorithm_name: RandomSearch,
}
