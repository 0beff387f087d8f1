"""Sweeps from a notebook: `%%torchtrain --sweep ...` (and the other training magics), and the
line magics `%kf_sweeps`, `%kf_sweep NAME` and `%kf_sweep_delete NAME` (docs/notebook.md,
"Sweeps").

A sweep runs through `kf_jupyter.sdk.optimizer.OptimizerClient` on the backend the magic
targets: the cell becomes a function whose arguments are the swept parameters (strings, as the
Kubeflow SDK passes them) plus `--args`; each trial reports the objective with
`kf_jupyter.report(...)` or by printing `name=value`. The cell follows the sweep with one live
view (kf_jupyter.widgets.sweep): the kernel refreshes the trial list as trials start and end,
and, in JupyterLab, the lab extension follows every trial's job over the page's one socket.
When the sweep ends the view is replaced by its static rendering with every trial's curve.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from typing import Any

from IPython.core import magic_arguments as ma
from IPython.core.magic import Magics, line_magic, magics_class

from ..errors import ValidationError
from .cell import CELL_ARGV0
from .sweepargs import DEFAULT_TRIALS, MINIMIZE, SweepPlan, trial_argv

#: How often the kernel re-reads the sweep while a cell follows it (seconds).
POLL_S = 1.0
#: The optimizer's trial statuses as the job statuses the views show.
_TRIAL_STATUS = {
    "Succeeded": "Complete",
    "MetricsUnavailable": "Complete",
    "Failed": "Failed",
    "Cancelled": "Cancelled",
    "Running": "Running",
    "Created": "Created",
    "Pending": "Created",
}
_ENDED = frozenset({"Complete", "Failed"})


def default_runtime(framework: str) -> str:
    """The runtime a trial of this magic runs on when --runtime is not given."""
    return {
        "torch": "torch-distributed",
        "mpi": "deepspeed-distributed",
        "jax": "jax-distributed",
        "xgboost": "xgboost-distributed",
    }.get(framework, "torch-distributed")


def num_trials(plan: SweepPlan) -> int:
    """--trials, else the whole grid of choice() parameters, else the SDK's default (10)."""
    if plan.trials is not None:
        return plan.trials
    if plan.algorithm == "grid" and all(p.kind == "choice" for p in plan.params):
        return math.prod(len(p.values) for p in plan.params)
    return DEFAULT_TRIALS


def search_space(plan: SweepPlan) -> dict[str, Any]:
    """The SDK search space (`Search.uniform / loguniform / choice`) of the plan."""
    from ..sdk.optimizer import Search

    space: dict[str, Any] = {}
    for p in plan.params:
        if p.kind == "choice":
            space[p.name] = Search.choice(list(p.values))
        elif p.kind == "loguniform":
            space[p.name] = Search.loguniform(p.values[0], p.values[1])
        else:
            space[p.name] = Search.uniform(p.values[0], p.values[1])
    return space


def planned_trials(plan: SweepPlan, seed: int | None) -> list[dict[str, str]]:
    """The parameters of each trial the optimizer will run (its own expansion: same seed, same
    trials)."""
    from ..sweeps.space import assignments, parse_space

    return assignments(parse_space(search_space(plan)), plan.algorithm, num_trials(plan), seed)


def trial_status(trial: Any) -> str:
    """A trial's status in the views' words (Complete, Failed, Cancelled, Running, Created)."""
    status = str(getattr(trial, "status", "") or "")
    if status in _TRIAL_STATUS:
        return _TRIAL_STATUS[status]
    job = getattr(trial, "trainjob", None)
    return str(getattr(job, "status", "") or "Created")


def trial_objective(trial: Any, metric: str, direction: str) -> float | None:
    """The optimizer's objective value of a trial: its metric's min when minimizing, max when
    maximizing (Katib's default strategy); None when it reported none."""
    for m in getattr(trial, "metrics", None) or []:
        if getattr(m, "name", None) == metric:
            try:
                value = float(m.min if direction == MINIMIZE else m.max)
            except (TypeError, ValueError):
                return None
            return value if math.isfinite(value) else None
    return None


