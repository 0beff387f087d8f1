"""The search space (`kubeflow.optimizer.types.search_types`): `Search.uniform`, ...

`Search.*` return a `ParameterSpec` with the attribute names of Katib's `V1beta1ParameterSpec`
(`parameter_type`, `feasible_space.min/max/distribution/list`, `name`), values as strings as
there, so code that reads them works the same; `to_dict()` gives Katib's JSON (camelCase).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..constants import constants


@dataclass
class FeasibleSpace:
    """Katib's `V1beta1FeasibleSpace`: a range (`min`, `max`, `distribution`, `step`) or a
    `list` of categorical values, all strings."""

    min: str | None = None
    max: str | None = None
    distribution: str | None = None
    list: list[str] | None = None
    step: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Katib's JSON, without unset fields."""
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass
class ParameterSpec:
    """Katib's `V1beta1ParameterSpec`: one parameter of the search space."""

    parameter_type: str
    feasible_space: FeasibleSpace
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Katib's JSON (`parameterType`, `feasibleSpace`, `name`)."""
        out: dict[str, Any] = {
            "parameterType": self.parameter_type,
            "feasibleSpace": self.feasible_space.to_dict(),
        }
        if self.name is not None:
            out["name"] = self.name
        return out


class Search:
    """Helper class for defining search space parameters."""

    @staticmethod
    def uniform(min: float, max: float) -> ParameterSpec:
        """Sample a float value uniformly between `min` and `max`."""
        return ParameterSpec(
            parameter_type=constants.DOUBLE_PARAMETER,
            feasible_space=FeasibleSpace(
                min=str(min), max=str(max), distribution=Distribution.UNIFORM.value
            ),
        )

    @staticmethod
    def loguniform(min: float, max: float) -> ParameterSpec:
        """Sample a float value with a log-uniform distribution between `min` and `max`."""
        return ParameterSpec(
            parameter_type=constants.DOUBLE_PARAMETER,
            feasible_space=FeasibleSpace(
                min=str(min), max=str(max), distribution=Distribution.LOG_UNIFORM.value
            ),
        )

    @staticmethod
    def choice(values: list) -> ParameterSpec:
        """Sample a categorical value from the list (each value as a string)."""
        return ParameterSpec(
            parameter_type=constants.CATEGORICAL_PARAMETERS,
            feasible_space=FeasibleSpace(list=[str(v) for v in values]),
        )


class Distribution(Enum):
    """Distribution of a continuous parameter."""

    UNIFORM = "uniform"
    LOG_UNIFORM = "logUniform"


@dataclass
class ContinuousSearchSpace:
    """A continuous parameter as `OptimizationJob.search_space` reports it."""

    min: float | int
    max: float | int
    distribution: Distribution


@dataclass
class CategoricalSearchSpace:
    """A categorical parameter as `OptimizationJob.search_space` reports it."""

    choices: list
