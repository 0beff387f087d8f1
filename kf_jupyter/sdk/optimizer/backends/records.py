"""Between the SDK's optimizer types and the sweep engine's records (any backend).

`sweep_spec(...)` checks `optimize()`'s arguments and makes the engine's `SweepSpec`;
`to_optimization_job(record, trainjob_of)` turns a sweep record into the SDK's
`OptimizationJob` (its `trials[i].trainjob` from `trainjob_of(name)`); `best_result`,
`events_of` and `validate_wait` are what every backend's methods share.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from ....errors import ValidationError
from ....sweeps import engine as eng
from ....sweeps.space import CATEGORICAL, parse_space
from ...types.types import Event, TrainJob
from ..constants import constants
from ..types.algorithm_types import BaseAlgorithm, GridSearch, RandomSearch
from ..types.optimization_types import (
    Direction,
    Metric,
    Objective,
    OptimizationJob,
    Result,
    Trial,
    TrialConfig,
)
from ..types.search_types import CategoricalSearchSpace, ContinuousSearchSpace, Distribution

STATUSES = frozenset(
    {
        constants.OPTIMIZATION_JOB_CREATED,
        constants.OPTIMIZATION_JOB_RUNNING,
        constants.OPTIMIZATION_JOB_COMPLETE,
        constants.OPTIMIZATION_JOB_FAILED,
    }
)


def _objective(o: Any) -> tuple[str, str]:
    metric = getattr(o, "metric", None)
    direction = getattr(o, "direction", None)
    direction = getattr(direction, "value", direction)
    if not isinstance(metric, str) or not metric or direction not in ("minimize", "maximize"):
        raise ValidationError(
            "objectives must be a list of Objective(metric='loss', direction='minimize' or "
            f"'maximize'), got {o!r}."
        )
    return metric, direction


def sweep_spec(
    name: str,
    search_space: Any,
    trial_config: Any = None,
    objectives: list[Any] | None = None,
    algorithm: Any = None,
) -> eng.SweepSpec:
    """The engine's spec of `optimize()`'s arguments (the SDK's defaults: 10 trials, one at a
    time, minimize `loss`, random search); a clear `ValidationError` for bad input."""
    params = parse_space(search_space)
    trial_config = trial_config or TrialConfig()
    if objectives is not None and not isinstance(objectives, list | tuple):
        raise ValidationError("objectives must be a list, e.g. [Objective(metric='loss')].")
    objs = [_objective(o) for o in (objectives or [Objective()])]
    algorithm = algorithm or RandomSearch()
    kind = getattr(algorithm, "algorithm_name", None)
    if kind not in ("random", "grid"):
        raise ValidationError(
            f"algorithm must be RandomSearch() or GridSearch(), got {type(algorithm).__name__}."
        )
    seed = getattr(algorithm, "random_state", None) if kind == "random" else None
    return eng.SweepSpec(
        name=name,
        params=params,
        objectives=objs,
        algorithm=kind,
        seed=seed,
        num_trials=getattr(trial_config, "num_trials", 10),
        parallel_trials=getattr(trial_config, "parallel_trials", 1),
        max_failed_trials=getattr(trial_config, "max_failed_trials", None),
    )


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def metrics_of(trial: dict[str, Any]) -> list[Metric]:
    """A trial record's metrics as the SDK's `Metric`s."""
    return [
        Metric(name=k, min=v["min"], max=v["max"], latest=v["latest"])
        for k, v in (trial.get("metrics") or {}).items()
    ]


def algorithm_of(spec: dict[str, Any]) -> GridSearch | RandomSearch:
    """The SDK's algorithm object of a spec."""
    if spec.get("algorithm") == "grid":
        return GridSearch()
    return RandomSearch(random_state=spec.get("seed"))


