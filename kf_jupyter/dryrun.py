"""A dry run's short summary, shown before the full manifest (pure: no I/O).

A TrainJob with a function in it is hundreds of lines (the runner travels in the command), and
what the user set (nodes, resources, env, pod patches) comes after all of it. `summary_lines`
says it in about ten lines: runtime, nodes × processes and where those numbers come from, image,
resources, env names (never values), packages, workspace files and runtime patches. `DryRun`
is the dict `TrainerClient.dry_run` returns, shown in a notebook as that summary with the full
manifest folded below.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else ("es" if word.endswith("s") else "s"))


def _trainjob(plan: Mapping[str, Any]) -> Mapping[str, Any]:
    job = plan.get("trainjob")
    if isinstance(job, Mapping):
        return job
    return plan if plan.get("kind") == "TrainJob" else {}


def _count(quantity: Any) -> int | None:
    """Whole processes for a GPU or CPU quantity (`500m` is one), as the torch policy counts."""
    import math

    text = str(quantity)
    try:
        value = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None
    return max(1, math.ceil(value))


def _shape(plan: Mapping[str, Any], spec: Mapping[str, Any], trainer: Any) -> str:
    local = plan.get("plan") if isinstance(plan.get("plan"), Mapping) else {}
    nodes = spec.get("numNodes", local.get("num_nodes"))
    procs = spec.get("numProcPerNode", local.get("num_proc_per_node"))
    given_n = trainer is not None and getattr(trainer, "num_nodes", None) is not None
    given_p = trainer is not None and getattr(trainer, "procs_per_node", None) is not None
    if trainer is None:
        given_n, given_p = "numNodes" in spec, "numProcPerNode" in spec
    why_n = "set with -n / num_nodes" if given_n else "the runtime's default"
    res = (spec.get("resourcesPerNode") or {}).get("limits") or {}
    if given_p:
        why_p = "set with -p / num_proc_per_node"
    elif getattr(trainer, "policy", None) == "torch" and ("nvidia.com/gpu" in res or "cpu" in res):
        what = "GPU" if "nvidia.com/gpu" in res else "CPU"
        why_p = f"one per {what} asked for, as the Trainer's torch policy does"
        if procs is None:
            procs = _count(res.get("nvidia.com/gpu") or res["cpu"])
    else:
        why_p = "the runtime's default"
    n = _plural(int(nodes), "node") if isinstance(nodes, int) else "the runtime's nodes"
    if isinstance(procs, int):
        p = _plural(procs, "process")
    else:
        p = f"{procs} processes" if procs else "the runtime's processes"
    total = f" = {nodes * procs} ranks" if isinstance(nodes, int) and isinstance(procs, int) else ""
    return f"{n} × {p}{total} (nodes: {why_n}; processes: {why_p})"


def _world(world: Mapping[str, Any]) -> str:
    """The world a backend worked out (`build.describe_processes`): size, per node, why."""
    hosts = world.get("hosts")  # MPI: the hostfile's hosts (a count)
    count = hosts if isinstance(hosts, int) else world.get("num_nodes")
    unit = "host" if isinstance(hosts, int) else "node"
    where = f" × {_plural(int(count), unit)}" if isinstance(count, int) else ""
    return (
        f"{_plural(int(world.get('world_size') or 0), 'process')}: "
        f"{world.get('processes_per_node')} per node{where} ({world.get('why')})"
    )


def _env(spec: Mapping[str, Any]) -> str:
    items = []
    for e in spec.get("env") or []:
        if not isinstance(e, Mapping):
            continue
        ref = (e.get("valueFrom") or {}).get("secretKeyRef")
        if isinstance(ref, Mapping):
            items.append(f"{e.get('name')} (Secret {ref.get('name')}/{ref.get('key')})")
        else:
            items.append(str(e.get("name")))
    return ", ".join(items) if items else "none set"


def _pod_keys(pod: Mapping[str, Any]) -> list[str]:
    keys = []
    for k, v in pod.items():
        if k in ("containers", "initContainers") and isinstance(v, list):
            for c in v:
                if isinstance(c, Mapping):
                    inner = ", ".join(x for x in c if x != "name") or "named"
                    keys.append(f"{k[:-1]} {c.get('name')}: {inner}")
        else:
            keys.append(k)
    return keys


def _patches(job: Mapping[str, Any]) -> list[str]:
    out = []
    for patch in (job.get("spec") or {}).get("runtimePatches") or []:
        if not isinstance(patch, Mapping):
            continue
        parts = []
        rts = patch.get("trainingRuntimeSpec") or {}
        tmpl = (rts.get("template") or {}) if isinstance(rts, Mapping) else {}
        for rj in (tmpl.get("spec") or {}).get("replicatedJobs") or []:
            pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec"
            ) or {}
            keys = _pod_keys(pod) if isinstance(pod, Mapping) else []
            parts.append(f"{rj.get('name')}: {', '.join(keys) or 'metadata'}")
        other = [k for k in patch if k not in ("manager", "time", "trainingRuntimeSpec")]
        parts += other
        out.append(f"{patch.get('manager', '?')} ({'; '.join(parts) or 'empty'})")
    return out


def summary_lines(
    plan: Mapping[str, Any], trainer: Any = None, runtime_config: Any = None
) -> list[str]:
    """About ten lines saying what a dry run would submit (`plan`: what a backend's dry_run
    gives, or a bare TrainJob); `trainer` tells set from default, `runtime_config` the packages."""
    job = _trainjob(plan)
    spec_all = job.get("spec") or {}
    spec = spec_all.get("trainer") or {}
    ref = spec_all.get("runtimeRef") or {}
    backend = plan.get("backend")
    where = (
        "local backend: processes on this machine" if backend == "local" else "Kubernetes backend"
    )
    if plan.get("namespace") or (job.get("metadata") or {}).get("namespace"):
        ns = plan.get("namespace") or job["metadata"]["namespace"]
        where += f", namespace {ns}"
    res = (spec.get("resourcesPerNode") or {}).get("limits") or {}
    resources = (
        ", ".join(f"{k} {v}" for k, v in res.items()) + " per node"
        if res
        else "none asked (the runtime's)"
    )
    lines = [
        f"job        {(job.get('metadata') or {}).get('name', '?')} ({where})",
        f"runtime    {ref.get('name', '?')} ({ref.get('kind', 'runtime')})",
        f"shape      {_shape(plan, spec, trainer)}",
        *(
            [f"world      {_world(plan['world'])}"]
            if isinstance(plan.get("world"), Mapping)
            else []
        ),
        f"image      {spec.get('image') or 'the runtime' + chr(39) + 's'}",
        f"resources  {resources}",
        f"env        {_env(spec)}",
    ]
    packages = _packages(runtime_config)
    if packages:
        lines.append(f"packages   {packages}")
    ws = plan.get("workspace")
    if isinstance(ws, Mapping):
        lines.append(
            f"workspace  {_plural(int(ws.get('file_count', 0)), 'file')}, {ws.get('size')} from "
            f"{ws.get('folder')} (listed below the manifest)"
        )
    else:
        lines.append("workspace  none shipped")
    patches = _patches(job)
    lines.append(f"patches    {'; '.join(patches) if patches else 'none'}")
    pss = plan.get("pod_security")
    if isinstance(pss, Mapping):  # the namespace enforces a Pod Security level
        refused = pss.get("refused")
        lines.append(
            f"security   {pss.get('level')}: "
            + (f"REFUSED, train() would stop here. {refused}" if refused else "the pods pass")
        )
    return lines


def _packages(runtime_config: Any) -> str:
    pkgs = getattr(runtime_config, "packages", None)
    return ", ".join(str(p) for p in pkgs) if pkgs else ""


def summary_text(
    plan: Mapping[str, Any], manifest_lines: int, trainer: Any = None, runtime_config: Any = None
) -> str:
    """The summary as YAML comments (the output stays valid YAML), then where the manifest is."""
    head = ["# Dry run: nothing was submitted. In short:"]
    head += [f"#   {ln}" for ln in summary_lines(plan, trainer, runtime_config)]
    head.append(f"# The full manifest follows ({manifest_lines} lines).")
    return "\n".join(head) + "\n"


def summary_html(
    plan: Mapping[str, Any], full_text: str, trainer: Any = None, runtime_config: Any = None
) -> str:
    """The summary as a small table, the full manifest folded in a <details> below it."""
    rows = []
    for ln in summary_lines(plan, trainer, runtime_config):
        key, _, value = ln.partition(" ")
        rows.append(
            f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(key)}</th>"
            f"<td style='text-align:left'>{html.escape(value.strip())}</td></tr>"
        )
    n = full_text.count("\n")
    return (
        "<div class='kf-dry-run'><div><b>Dry run</b>: nothing was submitted.</div>"
        f"<table class='kf-jupyter-table'>{''.join(rows)}</table>"
        f"<details><summary>Full manifest ({n} lines)</summary>"
        f"<pre>{html.escape(full_text)}</pre></details></div>"
    )


class DryRun(dict):  # type: ignore[type-arg]
    """What `TrainerClient.dry_run` returns: the plain dict it always was, shown in a notebook as
    a short summary with the full manifest folded below (`print(d.summary())` in plain Python)."""

    def __init__(
        self, plan: Mapping[str, Any], trainer: Any = None, runtime_config: Any = None
    ) -> None:
        super().__init__(plan)
        self._trainer = trainer
        self._runtime_config = runtime_config

    def summary(self) -> str:
        """The summary lines as text."""
        return "\n".join(summary_lines(self, self._trainer, self._runtime_config))

    def _full_text(self) -> str:
        from .magics.render import to_yaml

        return to_yaml(dict(self))

    def _repr_html_(self) -> str:
        return summary_html(self, self._full_text(), self._trainer, self._runtime_config)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        full = self._full_text()
        p.text(summary_text(self, full.count("\n"), self._trainer, self._runtime_config) + full)
