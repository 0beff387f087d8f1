"""Reading a training magic's sweep flags (pure, no I/O): `--sweep 'lr=loguniform(1e-4,1e-1)'`
(repeatable), `--trials N`, `--parallel P`, `--objective loss:min`, `--algorithm random|grid`,
`--seed S`. Every mistake is one paragraph saying what to write instead (docs/notebook.md,
"Sweeps")."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError

_EXAMPLE = (
    "for example --sweep 'lr=loguniform(1e-4,1e-1)', --sweep 'dropout=uniform(0,0.5)' or "
    "--sweep 'batch=choice(16,32,64)'"
)
_PARAM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([A-Za-z_]+)\s*\((.*)\)\s*$", re.S)
_DISTRIBUTIONS = ("uniform", "loguniform", "choice")
#: Default number of trials of a random search (the Kubeflow SDK's TrialConfig default).
DEFAULT_TRIALS = 10
MINIMIZE = "minimize"
MAXIMIZE = "maximize"
_DIRECTIONS = {"min": MINIMIZE, "minimize": MINIMIZE, "max": MAXIMIZE, "maximize": MAXIMIZE}


@dataclass
class SweepParam:
    """One parameter: `kind` uniform / loguniform (`values` = [min, max]) or choice."""

    name: str
    kind: str
    values: list[Any] = field(default_factory=list)

    def text(self) -> str:
        """As the user wrote it (normalized), e.g. `loguniform(0.0001, 0.1)`."""
        return f"{self.kind}({', '.join(str(v) for v in self.values)})"


@dataclass
class SweepPlan:
    """What the sweep flags ask for."""

    params: list[SweepParam]
    trials: int | None
    parallel: int
    metric: str
    direction: str
    algorithm: str
    seed: int | None

    @property
    def names(self) -> tuple[str, ...]:
        """The parameter names (the cell function's sweep arguments), in order."""
        return tuple(p.name for p in self.params)


def _number(text: str, param: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValidationError(
            f"--sweep {param}: the {what} {text.strip()!r} is not a number; write numbers such "
            f"as 1e-4 or 0.5, {_EXAMPLE}."
        ) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValidationError(f"--sweep {param}: the {what} must be a finite number.")
    return value


def _choice_value(text: str) -> Any:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def parse_param(text: str) -> SweepParam:
    """One `--sweep` value: `NAME=uniform(MIN,MAX)`, `NAME=loguniform(MIN,MAX)` or
    `NAME=choice(A,B,...)`."""
    m = _PARAM.match(text)
    if not m:
        raise ValidationError(
            f"--sweep {text!r} is not NAME=DISTRIBUTION(VALUES): {_EXAMPLE}. The name becomes an "
            "argument of the cell (a Python identifier); quote the whole value."
        )
    name, kind, inner = m.group(1), m.group(2).lower(), m.group(3)
    if kind not in _DISTRIBUTIONS:
        raise ValidationError(
            f"--sweep {name}: unknown distribution {m.group(2)!r}; use uniform(MIN,MAX), "
            f"loguniform(MIN,MAX) or choice(A,B,...), {_EXAMPLE}."
        )
    parts = [p for p in inner.split(",")]
    if kind == "choice":
        values = [_choice_value(p) for p in parts if p.strip()]
        if not values:
            raise ValidationError(
                f"--sweep {name}=choice(): give at least one value, e.g. {name}=choice(16,32)."
            )
        if len({str(v) for v in values}) != len(values):
            raise ValidationError(f"--sweep {name}: choice() lists a value twice; list each once.")
        return SweepParam(name, kind, values)
    if len(parts) != 2:
        raise ValidationError(
            f"--sweep {name}={kind}(...) takes two numbers, the minimum and the maximum, e.g. "
            f"{name}={kind}(1e-4,1e-1); got {len(parts)} value(s)."
        )
    lo, hi = (_number(p, name, w) for p, w in zip(parts, ("minimum", "maximum"), strict=True))
    if not lo < hi:
        raise ValidationError(
            f"--sweep {name}: the minimum ({lo:g}) must be below the maximum ({hi:g})."
        )
    if kind == "loguniform" and lo <= 0:
        raise ValidationError(
            f"--sweep {name}=loguniform(...) needs a minimum above 0 (got {lo:g}): a log scale "
            "cannot reach 0. Use uniform(...) for a range that includes 0."
        )
    return SweepParam(name, kind, [lo, hi])


def parse_objective(text: str | None) -> tuple[str, str]:
    """`loss:min` -> ("loss", "minimize"); `accuracy:max`; a bare name minimizes."""
    if not text:
        return "loss", MINIMIZE
    metric, _, way = text.partition(":")
    metric = metric.strip()
    if not re.fullmatch(r"[\w.-]+", metric or ""):
        raise ValidationError(
            f"--objective {text!r}: write METRIC:min or METRIC:max, e.g. --objective loss:min or "
            "--objective accuracy:max (the metric the trials report with report() or print as "
            "name=value)."
        )
    direction = _DIRECTIONS.get(way.strip().lower() or "min")
    if direction is None:
        raise ValidationError(
            f"--objective {text!r}: the direction after ':' is min or max (minimize/maximize), "
            f"not {way.strip()!r}."
        )
    return metric, direction


def parse_plan(args: Any, arg_names: tuple[str, ...] = ()) -> SweepPlan | None:
    """The sweep the flags ask for, None without `--sweep` (then the other sweep flags are
    refused: they would silently do nothing)."""
    sweeps = list(getattr(args, "sweep", None) or [])
    extra = [
        flag
        for flag, attr in (
            ("--trials", "trials"),
            ("--parallel", "parallel"),
            ("--objective", "objective"),
            ("--algorithm", "algorithm"),
            ("--seed", "seed"),
        )
        if getattr(args, attr, None) is not None
    ]
    if not sweeps:
        if extra:
            raise ValidationError(
                f"{', '.join(extra)} only apply to a sweep: add the parameters to vary, {_EXAMPLE}."
            )
        return None
    params = [parse_param(s) for s in sweeps]
    names = [p.name for p in params]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValidationError(f"--sweep names {', '.join(dup)} more than once; give each once.")
    clash = sorted(set(names) & set(arg_names))
    if clash:
        raise ValidationError(
            f"{', '.join(clash)} is both swept (--sweep) and passed from the notebook (--args); "
            "drop it from --args: each trial gets its own value."
        )
    algorithm = (getattr(args, "algorithm", None) or "random").lower()
    if algorithm not in ("random", "grid"):
        raise ValidationError(f"--algorithm {algorithm!r}: use random or grid.")
    trials = getattr(args, "trials", None)
    if trials is not None and trials < 1:
        raise ValidationError(f"--trials {trials}: give a whole number of 1 or more.")
    parallel = getattr(args, "parallel", None)
    if parallel is not None and parallel < 1:
        raise ValidationError(f"--parallel {parallel}: give a whole number of 1 or more.")
    seed = getattr(args, "seed", None)
    if seed is not None and algorithm == "grid":
        raise ValidationError("--seed applies to random search; a grid has no randomness.")
    metric, direction = parse_objective(getattr(args, "objective", None))
    return SweepPlan(
        params=params,
        trials=trials,
        parallel=parallel or 1,
        metric=metric,
        direction=direction,
        algorithm=algorithm,
        seed=seed,
    )


@dataclass
class TrialArgv:
    """Every trial's `sys.argv[1:]` as a template (`${trialParameters.NAME}` where a trial's
    value goes, Katib's placeholder) and the swept names the program seems not to read."""

    args: list[str]
    unread: list[str]


def _string_constants(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def _read_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def trial_argv(
    source: str, user_args: list[str], names: tuple[str, ...], function: bool = True
) -> TrialArgv:
    """Each trial's arguments: the ones after ` -- `, then `--NAME=<value>` for each swept name
    whose option the program defines (`"--NAME"` or `"--NA-ME"` is a string in its source, as
    argparse's `add_argument` has it) and that the arguments do not place themselves with
    `${trialParameters.NAME}` (docs/sweeps.md, "Arguments"). `function`: the program is the
    cell's function, whose parameters are the swept names (it reads them by name)."""
    used = set(re.findall(r"\$\{trialParameters\.([^}]*)\}", " ".join(user_args)))
    unknown = sorted(used - set(names))
    if unknown:
        raise ValidationError(
            f"The arguments after ' -- ' use ${{trialParameters.{unknown[0]}}}, and "
            f"{unknown[0]!r} is not swept. Sweep it (--sweep '{unknown[0]}=...') or write a "
            f"value; the swept names are {', '.join(names)}."
        )
    strings = _string_constants(source)
    read = _read_names(source) if function else set()
    args, unread = list(user_args), []
    for name in names:
        flags = (f"--{name}", f"--{name.replace('_', '-')}")
        if name in used:
            continue
        given = [a for a in user_args if a in flags or a.startswith(tuple(f + "=" for f in flags))]
        if given:
            raise ValidationError(
                f"{given[0].split('=')[0]} is both swept (--sweep {name}=...) and given after "
                f"' -- '; drop it after ' -- ': each trial gets its own value as "
                f"{given[0].split('=')[0]}=VALUE (or place it yourself with "
                f"--{name}=${{trialParameters.{name}}})."
            )
        flag = next((f for f in flags[::-1] if f in strings), None)
        if flag is not None:
            args.append(f"{flag}=${{trialParameters.{name}}}")
        elif name not in read and f"KUBEFLOW_TRAINER_OPT_{name.upper()}" not in source:
            unread.append(name)
    return TrialArgv(args, unread)