def rows_of(job: Any, metric: str, direction: str, runs: dict[str, Any] | None = None) -> list:
    """The view's rows of an OptimizationJob (with each trial's curves when `runs` has them)."""
    from ..widgets.sweep import TrialRow

    rows = []
    for t in getattr(job, "trials", None) or []:
        name = str(t.trainjob.name if getattr(t, "trainjob", None) is not None else t.name)
        run = (runs or {}).get(name)
        rows.append(
            TrialRow(
                name=str(t.name),
                job=name,
                parameters={k: str(v) for k, v in (t.parameters or {}).items()},
                status=trial_status(t),
                objective=trial_objective(t, metric, direction),
                duration=run.duration if run is not None else None,
                run=run,
            )
        )
    return rows


def _objective_of(job: Any) -> tuple[str, str]:
    objectives = getattr(job, "objectives", None) or []
    if not objectives:
        return "loss", MINIMIZE
    o = objectives[0]
    direction = getattr(o.direction, "value", o.direction)
    return str(o.metric), str(direction)


class SweepFollower:
    """Shows a sweep in the cell and follows it until it ends (or the user interrupts)."""

    def __init__(self, magics: Any, optimizer: Any, trainer_client: Any, backend: str) -> None:
        self.magics = magics
        self.optimizer = optimizer
        self.trainer_client = trainer_client
        self.backend = backend
        self.namespace = getattr(getattr(trainer_client, "backend", None), "namespace", None)

    def _live(self, name: str, job: Any) -> dict[str, Any]:
        from ..widgets.sweep import sweep_live_bundle

        metric, direction = _objective_of(job)
        rows = rows_of(job, metric, direction)
        ns = self.namespace if self.backend == "kubernetes" else None
        return sweep_live_bundle(name, rows, metric, direction, job.status, self.backend, ns)

    def final_bundle(self, name: str, job: Any) -> dict[str, str]:
        """The static view: the table and every trial's curves (read from the trial jobs)."""
        from ..errors import JobNotFoundError
        from ..widgets.compare import read_run
        from ..widgets.sweep import sweep_bundle

        metric, direction = _objective_of(job)
        runs = {}
        for t in job.trials:
            try:
                runs[t.trainjob.name] = read_run(
                    self.trainer_client, t.trainjob.name, str(t.name), stdout_metrics=(metric,)
                )
            except JobNotFoundError:  # deleted by hand: the row stays, without a curve
                continue
        rows = rows_of(job, metric, direction, runs)
        return sweep_bundle(name, rows, metric, direction, job.status, self.backend)

    def follow(self, name: str, wait: bool, timeout: float | None, cancel: bool) -> Any:
        """Display the sweep (live while it runs, static once it ended); with `wait`, block until
        it ends and leave the static view in the cell. Returns the last OptimizationJob."""
        job = self.optimizer.get_job(name)
        widgets = self.magics.use_widgets() or getattr(self.magics.shell, "kernel", None)
        if job.status in _ENDED or not wait:
            if job.status in _ENDED:
                self._show(self.final_bundle(name, job), None)
            else:
                self._show(self._live(name, job), f"kf-jupyter-sweep-{name}")
                if not widgets:
                    print(f"Follow it with %kf_sweep {name}; stop it with %kf_sweep_delete {name}.")
            return job
        shown = self._show(self._live(name, job), f"kf-jupyter-sweep-{name}")
        printed: dict[str, str] = {}
        deadline = time.monotonic() + timeout if timeout else None
        try:
            last = None
            while True:
                job = self.optimizer.get_job(name)
                metric, direction = _objective_of(job)
                rows = rows_of(job, metric, direction)
                stamp = (job.status, [(r.name, r.status, r.objective) for r in rows])
                if stamp != last:
                    last = stamp
                    if shown is not None:
                        shown.update(self._live(name, job), raw=True)
                    else:
                        self._print_changes(rows, printed)
                if job.status in _ENDED:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            raise self._stopped(name, cancel, "Interrupted") from None
        except TimeoutError:
            raise self._stopped(name, False, f"Timed out after {timeout} s") from None
        final = self.final_bundle(name, job)
        if shown is not None:
            shown.update(final, raw=True)
        else:
            print(final["text/plain"])
        return job

    def _stopped(self, name: str, cancel: bool, why: str) -> Exception:
        from .core import _fail

        if cancel:
            self.optimizer.cancel_job(name)
            return _fail(f"{why}: sweep {name} was cancelled (--cancel-on-interrupt).")
        return _fail(
            f"{why}: stopped following sweep {name}, which keeps running. Show it again with "
            f"%kf_sweep {name}, list sweeps with %kf_sweeps, or stop it with "
            f"%kf_sweep {name} --cancel (%kf_sweep_delete {name} also deletes its trials)."
        )

    @staticmethod
    def _print_changes(rows: list[Any], printed: dict[str, str]) -> None:
        for r in rows:
            if printed.get(r.name) != r.status:
                printed[r.name] = r.status
                params = ", ".join(f"{k}={v}" for k, v in r.parameters.items())
                value = "" if r.objective is None else f" objective {r.objective:.4g}"
                print(f"[{r.name}] {r.status} ({params}){value}", flush=True)

    def _show(self, bundle: dict[str, Any], display_id: str | None) -> Any:
        if getattr(self.magics.shell, "kernel", None) is None:
            if display_id is None:
                print(bundle["text/plain"])
            return None
        from IPython.display import display

        if display_id is None:
            display(bundle, raw=True)
            return None
        return display(bundle, raw=True, display_id=display_id)


