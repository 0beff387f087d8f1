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


def _literal_count(node: ast.expr) -> int | None:
    """The number of devices a literal `devices=` / `num_nodes=` value asks for; None if open."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None  # -1: all of them
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, list | tuple):
        return len(value) or None
    return None  # "auto", a device string like "0,1", ...


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
    uses_lightning = any(
        (isinstance(n, ast.Import) and any(a.name.split(".")[0] in _LIGHTNING for a in n.names))
        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in _LIGHTNING)
        for n in ast.walk(tree)
    )
    if not uses_lightning:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = _dotted(node.func).rpartition(".")[2]
        if callee not in _LIGHTNING_CALLEES:
            continue
        call = ast.get_source_segment(source, node) or f"{callee}(...)"
        call = " ".join(call.split())
        if len(call) > 80:
            call = call[:79] + "\u2026"
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
