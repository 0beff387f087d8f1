"""The search space and its trials: parameters, grid and random expansion (pure, no I/O).

A parameter is continuous (`double`: `uniform` or `logUniform` between `min` and `max`) or
categorical (a list of values), as the Kubeflow SDK's `Search.uniform`, `Search.loguniform` and
`Search.choice` describe it. `assignments()` turns the space into the parameter values of each
trial, as strings (what Katib substitutes into a trial and what `KUBEFLOW_TRAINER_OPT_<NAME>`
carries on a cluster):

- random search: each trial draws every parameter independently (uniform, log-uniform, or one
  of the choices), from `random.Random(seed)`: the same seed gives the same trials;
- grid search: the cartesian product of every categorical parameter's values and, for a
  continuous parameter, `step`-spaced points when a step is given, else evenly spaced points
  (geometrically for log-uniform) including both ends, as many as fit `num_trials` for the
  continuous parameters together; the first `num_trials` points of the grid are run.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError

DOUBLE = "double"
CATEGORICAL = "categorical"
UNIFORM = "uniform"
LOG_UNIFORM = "logUniform"
RANDOM = "random"
GRID = "grid"

#: A parameter name: a Python identifier (it is a keyword argument of the function and part of
#: an environment variable's name).
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Param:
    """One parameter of the search space."""

    name: str
    kind: str  # DOUBLE | CATEGORICAL
    min: float | None = None
    max: float | None = None
    distribution: str = UNIFORM
    step: float | None = None
    choices: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "kind": self.kind,
            "min": self.min,
            "max": self.max,
            "distribution": self.distribution,
            "step": self.step,
            "choices": list(self.choices),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Param:
        """The inverse of `to_dict`."""
        return cls(
            name=str(d["name"]),
            kind=str(d["kind"]),
            min=d.get("min"),
            max=d.get("max"),
            distribution=str(d.get("distribution") or UNIFORM),
            step=d.get("step"),
            choices=[str(c) for c in d.get("choices") or []],
        )


def env_name(param: str) -> str:
    """`KUBEFLOW_TRAINER_OPT_<NAME>`: the Trainer's OptimizationJob upper-cases the name."""
    return "KUBEFLOW_TRAINER_OPT_" + param.upper()