def to_optimization_job(
    record: dict[str, Any], trainjob_of: Callable[[dict[str, Any]], TrainJob]
) -> OptimizationJob:
    """The SDK's `OptimizationJob` of a sweep record (started trials only, as Katib lists)."""
    spec = record["spec"]
    space: dict[str, ContinuousSearchSpace | CategoricalSearchSpace] = {}
    for p in spec["params"]:
        if p["kind"] == CATEGORICAL:
            space[p["name"]] = CategoricalSearchSpace(choices=list(p["choices"]))
        else:
            space[p["name"]] = ContinuousSearchSpace(
                min=p["min"], max=p["max"], distribution=Distribution(p["distribution"])
            )
    trials = [
        Trial(
            name=t["name"],
            parameters=dict(t["parameters"]),
            trainjob=trainjob_of(t),
            metrics=metrics_of(t),
            status=t["status"],
            message=t.get("message", ""),
        )
        for t in record["trials"]
        if t["status"] != eng.PENDING and t.get("submitted")
    ]
    return OptimizationJob(
        name=record["name"],
        search_space=space,
        objectives=[
            Objective(metric=o["metric"], direction=Direction(o["direction"]))
            for o in spec["objectives"]
        ],
        algorithm=algorithm_of(spec),
        trial_config=TrialConfig(
            num_trials=spec["num_trials"],
            parallel_trials=spec["parallel_trials"],
            max_failed_trials=spec.get("max_failed_trials"),
        ),
        trials=trials,
        creation_timestamp=_time(record.get("created")),  # type: ignore[arg-type]
        status=record["status"],
        reason=record.get("reason", ""),
        message=record.get("message", ""),
    )


def best_result(record: dict[str, Any]) -> Result | None:
    """The best trial's parameters and metrics, or None while no trial has succeeded."""
    best = eng.best_trial(record)
    if best is None:
        return None
    return Result(parameters=dict(best["parameters"]), metrics=metrics_of(best))


def events_of(record: dict[str, Any]) -> list[Event]:
    """The sweep's own events as the SDK's `Event`s (kind `OptimizationJob`)."""
    return [
        Event(
            involved_object_kind=constants.OPTIMIZATION_JOB_KIND,
            involved_object_name=record["name"],
            message=e["message"],
            reason=e["reason"],
            event_time=_time(e.get("time")),
        )
        for e in record.get("events", [])
    ]


def validate_wait(status: Any, timeout: Any, polling_interval: Any) -> set[str]:
    """`wait_for_job_status`'s arguments, checked as the SDK checks them."""
    wanted = set(status) if isinstance(status, set | frozenset | list | tuple) else None
    if not wanted or not wanted <= STATUSES:
        raise ValidationError(f"Expected status {status} must be a subset of {sorted(STATUSES)}.")
    for what, value in (("timeout", timeout), ("polling_interval", polling_interval)):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValidationError(f"{what} must be a positive number of seconds, got {value!r}.")
    if polling_interval >= timeout:
        raise ValidationError(
            "Polling interval must be strictly less than timeout. Received "
            f"polling_interval={polling_interval}, timeout={timeout}."
        )
    return wanted


def is_algorithm(value: Any) -> bool:
    """An algorithm object (ours or the SDK's)."""
    return isinstance(value, BaseAlgorithm) or hasattr(value, "algorithm_name")


def trial_template(trainer_backend: Any, template: Any) -> eng.TrialTemplate:
    """The engine's trial template of the SDK's `TrainJobTemplate` (checked and converted as
    `train()` converts its arguments, by the SDK backend `trainer_backend`)."""
    if not hasattr(template, "trainer"):
        raise ValidationError(
            "trial_template must be a TrainJobTemplate(trainer=CustomTrainer(func=...), "
            f"runtime=...), got {type(template).__name__}."
        )
    ours, rt, rc, opts = trainer_backend.prepare(
        runtime=getattr(template, "runtime", None),
        initializer=getattr(template, "initializer", None),
        trainer=template.trainer,
    )
    return eng.TrialTemplate(trainer=ours, runtime=rt, runtime_config=rc, options=opts)