def optimizer_for(magics: Any, backend: str, namespace: str | None) -> Any:
    """The OptimizerClient of a backend, on the same job store / cluster as the magics' client."""
    from ..sdk.optimizer import OptimizerClient

    if backend == "kubernetes":
        from ..backends.kubernetes.config import KubernetesBackendConfig

        ns = namespace if namespace is not None else magics.namespace
        return OptimizerClient(
            KubernetesBackendConfig(
                namespace=ns, config_file=magics.kubeconfig, context=magics.context
            )
        )
    from ..backends.local.config import LocalBackendConfig

    return OptimizerClient(LocalBackendConfig(**magics.warm_settings()))


def _dry_run(plan: SweepPlan, backend: str, runtime: str, argv: list[str], script: bool) -> None:
    import html
    import random

    seed = plan.seed
    chosen = ""
    if plan.algorithm == "random" and seed is None:
        seed = random.SystemRandom().randrange(1, 10**6)
        chosen = (
            f" These were drawn with seed {seed}; without --seed each run draws new values "
            f"(add --seed {seed} to run exactly these)."
        )
    trials = planned_trials(plan, seed)
    names = list(plan.names)
    way = "minimize" if plan.direction == MINIMIZE else "maximize"
    algo = f"{plan.algorithm} search" + (f", seed {seed}" if plan.algorithm == "random" else "")
    envs = ", ".join("KUBEFLOW_TRAINER_OPT_" + n.upper() for n in names)
    what = (
        f"{argv[0]} with {envs}"
        if script
        else f"the cell with {', '.join(names)} as arguments (strings) and as {envs}"
    )
    argv_text = ""
    if len(argv) > 1:
        argv_text = (
            f"; its sys.argv is {shlex.join(argv)} (each ${{trialParameters.NAME}} the trial's "
            "value)"
        )
    head = (
        f"Sweep (dry run): {len(trials)} trials, {plan.parallel} at a time, {way} "
        f"{plan.metric}, {algo}, on {backend}, runtime {runtime}. Each trial runs {what} in "
        f"its environment{argv_text}." + chosen
    )
    space = "; ".join(f"{p.name}: {p.text()}" for p in plan.params)
    from ..widgets.compare import text_table

    table = text_table(["trial", *names], [[str(i + 1), *t.values()] for i, t in enumerate(trials)])
    text = f"{head}\nSearch space: {space}\n{table}"
    shell = _shell()
    if shell is None or getattr(shell, "kernel", None) is None:
        print(text)
        return
    from IPython.display import display

    cell = "style='padding:2px 8px;text-align:left'"
    rows = "".join(
        f"<tr><td {cell}>{i + 1}</td>"
        + "".join(f"<td {cell}>{html.escape(v)}</td>" for v in t.values())
        + "</tr>"
        for i, t in enumerate(trials)
    )
    heads = "".join(f"<th {cell}>{html.escape(h)}</th>" for h in ["trial", *names])
    display(
        {
            "text/html": f"<div class='kf-sweep-dry-run'><p>{html.escape(head)}</p>"
            f"<p><small>Search space: {html.escape(space)}</small></p>"
            f"<table style='border-collapse:collapse'><thead><tr>{heads}</tr></thead>"
            f"<tbody>{rows}</tbody></table></div>",
            "text/plain": text,
        },
        raw=True,
    )


