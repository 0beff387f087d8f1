"""What the optimizer takes and returns (`kubeflow.optimizer.types.optimization_types`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from ...types.types import UNKNOWN, TrainJob
from .algorithm_types import GridSearch, RandomSearch
from .search_types import CategoricalSearchSpace, ContinuousSearchSpace


class Direction(Enum):
    """Direction for optimization objective."""

    MAXIMIZE = "maximize"
    MINIMIZE = "minimize"


@dataclass
class Objective:
    """Objective configuration for hyperparameter optimization.

    Args:
        metric: The name of the metric to optimize. Defaults to "loss".
        direction: Whether to maximize or minimize the metric. Defaults to "minimize".
    """

    metric: str = "loss"
    direction: Direction = Direction.MINIMIZE

    def __post_init__(self) -> None:
        if isinstance(self.direction, str):
            self.direction = Direction(self.direction)


@dataclass
class TrialConfig:
    """Trial configuration for hyperparameter optimization.

    Args:
        num_trials: Number of trials to run. Defaults to 10.
        parallel_trials: Number of trials to run in parallel. Defaults to 1.
        max_failed_trials: Maximum number of failed trials before stopping.
    """

    num_trials: int = 10
    parallel_trials: int = 1
    max_failed_trials: int | None = None


@dataclass
class Metric:
    """One metric of a trial: its name and its min, max and latest values (strings)."""

    name: str
    min: str
    max: str
    latest: str


@dataclass
class Result:
    """Result containing the best hyperparameters and metrics.

    Args:
        parameters: The best hyperparameters found during optimization.
        metrics: The metrics achieved with these hyperparameters.
    """

    parameters: dict[str, str]
    metrics: list[Metric]


@dataclass
class Trial:
    """Representation for a trial.

    Args:
        name: The name of the Trial (the name of its TrainJob).
        parameters: Hyperparameters assigned to this Trial.
        trainjob: Representation of the TrainJob.
        metrics: Observed metrics for this Trial (kf-jupyter: also while it runs).
        status: kf-jupyter: `Running`, `Succeeded`, `Failed`, `MetricsUnavailable`, `Cancelled`.
        message: kf-jupyter: why it failed, or what is missing.
    """

    name: str
    parameters: dict[str, str]
    trainjob: TrainJob
    metrics: list[Metric] = field(default_factory=list)
    status: str = ""
    message: str = ""


@dataclass
class OptimizationJob:
    """Representation for an optimization job.

    Args:
        name: The name of the OptimizationJob.
        search_space: Each parameter's range or choices.
        objectives: The objective configuration (the first metric is optimized).
        algorithm: The algorithm configuration.
        trial_config: The trial configuration.
        trials: The list of created Trials.
        creation_timestamp: The creation timestamp.
        status: `Created`, `Running`, `Complete` or `Failed`.
        reason: kf-jupyter: why it ended (`TrialsCompleted`, `Cancelled`, ...).
        message: kf-jupyter: one line saying how it ended.
    """

    name: str
    search_space: dict[str, ContinuousSearchSpace | CategoricalSearchSpace]
    objectives: list[Objective]
    algorithm: GridSearch | RandomSearch
    trial_config: TrialConfig
    trials: list[Trial]
    creation_timestamp: datetime
    status: str = UNKNOWN
    reason: str = ""
    message: str = ""
