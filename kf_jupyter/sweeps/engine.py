"""The trial engine: run a sweep's trials as jobs through any `TrainerClient` backend.

Backend-neutral: it only calls the client's `train`, `get_job`, `iter_log_records` and a
cancel (the local backend's `cancel_job`, else `delete_job`), and writes the sweep's record
through a `SweepStore` (the local backend keeps it in a file under the state directory; another
backend can keep it elsewhere). The loop:

1. the search space becomes the trials' parameter values (`space.assignments`, strings);
2. at most `parallel_trials` trials run at once (and, where a CPU budget is given, no more than
   its processes fit; one trial always runs). Each trial is the template's job with the
   parameters as the function's keyword arguments (strings, as Katib substitutes them into the
   SDK's trial; added to the template's own `func_args`) and as `KUBEFLOW_TRAINER_OPT_<NAME>`
   environment variables (what the Trainer's OptimizationJob injects; a script or command reads
   those). The job is named `<sweep>-trial-<n>` and labelled with the sweep and `n`;
3. while a trial runs its `trainerStatus` metrics are sampled; when it ends its logs are read for
   `name=value` lines and report lines (`metrics.MetricLog`). A trial that ends `Complete` with
   its objective metric is `Succeeded`, without it `MetricsUnavailable` (Katib's word); a failed
   job (or one that could not be submitted) is `Failed`, recorded, and the sweep goes on;
4. the sweep ends `Complete` when every trial has ended and one succeeded; `Failed` when none
   did, when more than `max_failed_trials` failed (the running ones are cancelled), or when it is
   cancelled (reason `Cancelled`; running trials are cancelled, finished ones kept).

The best trial is the succeeded trial with the best objective value (its `min` when minimizing,
`max` when maximizing: Katib's default metric strategy), the first of equals.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from ..config import RuntimeConfig
from ..constants import SWEEP_LABEL, SWEEP_PARAM_ANNOTATION_PREFIX, SWEEP_TRIAL_LABEL
from ..errors import KFJupyterError
from ..script import fill_parameters
from ..types import COMPLETE, TERMINAL
from . import metrics as mx
from .space import Param, assignments, env_name

# Sweep statuses (the SDK's OptimizationJob statuses).
CREATED = "Created"
RUNNING = "Running"
COMPLETE_SWEEP = "Complete"
FAILED = "Failed"
SWEEP_TERMINAL = frozenset({COMPLETE_SWEEP, FAILED})

# Trial statuses.
PENDING = "Pending"
TRIAL_RUNNING = "Running"
SUCCEEDED = "Succeeded"
TRIAL_FAILED = "Failed"
METRICS_UNAVAILABLE = "MetricsUnavailable"
CANCELLED = "Cancelled"
TRIAL_DONE = frozenset({SUCCEEDED, TRIAL_FAILED, METRICS_UNAVAILABLE, CANCELLED})

# Sweep reasons.
REASON_CANCELLED = "Cancelled"
REASON_MAX_FAILED = "MaxFailedTrialsReached"
REASON_NONE_SUCCEEDED = "NoTrialSucceeded"
REASON_DONE = "TrialsCompleted"

#: Log sources read for metrics: global rank 0, the first node's launcher, an MPI launcher (the
#: cluster's node-0 container, which Katib's collector reads). Other sources only when these
#: printed none of the objective metrics.
PRIMARY_SOURCES = frozenset({"rank-0", "node-0", "launcher"})

MAX_EVENTS = 200

#: A running trial's log is read for metrics at most this often, and only while it has fewer
#: than LIVE_MAX_RECORDS lines (it is re-read whole each time; the end reads it once more).
LIVE_READ_SECONDS = 1.0
LIVE_MAX_RECORDS = 20_000


def now_iso() -> str:
    """The time now, ISO 8601 in UTC."""
    return datetime.now(UTC).isoformat()


@dataclass
class SweepSpec:
    """What a sweep runs: its parameters, objectives, algorithm and trial limits."""

    name: str
    params: list[Param]
    #: (metric, direction) pairs; the first is the objective, the others are only recorded.
    objectives: list[tuple[str, str]] = field(default_factory=lambda: [("loss", mx.MINIMIZE)])
    algorithm: str = "random"
    seed: int | None = None
    num_trials: int = 10
    parallel_trials: int = 1
    max_failed_trials: int | None = None

    def __post_init__(self) -> None:
        from ..errors import ValidationError

        for what in ("num_trials", "parallel_trials"):
            v = getattr(self, what)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValidationError(f"TrialConfig.{what} must be a whole number ≥ 1, got {v!r}.")
        m = self.max_failed_trials
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 0):
            raise ValidationError(
                f"TrialConfig.max_failed_trials must be None or a whole number ≥ 0, got {m!r}."
            )
        if not self.objectives:
            raise ValidationError("objectives must name at least one metric.")

    @property
    def metric_names(self) -> list[str]:
        """Every objective's metric name, the objective first."""
        return [m for m, _ in self.objectives]

    @property
    def direction(self) -> str:
        """`minimize` or `maximize` (the first objective's)."""
        return self.objectives[0][1]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "params": [p.to_dict() for p in self.params],
            "objectives": [{"metric": m, "direction": d} for m, d in self.objectives],
            "algorithm": self.algorithm,
            "seed": self.seed,
            "num_trials": self.num_trials,
            "parallel_trials": self.parallel_trials,
            "max_failed_trials": self.max_failed_trials,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepSpec:
        """The inverse of `to_dict`."""
        return cls(
            name=d["name"],
            params=[Param.from_dict(p) for p in d["params"]],
            objectives=[(o["metric"], o["direction"]) for o in d["objectives"]],
            algorithm=d.get("algorithm", "random"),
            seed=d.get("seed"),
            num_trials=int(d["num_trials"]),
            parallel_trials=int(d["parallel_trials"]),
            max_failed_trials=d.get("max_failed_trials"),
        )