def _shell() -> Any:
    try:
        from IPython import get_ipython

        return get_ipython()
    except ImportError:  # pragma: no cover - IPython is a dependency of the magics
        return None


_SWEEP_IGNORED = (
    ("--name", "name"),
    ("--no-warm", "no_warm"),
    ("--max-restarts", "max_restarts"),
    ("-p/--num-proc-per-node", "num_proc_per_node"),
    ("--queue", "queue"),
    ("--options", "options"),
)


def run_sweep(magics: Any, framework: str, args: Any, cell: str | None, plan: SweepPlan) -> None:
    """`%%torchtrain --sweep ...` (or `%torchtrain script.py --sweep ...`): start the sweep (or
    show its trials with --dry-run) and follow it in the cell."""
    if framework == "transformers":
        raise ValidationError(
            "%%transformerstrain does not sweep: its cell is a configuration, not a function "
            "of the parameters. Use %%torchtrain with the training code, or the SDK's "
            "OptimizerClient."
        )
    given = [flag for flag, attr in _SWEEP_IGNORED if getattr(args, attr, None)]
    if given:
        raise ValidationError(
            f"{', '.join(given)} cannot be used with --sweep: each trial is a job the optimizer "
            "names and starts itself. Remove it."
        )
    backend = args.backend or magics.backend
    runtime = args.runtime or default_runtime(framework)
    names = tuple(a.strip() for a in (args.args or "").split(",") if a.strip())
    program, source = _program(magics, args, cell, names + plan.names)
    argv = trial_argv(source, list(args.script_args or ()), plan.names, cell is not None)
    _warn_unread(argv.unread, cell is not None)
    program["script_args"] = argv.args or None
    if args.dry_run:
        argv0 = program["script"].name if "script" in program else CELL_ARGV0
        _dry_run(plan, backend, runtime, [argv0, *argv.args], "script" in program)
        return
    from ..sdk import CustomTrainer, TrainJobTemplate
    from ..sdk.optimizer import GridSearch, Objective, RandomSearch, TrialConfig

    rc = magics._runtime_config(args)
    trainer = CustomTrainer(
        func=program.pop("func", _script_stand_in),
        func_args=magics._func_args(names) or None,
        num_nodes=args.num_nodes or magics.num_nodes,
        resources_per_node=_resources(args.resources),
        packages_to_install=list(rc.packages) if rc and rc.packages else None,
        env={k: str(v) for k, v in (rc.env or {}).items()} if rc and rc.env else None,
    )
    if rc and rc.index_urls:
        trainer.pip_index_urls = list(rc.index_urls)
    if args.image or magics.image:
        trainer.image = args.image or magics.image
    optimizer = optimizer_for(magics, backend, args.namespace)
    name = _optimize(
        optimizer,
        TrainJobTemplate(trainer=trainer, runtime=runtime),
        program,
        search_space=search_space(plan),
        trial_config=TrialConfig(num_trials=num_trials(plan), parallel_trials=plan.parallel),
        objectives=[Objective(metric=plan.metric, direction=plan.direction)],
        algorithm=GridSearch() if plan.algorithm == "grid" else RandomSearch(plan.seed),
    )
    if args.out:
        magics.shell.user_ns[args.out] = name
    _follow_started(magics, optimizer, name, backend, args)


