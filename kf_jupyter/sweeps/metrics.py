"""A trial's metrics from what its job printed and reported (pure, no I/O).

Three ways a trial reports its objective, all read the same locally and on a cluster:

- `name=value` on its standard output, the convention of Katib's default (StdOut) metrics
  collector, which the Kubeflow SDK's optimizer examples use (`print(f"loss={loss}")`); only
  the names of the sweep's objectives are read, as Katib reads only those (several on one line
  work: `epoch=3 loss=0.25 accuracy=0.91`);
- `kf_jupyter.report(loss=...)` lines (`##kf-jupyter:report {...}`);
- the job's `trainerStatus.metrics` (KEP-2779: `kubeflow.trainer.update_trainjob_status`,
  Transformers' Kubeflow callback, `report()`), sampled while the trial runs.

Each metric keeps every value in order; `Metric`-style `min`, `max`, `latest` are strings, as
the SDK's `Metric` has them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..constants import REPORT_PREFIX
from ..report import parse_report

#: Katib's default StdOut metrics filter (`([\w|-]+)\s*=\s*([+-]?\d*(\.\d+)?([Ee][+-]?\d+)?)`).
#: Kept for reference: `finditer` with it backtracks quadratically on a long run of name
#: characters not followed by `=` (a separator line of 8,000 `-` takes seconds); `katib_pairs`
#: finds the same matches in linear time.
KATIB_FILTER = re.compile(r"([\w|-]+)\s*=\s*([+-]?\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?)")
_NAME_RUN = re.compile(r"[\w|-]+")
_AFTER_NAME = re.compile(r"\s*=\s*([+-]?\d*(?:\.\d+)?(?:[Ee][+-]?\d+)?)")

#: A trial keeps at most this many values of each metric (the curve, for the views).
MAX_POINTS = 2000

MINIMIZE = "minimize"
MAXIMIZE = "maximize"


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def katib_pairs(line: str) -> Iterator[tuple[str, str]]:
    """Every `(name, value)` match of `KATIB_FILTER` in `line`, in order, in linear time.

    The filter's name part can only end where a run of name characters (`[\\w|-]`) ends, so
    a match starting inside a run fails exactly when one starting at the run's first
    character does: each run is tried once, at its start, and skipped whole on failure (the
    regular expression retries every position of the run, each time to its end). The value
    part may be empty (`loss=` gives `("loss", "")`), as with the filter."""
    pos = 0
    while (run := _NAME_RUN.search(line, pos)) is not None:
        after = _AFTER_NAME.match(line, run.end())
        if after is None:
            pos = run.end()
            continue
        yield run.group(), after.group(1)
        pos = after.end()


def line_metrics(line: str, names: Iterable[str]) -> list[tuple[str, str]]:
    """The `(name, value)` pairs of one log line for the wanted metric names, in order."""
    wanted = set(names)
    if not wanted:
        return []
    if REPORT_PREFIX in line:
        record = parse_report(line)
        if record is None:
            return []
        return [(k, repr(v)) for k, v in record["metrics"].items() if k in wanted]
    return [(n, v) for n, v in katib_pairs(line) if n in wanted and _finite(v) is not None]


@dataclass
class Series:
    """The values of one metric, in the order they were seen."""

    values: list[str] = field(default_factory=list)
    steps: list[int | None] = field(default_factory=list)

    def add(self, text: str, step: int | None = None) -> None:
        """Append a value (a number as text); the oldest go past `MAX_POINTS`."""
        self.values.append(text)
        self.steps.append(step)
        if len(self.values) > MAX_POINTS:
            del self.values[0], self.steps[0]

    def summary(self) -> dict[str, str] | None:
        """`{"min", "max", "latest"}` as strings, or None with no value."""
        nums = [(v, _finite(v)) for v in self.values]
        nums = [(t, x) for t, x in nums if x is not None]
        if not nums:
            return None
        lo = min(nums, key=lambda p: p[1])[0]
        hi = max(nums, key=lambda p: p[1])[0]
        return {"min": lo, "max": hi, "latest": nums[-1][0]}


class MetricLog:
    """Every value of the wanted metrics one trial printed or reported."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(dict.fromkeys(names))
        self.series: dict[str, Series] = {}
        self._status_seen: dict[str, str] = {}
        self._from_logs: set[str] = set()

    def feed_line(self, line: str) -> None:
        """Read one log line (a `name=value` line or a report line)."""
        step = None
        if REPORT_PREFIX in line:
            record = parse_report(line)
            if record is not None and isinstance(record.get("step"), int):
                step = record["step"]
        for name, text in line_metrics(line, self.names):
            if name not in self._from_logs:
                # its first line: the samples of trainerStatus taken so far are the same
                # values (report() prints and posts), so the log's series replaces them
                self.series.pop(name, None)
                self._from_logs.add(name)
            self.series.setdefault(name, Series()).add(text, step)

    def feed_status(self, metrics: Mapping[str, Any] | None) -> None:
        """A sample of the job's trainerStatus metrics: a value that changed is appended
        (for a metric no log line carries; `report()` prints and posts the same values)."""
        for name, value in (metrics or {}).items():
            if name not in self.names or name in self._from_logs:
                continue
            text = str(value)
            if _finite(text) is None or self._status_seen.get(name) == text:
                continue
            self._status_seen[name] = text
            self.series.setdefault(name, Series()).add(text)

    def summaries(self) -> dict[str, dict[str, str]]:
        """`{name: {"min", "max", "latest"}}` for every metric with a value, in `names` order."""
        out = {}
        for name in self.names:
            s = self.series.get(name)
            summary = s.summary() if s else None
            if summary:
                out[name] = summary
        return out

    def history(self) -> dict[str, dict[str, list[Any]]]:
        """`{name: {"values": [...], "steps": [...]}}`: each metric's curve."""
        return {
            n: {"values": list(s.values), "steps": list(s.steps)} for n, s in self.series.items()
        }


def objective_value(summary: Mapping[str, str] | None, direction: str) -> float | None:
    """The trial's objective: its best value over the run (`min` when minimizing, `max` when
    maximizing), as Katib's default metric strategy for the objective does; None without one."""
    if not summary:
        return None
    return _finite(summary["min" if direction == MINIMIZE else "max"])


def best_index(values: list[float | None], direction: str) -> int | None:
    """The index of the best objective value (the first of equals), or None."""
    best = None
    for i, v in enumerate(values):
        if v is None:
            continue
        if best is None:
            best = i
            continue
        cur = values[best]
        assert cur is not None
        if (v < cur) if direction == MINIMIZE else (v > cur):
            best = i
    return best
