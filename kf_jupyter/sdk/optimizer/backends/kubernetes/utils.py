"""Katib spec helpers of the SDK (`kubeflow.optimizer.backends.kubernetes.utils`), on Katib's
JSON or model objects (attribute or camelCase key access)."""

from __future__ import annotations

from dataclasses import fields
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from ...constants import constants
from ...types.algorithm_types import ALGORITHM_REGISTRY, GridSearch, RandomSearch
from ...types.optimization_types import Direction, Objective
from ...types.search_types import CategoricalSearchSpace, ContinuousSearchSpace, Distribution


def _get(obj: Any, snake: str, camel: str | None = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(camel or snake, obj.get(snake))
    return getattr(obj, snake, None)


def convert_value(raw_value: str, target_type: Any) -> Any:
    """A string setting as `target_type` (`T | None` counts as `T`): int, float, bool, else str."""
    if get_origin(target_type) in (Union, UnionType):
        args = [a for a in get_args(target_type) if a is not NoneType]
        if len(args) == 1:
            target_type = args[0]
    if isinstance(target_type, str):  # a postponed annotation: "int | None"
        parts = [t.strip() for t in target_type.split("|") if t.strip() != "None"]
        target_type = {"int": int, "float": float, "bool": bool}.get(parts[0] if parts else "")
    if target_type is int:
        return int(raw_value)
    if target_type is float:
        return float(raw_value)
    if target_type is bool:
        return raw_value.lower() in ("true", "1")
    return raw_value


def get_algorithm_from_katib_spec(algorithm: Any) -> GridSearch | RandomSearch:
    """The SDK algorithm of a Katib `AlgorithmSpec`."""
    name = _get(algorithm, "algorithm_name", "algorithmName") or ""
    cls = ALGORITHM_REGISTRY.get(name)
    if cls is None:
        raise ValueError(f"Kubeflow SDK doesn't support {name} algorithm.")
    settings = {
        _get(s, "name"): _get(s, "value")
        for s in _get(algorithm, "algorithm_settings", "algorithmSettings") or []
    }
    kwargs = {}
    for f in fields(cls):
        if settings.get(f.name) is not None:
            kwargs[f.name] = convert_value(settings[f.name], f.type)
    return cls(**kwargs)


def get_objectives_from_katib_spec(objective: Any) -> list[Objective]:
    """The SDK objectives of a Katib `ObjectiveSpec` (the objective metric first)."""
    metric = _get(objective, "objective_metric_name", "objectiveMetricName")
    if metric is None:
        raise ValueError("Objective metric name cannot be empty")
    direction = Direction(_get(objective, "type"))
    extra = _get(objective, "additional_metric_names", "additionalMetricNames") or []
    return [Objective(metric=m, direction=direction) for m in [metric, *extra]]


def get_search_space_from_katib_spec(
    parameters: list[Any],
) -> dict[str, ContinuousSearchSpace | CategoricalSearchSpace]:
    """The SDK search space of Katib `ParameterSpec`s."""
    out: dict[str, ContinuousSearchSpace | CategoricalSearchSpace] = {}
    for p in parameters:
        space = _get(p, "feasible_space", "feasibleSpace")
        name = _get(p, "name")
        if _get(p, "parameter_type", "parameterType") == constants.CATEGORICAL_PARAMETERS:
            values = _get(space, "list") if space is not None else None
            if not values:
                raise ValueError(f"Katib categorical parameters are invalid: {parameters}")
            out[name] = CategoricalSearchSpace(choices=[str(v) for v in values])
        else:
            lo, hi = _get(space, "min"), _get(space, "max")
            dist = _get(space, "distribution")
            if space is None or not (lo and hi and dist):
                raise ValueError(f"Katib continuous parameters are invalid: {parameters}")
            out[name] = ContinuousSearchSpace(
                min=float(lo), max=float(hi), distribution=Distribution(dist)
            )
    return out