def trial_name(sweep: str, index: int) -> str:
    """The job name of trial `index` (1-based): `<sweep>-trial-<index>`, as the Trainer's
    OptimizationJob names its trial TrainJobs."""
    return f"{sweep}-trial-{index}"


def _cpu_quantity(value: Any) -> float:
    text = str(value)
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return 0.0


def trial_cpus(trainer: Any) -> int:
    """The CPUs one trial takes: nodes × max(processes per node, the CPU request rounded up)."""
    nodes = getattr(trainer, "num_nodes", None) or 1
    procs = getattr(trainer, "num_proc_per_node", None) or 1
    cpu = 0.0
    with contextlib.suppress(Exception):
        cpu = _cpu_quantity(trainer.resources().get("cpu", 0))
    per_node = max(int(procs) if isinstance(procs, int) else 1, math.ceil(cpu), 1)
    return int(nodes) * per_node


@dataclass
class TrialTemplate:
    """The job every trial runs (kf-jupyter's own trainer, runtime, RuntimeConfig, options)."""

    trainer: Any
    runtime: Any = None
    runtime_config: RuntimeConfig | None = None
    options: list[Any] = field(default_factory=list)

    def for_trial(
        self, sweep: str, index: int, params: dict[str, str]
    ) -> tuple[Any, Any, RuntimeConfig, list[Any]]:
        """`(trainer, runtime, runtime_config, options)` of trial `index` with `params`."""
        from ..options import Annotations, Labels, Name

        trainer = copy.copy(self.trainer)
        if getattr(trainer, "func", None) is not None:
            trainer.func_args = {**(trainer.func_args or {}), **params}
        if getattr(trainer, "script_args", None):  # Katib's ${trialParameters.NAME} in argv
            trainer.script_args = fill_parameters(trainer.script_args, params)
        rc = copy.copy(self.runtime_config) if self.runtime_config else RuntimeConfig()
        rc.env = {**(rc.env or {}), **{env_name(k): v for k, v in params.items()}}
        opts = [o for o in self.options if not isinstance(o, Name)]
        opts += [
            Name(trial_name(sweep, index)),
            Labels({SWEEP_LABEL: sweep, SWEEP_TRIAL_LABEL: str(index)}),
            Annotations({SWEEP_PARAM_ANNOTATION_PREFIX + k: v for k, v in params.items()}),
        ]
        return trainer, self.runtime, rc, opts


