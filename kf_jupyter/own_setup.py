"""Does the user's code do its own framework set-up? (An AST scan; pure, no imports of frameworks.)

Kubeflow Trainer leaves the XGBoost tracker and communicator, and `jax.distributed.initialize`,
to user code, so real code often does them itself. kf-jupyter's runner does them for code that
does not; for code that does, its built-in step must step aside:

- XGBoost: code that names `RabitTracker`, `CommunicatorContext` or calls `collective.init`
  gets no built-in tracker or communicator (a second tracker on `DMLC_TRACKER_PORT` would fail
  with "Address already in use").
- JAX: code that calls `jax.distributed.initialize` itself gets no eager call; instead the
  runner fills in the arguments it leaves out from the Trainer's `JAX_*` variables (JAX reads
  only the coordinator address by itself), so `initialize()` with or without arguments works.
"""

from __future__ import annotations

import ast
import functools
import re
import shlex
from collections.abc import Iterable
from typing import Any

#: The runner's set-up step names (the SETUP argument of kf_entry.py).
NONE, JAX, JAX_OWN, XGBOOST = "none", "jax", "jax-own", "xgboost"

_XGB_NAMES = frozenset({"RabitTracker", "CommunicatorContext"})


def _dotted(node: ast.AST) -> str:
    """`a.b.c` for an attribute chain on a name, else ''."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _scan(source: str) -> tuple[bool, bool]:
    """(does its own XGBoost collective set-up, calls jax.distributed.initialize)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False, False
    xgb_aliases: set[str] = set()  # names bound to xgboost.collective
    jax_dist: set[str] = set()  # names bound to jax.distributed
    jax_init: set[str] = set()  # names bound to jax.distributed.initialize
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                bound = a.asname or a.name
                if node.module == "xgboost" and a.name == "collective":
                    xgb_aliases.add(bound)
                if node.module == "jax" and a.name == "distributed":
                    jax_dist.add(bound)
                if node.module == "jax.distributed" and a.name == "initialize":
                    jax_init.add(bound)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "xgboost.collective" and a.asname:
                    xgb_aliases.add(a.asname)
                if a.name in ("xgboost", "xgboost.collective") and not a.asname:
                    xgb_aliases.add("xgboost.collective")
                if a.name == "xgboost" and a.asname:
                    xgb_aliases.add(f"{a.asname}.collective")
                if a.name == "jax.distributed" and a.asname:
                    jax_dist.add(a.asname)
    own_xgb = own_jax = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in _XGB_NAMES:
                own_xgb = True
        elif isinstance(node, ast.alias) and node.name.rsplit(".", 1)[-1] in _XGB_NAMES:
            own_xgb = True
        if isinstance(node, ast.Call):
            dotted = _dotted(node.func)
            head, _, last = dotted.rpartition(".")
            if last == "init" and head in xgb_aliases:
                own_xgb = True
            if last == "initialize" and (head in jax_dist or head.endswith("jax.distributed")):
                own_jax = True
            if dotted in jax_init:
                own_jax = True
    return own_xgb, own_jax


def setup_step(step: str, source: str) -> str:
    """The runner's set-up step for this source: `step`, or how it steps aside for own set-up."""
    if step not in (JAX, XGBOOST):
        return step
    own_xgb, own_jax = _scan(source)
    if step == XGBOOST and own_xgb:
        return NONE
    if step == JAX and own_jax:
        return JAX_OWN
    return step


_LIGHTNING_CALLEES = frozenset({"Trainer", "Fabric"})