def _follow_started(magics: Any, optimizer: Any, name: str, backend: str, args: Any) -> None:
    client = magics.client(backend, args.namespace)
    follower = SweepFollower(magics, optimizer, client, backend)
    timeout = args.timeout if args.timeout is not None else magics.timeout
    cancel = bool(args.cancel_on_interrupt or magics.cancel_on_interrupt)
    if args.no_wait:
        print(f"Started sweep {name}; show it with %kf_sweep {name}.", file=sys.stderr)
    job = follower.follow(name, wait=not args.no_wait, timeout=timeout, cancel=cancel)
    if not args.no_wait and job.status == "Failed":
        from .core import _fail

        why = str(getattr(job, "message", "") or getattr(job, "reason", "") or "").rstrip(". ")
        raise _fail(
            f"Sweep {name} failed: {why}. Its trials are in the table above; logs with "
            "%kf_logs TRIAL."
        )


def _script_stand_in() -> None:
    """The SDK trainer's function while a script sweep's template is converted (`_optimize`
    puts the script in its place)."""


def _program(
    magics: Any, args: Any, cell: str | None, names: tuple[str, ...]
) -> tuple[dict[str, Any], str]:
    """The trials' program ({"func": ...} for a cell, {"script": Script} for the line form's
    file, read now) and its source text."""
    if cell is None:
        from ..script import load_script

        script = load_script(args.script)
        return {"script": script}, script.source
    func = _cell_function(magics, cell, names)
    return {"func": func}, func.__kf_source__


def _optimize(optimizer: Any, template: Any, program: dict[str, Any], **kwargs: Any) -> str:
    """`optimizer.optimize(template, **kwargs)` with the trial template's program completed
    from `program` (the line form's script, every trial's sys.argv[1:]), which the SDK's
    CustomTrainer cannot carry."""
    from ..sdk.optimizer.backends import records
    from ..sweeps.local import new_name

    backend = optimizer.backend
    spec = records.sweep_spec(new_name(), **kwargs)
    tt = records.trial_template(backend.trainer, template)
    if "script" in program:
        tt.trainer.func = None
    for key, value in program.items():
        setattr(tt.trainer, key, value)
    return backend.sweeps.start(spec, tt)


def _warn_unread(unread: list[str], cell: bool) -> None:
    for n in unread:
        way = f"reads {n!r}, " if cell else ""
        print(
            f"kf-jupyter warning: the sweep varies {n}, but the program neither {way}defines an "
            f"option --{n} nor reads KUBEFLOW_TRAINER_OPT_{n.upper()}: every trial may run the "
            f"same. Place it in the arguments after ' -- ' with --{n}=${{trialParameters.{n}}} "
            "if your program reads it another way.",
            file=sys.stderr,
        )


def _cell_function(magics: Any, cell: str, names: tuple[str, ...]) -> Any:
    """The cell as `def kf_train_cell(<--args names>, <swept names>): <cell>`: a sweep always
    runs the cell as a function (its parameters are the arguments), even a cell without a
    top-level `return`, which a plain training cell runs as a script."""
    from .cell import CELL_ARGV0, build_cell_function

    cf = build_cell_function(cell, names)
    magics._warn_free_names(cf)
    try:
        func = magics._make_function(cf.source, cf.name)
    except SyntaxError:  # legal only at module level, e.g. `from x import *`
        raise ValidationError(
            "A sweep runs the cell as a function of its parameters, and this cell only works as "
            "a module (it has `from ... import *` or a `from __future__` import after other "
            "code). Import names explicitly, or put the code in a module and call it."
        ) from None
    func.__kf_argv0__ = CELL_ARGV0
    return func


