"""The notice a training magic prints at submit when the job's world is not nodes × processes.

Kubeflow Trainer v2.3's MPI runtimes with `runLauncherAsNode` (`deepspeed-distributed`,
`mlx-distributed`) run max(numNodes - 1, 1) node pods plus the launcher as hosts, so
`%%mpitrain -n 1 -p 2` is 2 hosts × 2 slots = 4 ranks (docs/notebook.md, "The world at
submit"). The dry run shows the world; this says it in the cell, before the job's logs.
Pure: the caller resolves the runtime.
"""

from __future__ import annotations

from typing import Any


def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}{'es' if word[-1] == 's' else 's'}"


def world_notice(trainer: Any, runtime: Any) -> str | None:
    """One line saying the job's world size and why, when it differs from nodes × processes
    per node (what the magic's -n and -p ask for); None when they agree."""
    from ..build import job_shape

    shape = job_shape(trainer, runtime, "notice")
    asked = shape.num_nodes * shape.procs
    if shape.world_size == asked:
        return None
    text = (
        f"kf-jupyter: this job runs {_n(shape.world_size, 'process')}, not "
        f"{_n(shape.num_nodes, 'node')} × {_n(shape.procs, 'process')} = {asked}"
    )
    if not shape.launcher_as_node:  # no other rule changes the world today
        return f"{text} ({shape.procs_reason})."
    text += (
        f": runtime {runtime.name!r} runs its MPI launcher as a host too (runLauncherAsNode, "
        f"Kubeflow Trainer v2.3), so {_n(shape.node_pods, 'node pod')} plus the launcher are "
        f"{shape.hosts} hosts with {_n(shape.procs, 'slot')} each"
    )
    if asked >= 2:
        text += f"; for a world of {asked} (as mpirun -n {asked}) use -n {asked} -p 1"
    return text + "."