def _literal(node: ast.expr) -> Any:
    """The value `node` writes as a literal; None for anything computed, and for a bool."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return None if isinstance(value, bool) else value


def _literal_count(node: ast.expr) -> int | None:
    """The number of devices a literal `devices=` / `num_nodes=` value asks for; None if open."""
    value = _literal(node)
    if isinstance(value, list | tuple):
        return len(value) or None
    n = _literal_int(node)
    return n if n is not None and n > 0 else None  # -1: all of them; "auto", "0,1": open


def _imports(tree: ast.AST, packages: frozenset[str]) -> bool:
    """Whether the code imports one of `packages` (or a module of one)."""
    return any(
        (isinstance(n, ast.Import) and any(a.name.split(".")[0] in packages for a in n.names))
        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in packages)
        for n in ast.walk(tree)
    )


def _short_call(source: str, node: ast.AST, fallback: str) -> str:
    """A call as written, on one line, cut at 80 characters (for an error message)."""
    call = " ".join((ast.get_source_segment(source, node) or fallback).split())
    return call if len(call) <= 80 else call[:79] + "\u2026"


@functools.lru_cache(maxsize=64)
def lightning_count_mismatch(source: str, num_nodes: int, procs: int | None) -> str | None:
    """Why Lightning would stop at start: `Trainer(devices=N)` or `Fabric(devices=N)` with a
    literal N other than the job's processes per node (or `num_nodes=` other than its nodes).

    Under torchrun Lightning requires `devices` to equal the processes per node and `num_nodes`
    the nodes, and fails on every rank when they differ; this says so before anything runs.
    None when the code does not import Lightning, or the counts agree or are not literals.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if not _imports(tree, _LIGHTNING):
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _dotted(node.func).rpartition(".")[2]
        if callee not in _LIGHTNING_CALLEES:
            continue
        call = _short_call(source, node, f"{callee}(...)")
        for kw in node.keywords:
            n = _literal_count(kw.value) if kw.arg in ("devices", "num_nodes") else None
            if n is None:
                continue
            if kw.arg == "devices" and procs is not None and n != procs:
                return (
                    f"The code asks Lightning for {n} devices per node ({call}), but the job "
                    f"runs {procs} process{'es' if procs != 1 else ''} per node (-p {procs}, "
                    f"num_proc_per_node={procs}); Lightning would stop on every rank. Make them "
                    f"agree: -p {n}, or devices={procs} (or devices='auto', which takes the "
                    "job's processes). Nothing was submitted."
                )
            if kw.arg == "num_nodes" and n != num_nodes:
                return (
                    f"The code asks Lightning for num_nodes={n} ({call}), but the job has "
                    f"{num_nodes} node{'s' if num_nodes != 1 else ''} (-n {num_nodes}, "
                    f"num_nodes={num_nodes}); Lightning would stop on every rank. Make them "
                    f"agree: -n {n}, or num_nodes={num_nodes} (or leave it out: Lightning reads "
                    "it from the job). Nothing was submitted."
                )
    return None


_LIGHTNING = frozenset({"lightning", "pytorch_lightning", "lightning_fabric"})


# -- Accelerate ------------------------------------------------------------------------------

_ACCELERATE_SIZES = ("dp_replicate_size", "dp_shard_size", "tp_size", "cp_size")  # positional
_SHELL_BREAKS = frozenset({";", "&&", "||", "|", "&", "(", ")"})


def _literal_int(node: ast.expr) -> int | None:
    """A whole number written as a literal (`4`, `"4"`); None for anything computed."""
    value = _literal(node)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _shape_words(num_nodes: int, procs: int) -> str:
    """`1 node × 2 processes = 2 (-n 1 -p 2, num_nodes=1, num_proc_per_node=2)`."""
    return (
        f"{num_nodes} node{'s' if num_nodes != 1 else ''} × {procs} "
        f"process{'es' if procs != 1 else ''} = {num_nodes * procs} (-n {num_nodes} -p {procs}, "
        f"num_nodes={num_nodes}, num_proc_per_node={procs})"
    )