def _resources(text: str | None) -> dict[str, str] | None:
    from .core import _resources as parse

    return parse(text)


@magics_class
class SweepMagics(Magics):
    """`%kf_sweeps`, `%kf_sweep NAME`, `%kf_sweep_delete NAME`."""

    def __init__(self, shell: Any = None, core: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.core = core

    def _run(self, fn: Any) -> None:
        from ..errors import KFJupyterError
        from .core import _fail

        try:
            fn()
        except KFJupyterError as exc:
            raise _fail(str(exc)) from None
        except RuntimeError as exc:  # the SDK's "not found" / failed-wait errors
            raise _fail(str(exc)) from None

    @ma.magic_arguments()
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @ma.argument("--namespace", default=None, help="Kubernetes namespace")
    @line_magic
    def kf_sweeps(self, line: str) -> None:
        """Table of sweeps: name, status, trials (finished / all), best trial and value."""
        from .core import _parse_args

        args = _parse_args(self.kf_sweeps, line)
        if args is None:
            return None

        def run() -> None:
            from ..widgets.sweep import best_trial

            backend = args.backend or self.core.backend
            jobs = optimizer_for(self.core, backend, args.namespace).list_jobs()
            rows = []
            for job in jobs:
                metric, direction = _objective_of(job)
                trials = rows_of(job, metric, direction)
                best = best_trial(trials, direction)
                done = sum(1 for t in trials if t.status in ("Complete", "Failed", "Cancelled"))
                rows.append(
                    [
                        job.name,
                        job.status,
                        f"{done}/{job.trial_config.num_trials}",
                        f"{metric} ({'min' if direction == MINIMIZE else 'max'})",
                        "" if best is None else f"{best.name}: {best.objective:.4g}",
                    ]
                )
            self.core._table(
                ["name", "status", "trials", "objective", "best"],
                rows,
                "No sweeps yet. Start one with %%torchtrain --sweep 'lr=loguniform(1e-4,1e-1)'.",
            )

        self._run(run)

    @ma.magic_arguments()
    @ma.argument("name")
    @ma.argument("--cancel", action="store_true", help="stop it (finished trials are kept)")
    @ma.argument("--no-wait", action="store_true", help="show it now, do not follow")
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @ma.argument("--namespace", default=None, help="Kubernetes namespace")
    @line_magic
    def kf_sweep(self, line: str) -> None:
        """Show a sweep: while it runs, follow it here (live table and curves) until it ends
        (interrupt to stop following; it keeps running); once ended, its static view.
        --cancel stops it."""
        from .core import _parse_args

        args = _parse_args(self.kf_sweep, line)
        if args is None:
            return None

        def run() -> None:
            backend = args.backend or self.core.backend
            optimizer = optimizer_for(self.core, backend, args.namespace)
            if args.cancel:
                job = optimizer.cancel_job(args.name)
                print(f"Sweep {args.name} is cancelled ({job.status}); finished trials are kept.")
                return
            client = self.core.client(backend, args.namespace)
            follower = SweepFollower(self.core, optimizer, client, backend)
            follower.follow(args.name, wait=not args.no_wait, timeout=None, cancel=False)

        self._run(run)

    @ma.magic_arguments()
    @ma.argument("name")
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @ma.argument("--namespace", default=None, help="Kubernetes namespace")
    @line_magic
    def kf_sweep_delete(self, line: str) -> None:
        """Delete a sweep: stop it if it runs, delete its trials' jobs and its record."""
        from .core import _parse_args

        args = _parse_args(self.kf_sweep_delete, line)
        if args is None:
            return None

        def run() -> None:
            backend = args.backend or self.core.backend
            optimizer_for(self.core, backend, args.namespace).delete_job(args.name)
            print(f"Deleted sweep {args.name} and its trials.")

        self._run(run)