def _number(what: str, value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{what} must be a number, got {value!r}.") from None
    if not math.isfinite(out):
        raise ValidationError(f"{what} must be a finite number, got {value!r}.")
    return out


def param_from_spec(name: Any, spec: Any) -> Param:
    """A `Param` from a search-space entry: what `Search.uniform/loguniform/choice` return
    (kf-jupyter's or the Kubeflow SDK's Katib `ParameterSpec`), or a `Param`."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValidationError(
            f"Search space parameter name {name!r} is not usable: it becomes a keyword argument "
            "of the training function and part of an environment variable name "
            "(KUBEFLOW_TRAINER_OPT_<NAME>). Use letters, digits and underscores, not starting "
            "with a digit, e.g. 'learning_rate'."
        )
    if isinstance(spec, Param):
        return Param(**{**spec.to_dict(), "name": name})
    kind = getattr(spec, "parameter_type", None)
    space = getattr(spec, "feasible_space", None)
    if kind is None or space is None:
        raise ValidationError(
            f"search_space[{name!r}] must come from Search.uniform(min, max), "
            f"Search.loguniform(min, max) or Search.choice([...]), got {type(spec).__name__}."
        )
    if kind == CATEGORICAL:
        values = list(getattr(space, "list", None) or [])
        if not values:
            raise ValidationError(f"Search.choice for {name!r} needs at least one value.")
        return Param(name=name, kind=CATEGORICAL, choices=[str(v) for v in values])
    if kind not in (DOUBLE, "int"):
        raise ValidationError(
            f"search_space[{name!r}] has parameter type {kind!r}; kf-jupyter sweeps support "
            "'double' (Search.uniform / Search.loguniform) and 'categorical' (Search.choice)."
        )
    lo = _number(f"The minimum of {name!r}", getattr(space, "min", None))
    hi = _number(f"The maximum of {name!r}", getattr(space, "max", None))
    dist = getattr(space, "distribution", None) or UNIFORM
    dist = getattr(dist, "value", dist)
    if dist not in (UNIFORM, LOG_UNIFORM):
        raise ValidationError(
            f"search_space[{name!r}] has distribution {dist!r}; use 'uniform' or 'logUniform'."
        )
    if not lo < hi:
        raise ValidationError(
            f"search_space[{name!r}]: the minimum ({lo:g}) must be below the maximum ({hi:g})."
        )
    if dist == LOG_UNIFORM and lo <= 0:
        raise ValidationError(
            f"Search.loguniform for {name!r} needs a minimum above 0, got {lo:g}: a "
            "log-uniform range cannot include 0 or negative numbers."
        )
    step_raw = getattr(space, "step", None)
    step = _number(f"The step of {name!r}", step_raw) if step_raw not in (None, "") else None
    if step is not None and step <= 0:
        raise ValidationError(f"The step of {name!r} must be above 0, got {step:g}.")
    return Param(name=name, kind=DOUBLE, min=lo, max=hi, distribution=dist, step=step)


def parse_space(search_space: Any) -> list[Param]:
    """The parameters of a `search_space` dict (in its order); a clear error if it is empty."""
    if not isinstance(search_space, Mapping) or not search_space:
        raise ValidationError(
            "Search space must be set: a dict such as {'lr': Search.loguniform(1e-4, 1e-1)}."
        )
    return [param_from_spec(k, v) for k, v in search_space.items()]


def format_value(value: float) -> str:
    """A drawn number as the trial gets it: 6 significant digits (`0.00123457`, `1e-05`)."""
    return f"{value:.6g}"


def _draw(p: Param, rng: random.Random) -> str:
    if p.kind == CATEGORICAL:
        return rng.choice(p.choices)
    assert p.min is not None and p.max is not None
    if p.distribution == LOG_UNIFORM:
        return format_value(math.exp(rng.uniform(math.log(p.min), math.log(p.max))))
    return format_value(rng.uniform(p.min, p.max))


def _points(p: Param, n: int) -> list[str]:
    """Grid points of a continuous parameter."""
    assert p.min is not None and p.max is not None
    if p.step is not None:
        count = math.floor((p.max - p.min) / p.step + 1e-9) + 1
        return [format_value(p.min + i * p.step) for i in range(count)]
    if n <= 1:
        return [format_value(p.min)]
    if p.distribution == LOG_UNIFORM:
        lo, hi = math.log(p.min), math.log(p.max)
        return [format_value(math.exp(lo + (hi - lo) * i / (n - 1))) for i in range(n)]
    return [format_value(p.min + (p.max - p.min) * i / (n - 1)) for i in range(n)]


def grid(params: list[Param], num_trials: int) -> list[dict[str, str]]:
    """Every point of the grid, in order (the last parameter varies fastest)."""
    categorical = math.prod(len(p.choices) for p in params if p.kind == CATEGORICAL)
    continuous = [p for p in params if p.kind == DOUBLE and p.step is None]
    per = 1
    if continuous:
        budget = max(1, num_trials // max(categorical, 1))
        per = max(1, math.floor(budget ** (1 / len(continuous)) + 1e-9))
        if per < 2 and num_trials >= 2:
            per = 2
    axes = [p.choices if p.kind == CATEGORICAL else _points(p, per) for p in params]
    return [dict(zip([p.name for p in params], combo)) for combo in itertools.product(*axes)]


def assignments(
    params: list[Param], algorithm: str, num_trials: int, seed: int | None = None
) -> list[dict[str, str]]:
    """The parameter values of each trial (strings), at most `num_trials` of them."""
    if isinstance(num_trials, bool) or not isinstance(num_trials, int) or num_trials < 1:
        raise ValidationError(f"num_trials must be a whole number ≥ 1, got {num_trials!r}.")
    if algorithm == GRID:
        return grid(params, num_trials)[:num_trials]
    if algorithm != RANDOM:
        raise ValidationError(
            f"Algorithm {algorithm!r} is not supported locally; use RandomSearch() or GridSearch()."
        )
    rng = random.Random(seed)
    return [{p.name: _draw(p, rng) for p in params} for _ in range(num_trials)]