@functools.lru_cache(maxsize=64)
def accelerate_count_mismatch(
    source: str, num_nodes: int, procs: int | None, env: frozenset[str] = frozenset()
) -> str | None:
    """Why Accelerate would go wrong at start, for code that imports `accelerate`:

    - `notebook_launcher(fn, num_processes=N)` with a literal N > 1 other than the job's
      processes per node: inside a job the job's processes are the launch, and the runner
      calls fn in place on each of them (kf_jupyter/entrypoint.py), so N must be -p.
    - `ParallelismConfig(...)` whose literal sizes multiply to other than the job's processes
      in all: Accelerate stops on every rank ("total_size ... does not match num_processes").

    None when the code does not import Accelerate, or the counts agree or are not literals.
    `env` is the job's environment names (PARALLELISM_CONFIG_* give ParallelismConfig's
    defaults, so with one of them set its sizes are not guessed).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if not _imports(tree, frozenset({"accelerate"})):
        return None
    sized_by_env = any(name.startswith("PARALLELISM_CONFIG_") for name in env)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _dotted(node.func).rpartition(".")[2]
        kwargs = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        if callee == "notebook_launcher":
            given = kwargs.get("num_processes")
            if given is None and len(node.args) > 2:
                given = node.args[2]
            n = _literal_int(given) if given is not None else None
            if n is None or n <= 1 or procs is None or n == procs:
                continue  # 1 runs in place, and so does -p (the runner); others are checked there
            return (
                f"The code calls Accelerate's {_short_call(source, node, 'notebook_launcher()')}, "
                f"but the job has {_shape_words(num_nodes, procs)}. Inside a job the job's "
                "processes are the launch: notebook_launcher runs the function in place on each "
                f"of them, so its num_processes must be the processes per node. Run the cell "
                f"with -p {n}, or pass num_processes={procs}. Nothing was submitted."
            )
        if callee == "ParallelismConfig" and procs is not None and not sized_by_env:
            sizes = dict(zip(_ACCELERATE_SIZES, node.args, strict=False))
            sizes.update(
                (k, v) for k, v in kwargs.items() if k in _ACCELERATE_SIZES or k == "sp_size"
            )
            if any(isinstance(a, ast.Starred) for a in node.args) or None in kwargs.values():
                continue
            if any(kw.arg is None for kw in node.keywords) or len(node.args) > 4:
                continue  # **options, or positional past cp_size: not guessed
            values = {k: _literal_int(v) for k, v in sizes.items()}
            if any(v is None for v in values.values()):
                continue
            if values.get("sp_size", 1) > 1:
                continue  # DeepSpeed's sequence parallelism: Accelerate does not compare
            total = 1
            for v in values.values():
                total *= v  # type: ignore[operator]
            world = num_nodes * procs
            if total <= 1 or total == world:
                continue  # 1: Accelerate makes it data parallel over all processes
            return (
                f"The code's {_short_call(source, node, 'ParallelismConfig()')} multiplies to "
                f"{total} processes, but the job runs {_shape_words(num_nodes, procs)}; "
                "Accelerate would stop on every rank (ParallelismConfig total_size does not "
                f"match num_processes). Make them agree: sizes whose product is {world}, or a "
                f"job of {total} processes (for example -p {total} on one node). Nothing was "
                "submitted."
            )
    return None


def _command_words(argv: Iterable[str]) -> list[str]:
    """The words of a command, with `bash -c "..."` strings split as a shell splits them."""
    words: list[str] = []
    for arg in argv:
        if "accelerate" in arg and any(c.isspace() for c in arg):
            try:
                words += shlex.split(arg, comments=True)
            except ValueError:
                words += arg.split()
        else:
            words.append(arg)
    # `a;b` and `a&&b` without spaces: split the separators off
    out: list[str] = []
    for w in words:
        out += [p for p in re.split(r"(;|&&|\|\||\|)", w) if p] if w not in _SHELL_BREAKS else [w]
    return out


def _launch_flags(words: list[str]) -> dict[str, str]:
    """`accelerate launch`'s own options (before the training script), `-` read as `_`."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w in _SHELL_BREAKS or not w.startswith("-"):
            break  # the training script (its own arguments follow), or the next command
        name, eq, value = w.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name in ("m", "module", "no_python"):
            break  # the next word is the program
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if not eq and nxt and not nxt.startswith("-") and nxt not in _SHELL_BREAKS:
            if not nxt.endswith(".py") or name == "config_file":
                value, i = nxt, i + 1  # its value (a word ending in .py is the script)
        flags[name] = value
        i += 1
    return flags


def accelerate_launch_mismatch(
    argv: Iterable[str], num_nodes: int, procs: int | None
) -> str | None:
    """Why `accelerate launch` in the job's command (TrainerCommand + TrainerArgs, also inside
    `bash -c "..."`) would not run the job's processes: a literal `--num_processes N` (all
    nodes' processes, as Accelerate counts) other than nodes × processes per node, or
    `--num_machines M` other than the job's nodes. None when they agree or are not literals
    (`$NUM`, a config file)."""
    words = _command_words(argv)
    for i, w in enumerate(words):
        base = w.rsplit("/", 1)[-1]
        if base == "accelerate" and words[i + 1 : i + 2] == ["launch"]:
            start = i + 2
        elif base == "accelerate-launch":
            start = i + 1
        elif w == "-m" and words[i + 1 : i + 2] == ["accelerate.commands.launch"]:
            start = i + 2
        else:
            continue
        flags = _launch_flags(words[start:])
        shown = "accelerate launch " + " ".join(
            f"--{k} {v}" for k, v in flags.items() if k in ("num_processes", "num_machines")
        )
        machines = flags.get("num_machines", "")
        if machines.isdigit() and int(machines) != num_nodes:
            m = int(machines)
            return (
                f"The command runs `{shown}`, but the job has {num_nodes} "
                f"node{'s' if num_nodes != 1 else ''} (-n {num_nodes}, num_nodes={num_nodes}); "
                f"Accelerate would wait for {m} machine{'s' if m != 1 else ''} that the job does "
                f"not start. Make them agree: --num_machines {num_nodes}, or -n {m} "
                f"(num_nodes={m}). Nothing was submitted."
            )
        n_text = flags.get("num_processes", "")
        if procs is not None and n_text.isdigit() and int(n_text) != num_nodes * procs:
            n, world = int(n_text), num_nodes * procs
            per_node = (
                f"-p {n // num_nodes} (num_proc_per_node={n // num_nodes})"
                if n % num_nodes == 0
                else f"a job whose nodes × processes per node is {n}"
            )
            return (
                f"The command runs `{shown}`: Accelerate's --num_processes counts the processes "
                f"of all nodes, {n}, but the job runs {_shape_words(num_nodes, procs)}, so "
                f"Accelerate would start other processes than the job has room for. Make them "
                f"agree: --num_processes {world}, or {per_node}. Nothing was submitted."
            )
    return None