class SweepStore(Protocol):
    """Where the engine keeps the sweep's record, and how it learns of a cancel."""

    def save(self, record: dict[str, Any]) -> None:
        """Replace the stored record."""

    def cancel_requested(self) -> bool:
        """True once someone asked to cancel the sweep."""


class MemoryStore:
    """A record kept in memory (tests, or a front end that runs the engine itself)."""

    def __init__(self) -> None:
        self.record: dict[str, Any] = {}
        self.cancelled = False

    def save(self, record: dict[str, Any]) -> None:
        """Keep a copy."""
        self.record = copy.deepcopy(record)

    def cancel_requested(self) -> bool:
        """`cancelled`."""
        return self.cancelled


def run_to_end(engine: SweepEngine, store: SweepStore) -> None:
    """A driver's run of `engine`: if the driver itself fails, the sweep's record says so
    (Failed, reason DriverFailed, the error) before the error goes on to the driver's log."""
    try:
        engine.run()
    except BaseException as exc:
        with contextlib.suppress(Exception):
            engine.record.update(
                status=FAILED,
                reason="DriverFailed",
                message=f"The sweep's driver failed: {type(exc).__name__}: {exc}",
                finished=now_iso(),
            )
            store.save(engine.record)
        raise


def new_record(spec: SweepSpec, backend: str, extra: dict[str, Any] | None = None) -> dict:
    """The record of a sweep not started yet: every trial `Pending`."""
    trials = [
        {
            "index": i,
            "name": trial_name(spec.name, i),
            "parameters": params,
            "status": PENDING,
            "job_status": "",
            "reason": "",
            "message": "",
            "metrics": {},
            "history": {},
            "objective": None,
            "submitted": None,
            "finished": None,
        }
        for i, params in enumerate(
            assignments(spec.params, spec.algorithm, spec.num_trials, spec.seed), start=1
        )
    ]
    return {
        "kind": "kf-jupyter-sweep",
        "version": 1,
        "name": spec.name,
        "backend": backend,
        "created": now_iso(),
        "finished": None,
        "spec": spec.to_dict(),
        "status": CREATED,
        "reason": "",
        "message": "",
        "parallel": spec.parallel_trials,
        "best_trial": None,
        "trials": trials,
        "events": [],
        **(extra or {}),
    }


def best_trial(record: dict[str, Any]) -> dict[str, Any] | None:
    """The succeeded trial with the best objective (see the module docstring), or None."""
    direction = record["spec"]["objectives"][0]["direction"]
    done = [t for t in record["trials"] if t["status"] == SUCCEEDED]
    i = mx.best_index([t.get("objective") for t in done], direction)
    return None if i is None else done[i]


class SweepEngine:
    """Runs one sweep to its end (see the module docstring). `run()` blocks until then.

    `client`: a kf-jupyter `TrainerClient` (any backend). `cpu_budget`: at most this many
    processes of trials at once (None: no limit beyond `parallel_trials`). `cancel_trial`:
    how to stop a running trial's job (default: the backend's `cancel_job`, else `delete_job`).
    """

    def __init__(
        self,
        client: Any,
        spec: SweepSpec,
        template: TrialTemplate,
        store: SweepStore,
        *,
        record: dict[str, Any] | None = None,
        cpu_budget: int | None = None,
        poll_seconds: float = 0.2,
        cancel_trial: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.spec = spec
        self.template = template
        self.store = store
        self.record = record or new_record(spec, getattr(client, "backend_name", ""))
        self.cpu_budget = cpu_budget
        self.poll_seconds = poll_seconds
        self._cancel_trial = cancel_trial
        self._logs: dict[str, mx.MetricLog] = {}
        self._seen: dict[tuple[str, str], int] = {}
        self._live_at: dict[str, float] = {}
        self._live_off: set[str] = set()
        self.cost = trial_cpus(template.trainer)

    # -- record -----------------------------------------------------------------------------

    def event(self, reason: str, message: str) -> None:
        """Add an event to the sweep's record."""
        events = self.record.setdefault("events", [])
        events.append({"time": now_iso(), "reason": reason, "message": message})
        del events[:-MAX_EVENTS]

    def save(self) -> None:
        """Write the record (with the current best trial)."""
        best = best_trial(self.record)
        self.record["best_trial"] = best["name"] if best else None
        self.record["updated"] = now_iso()
        self.store.save(self.record)

    def _trials(self, *status: str) -> list[dict[str, Any]]:
        return [t for t in self.record["trials"] if t["status"] in status]

    # -- the loop ---------------------------------------------------------------------------

    def parallel(self) -> int:
        """How many trials run at once: `parallel_trials`, fewer if the CPU budget says so."""
        n = self.spec.parallel_trials
        if self.cpu_budget is not None:
            n = min(n, max(1, self.cpu_budget // max(self.cost, 1)))
        return n

    def run(self) -> dict[str, Any]:
        """Run every trial; return the final record."""
        n = self.parallel()
        self.record["parallel"] = n
        if n < self.spec.parallel_trials:
            self.event(
                "ParallelismLimited",
                f"parallel_trials={self.spec.parallel_trials}, but each trial takes {self.cost} "
                f"CPU(s) and {self.cpu_budget} are available: {n} trial(s) run at once.",
            )
        self.save()
        while True:
            if self.store.cancel_requested():
                self._finish(FAILED, REASON_CANCELLED, "The sweep was cancelled.", cancel=True)
                break
            changed = self._poll()
            limit = self.spec.max_failed_trials
            failed = len(self._trials(TRIAL_FAILED))
            if limit is not None and failed > limit:
                self._finish(
                    FAILED,
                    REASON_MAX_FAILED,
                    f"{failed} trials failed, more than max_failed_trials={limit}.",
                    cancel=True,
                )
                break
            while len(self._trials(TRIAL_RUNNING)) < n and self._trials(PENDING):
                self._submit(self._trials(PENDING)[0])
                changed = True
            if not self._trials(PENDING, TRIAL_RUNNING):
                self._conclude()
                break
            if changed:
                self.save()
            time.sleep(self.poll_seconds)
        return self.record

    def _submit(self, trial: dict[str, Any]) -> None:
        trainer, runtime, rc, opts = self.template.for_trial(
            self.spec.name, trial["index"], trial["parameters"]
        )
        trial["submitted"] = now_iso()
        if self.record["status"] == CREATED:
            self.record["status"] = RUNNING
        try:
            name = self.client.train(trainer, runtime=runtime, runtime_config=rc, options=opts)
        except Exception as exc:  # the trial fails; the sweep goes on
            trial.update(
                status=TRIAL_FAILED,
                reason="SubmitFailed",
                message=_first_paragraph(exc),
                finished=now_iso(),
            )
            self.event("TrialFailed", f"{trial['name']} could not be submitted: {trial['message']}")
            return
        trial.update(name=name, status=TRIAL_RUNNING, job_status="Created")
        self._logs[name] = mx.MetricLog(self.spec.metric_names)
        params = ", ".join(f"{k}={v}" for k, v in trial["parameters"].items())
        self.event("TrialCreated", f"{name} started ({params})")

    def _poll(self) -> bool:
        changed = False
        for trial in self._trials(TRIAL_RUNNING):
            name = trial["name"]
            try:
                job = self.client.get_job(name)
            except KFJupyterError as exc:  # deleted under us
                trial.update(
                    status=TRIAL_FAILED,
                    reason="JobLost",
                    message=_first_paragraph(exc),
                    finished=now_iso(),
                )
                changed = True
                continue
            log = self._logs.setdefault(name, mx.MetricLog(self.spec.metric_names))
            if job.trainer_status is not None:
                log.feed_status(job.trainer_status.metrics)
            if job.status not in TERMINAL and self._live_due(name):
                self._read_new(name, log)
            summaries = log.summaries()
            if job.status != trial["job_status"] or summaries != trial["metrics"]:
                trial["job_status"] = job.status
                trial["metrics"] = summaries
                changed = True
            if job.status in TERMINAL:
                self._collect(trial, job)
                changed = True
        return changed

    def _collect(self, trial: dict[str, Any], job: Any) -> None:
        """The trial's job ended: read its logs for metrics, set its outcome."""
        name = trial["name"]
        log = self._logs.setdefault(name, mx.MetricLog(self.spec.metric_names))
        fed = self._read_logs(name, log)
        if job.trainer_status is not None:
            log.feed_status(job.trainer_status.metrics)
        summaries = log.summaries()
        trial["metrics"] = summaries
        trial["history"] = log.history()
        trial["job_status"] = job.status
        trial["finished"] = now_iso()
        objective = self.spec.metric_names[0]
        value = mx.objective_value(summaries.get(objective), self.spec.direction)
        trial["objective"] = value
        if job.status == COMPLETE:
            if value is None:
                trial["status"] = METRICS_UNAVAILABLE
                trial["reason"] = METRICS_UNAVAILABLE
                trial["message"] = (
                    f"The trial completed without reporting {objective!r}: print "
                    f"'{objective}=<value>' or call kf_jupyter.report({objective}=...)."
                    + ("" if fed else " Its logs could not be read.")
                )
            else:
                trial["status"] = SUCCEEDED
                trial["reason"] = "Succeeded"
            self.event(trial["status"], f"{name}: {objective}={_show(value)}")
        elif job.reason == CANCELLED:  # cancelled (by the sweep, or by hand): not a failure
            trial["status"] = CANCELLED
            trial["reason"] = CANCELLED
            trial["message"] = "cancelled while it ran"
        else:
            trial["status"] = TRIAL_FAILED
            trial["reason"] = job.reason or "Failed"
            headline = job.failure.headline() if getattr(job, "failure", None) else ""
            lines = (job.message or "").splitlines()
            trial["message"] = headline or (lines[0] if lines else "")
            self.event("TrialFailed", f"{name} failed: {trial['message']}")
        self._logs.pop(name, None)
        self._live_at.pop(name, None)
        self._live_off.discard(name)

    def _live_due(self, name: str) -> bool:
        """Read a running trial's new log lines at most once a second, while its log is
        short enough to re-read (the views get its curve while it runs)."""
        if name in self._live_off:
            return False
        now = time.monotonic()
        if now - self._live_at.get(name, 0.0) < LIVE_READ_SECONDS:
            return False
        self._live_at[name] = now
        return True

    def _read_new(self, name: str, log: mx.MetricLog) -> bool:
        """Feed the primary sources' lines not read yet (counted per source), streaming the
        log (never all of it in memory); False when it could not be read."""
        seen: dict[str, int] = {}
        total = 0
        try:
            for r in self.client.iter_log_records(name):
                total += 1
                if r.source not in PRIMARY_SOURCES:
                    continue
                n = seen[r.source] = seen.get(r.source, 0) + 1
                if n > self._seen.get((name, r.source), 0):
                    log.feed_line(r.line)
        except Exception:
            return False
        finally:
            for source, n in seen.items():
                self._seen[(name, source)] = max(n, self._seen.get((name, source), 0))
        if total > LIVE_MAX_RECORDS:
            self._live_off.add(name)  # the end reads it once more, whole
        return True

    def _read_logs(self, name: str, log: mx.MetricLog) -> bool:
        if not self._read_new(name, log):
            return False
        if not log.summaries():  # rank 0 printed none: the other ranks' lines (read again)
            with contextlib.suppress(Exception):
                for r in self.client.iter_log_records(name):
                    if r.source not in PRIMARY_SOURCES:
                        log.feed_line(r.line)
        return True

    def _cancel(self, name: str) -> None:
        if self._cancel_trial is not None:
            self._cancel_trial(name)
            return
        cancel = getattr(getattr(self.client, "backend", None), "cancel_job", None)
        (cancel if callable(cancel) else self.client.delete_job)(name)

    def _finish(self, status: str, reason: str, message: str, cancel: bool = False) -> None:
        if cancel:
            for trial in self._trials(TRIAL_RUNNING):
                with contextlib.suppress(Exception):
                    self._cancel(trial["name"])
            self._poll()  # what ended meanwhile is recorded with its metrics
            for trial in self._trials(TRIAL_RUNNING):
                trial.update(status=CANCELLED, reason=CANCELLED, finished=now_iso())
                with contextlib.suppress(Exception):
                    trial["job_status"] = self.client.get_job(trial["name"]).status
            for trial in self._trials(PENDING):
                trial.update(status=CANCELLED, reason=CANCELLED, message="never started")
        self.record.update(status=status, reason=reason, message=message, finished=now_iso())
        self.event(reason, message)
        self.save()

    def _conclude(self) -> None:
        metric = self.spec.metric_names[0]
        said = outcome(self.record["trials"], metric)
        best = best_trial(self.record)
        if best is not None:
            msg = f"{said}; best {best['name']} with {metric}={_show(best['objective'])}."
            self._finish(COMPLETE_SWEEP, REASON_DONE, msg)
        else:
            self._finish(FAILED, REASON_NONE_SUCCEEDED, f"{said}.")


def outcome(trials: list[dict[str, Any]], metric: str) -> str:
    """How the ended trials ended, in words (no final period): "3 of 10 trials succeeded (2
    failed, 5 reported no 'loss')", "No trial succeeded: all 10 trials failed", "No trial
    succeeded: of 10 trials, 3 failed and 7 reported no 'accuracy' (...how to report it)"."""
    n = len(trials)

    def count(status: str) -> int:
        return sum(1 for t in trials if t["status"] == status)

    ok, unreported, cancelled = count(SUCCEEDED), count(METRICS_UNAVAILABLE), count(CANCELLED)
    ways = [
        (count(TRIAL_FAILED), "failed"),
        (unreported, f"reported no {metric!r}"),
        (cancelled, "was cancelled" if cancelled == 1 else "were cancelled"),
    ]
    parts = [(k, w) for k, w in ways if k]
    listed = " and ".join(", ".join(f"{k} {w}" for k, w in parts).rsplit(", ", 1))
    hint = (
        f" (a trial reports it by printing {metric}=VALUE or calling "
        f"kf_jupyter.report({metric}=...))"
        if unreported and not ok
        else ""
    )
    if ok:
        return f"{ok} of {n} trials succeeded" + (f" ({listed})" if parts else "")
    if len(parts) == 1:
        way = parts[0][1]
        who = {1: "the one trial", 2: "both trials"}.get(n, f"all {n} trials")
        return f"No trial succeeded: {who} {way}{hint}"
    return f"No trial succeeded: of {n} trials, {listed}{hint}"


def _show(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _first_paragraph(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.split("\n\n")[0][:1000]


def trials_of(record: dict[str, Any], status: Iterable[str]) -> list[dict[str, Any]]:
    """The record's trials with one of `status`."""
    wanted = set(status)
    return [t for t in record["trials"] if t["status"] in wanted]
