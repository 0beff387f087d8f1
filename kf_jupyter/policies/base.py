"""What a framework policy is: the launch line, and the environment of each process.

Mirrors the Trainer's EnforceMLPolicy plugins (see docs/architecture.md). A policy gives
- `script()`: the bash script that runs the function (same locally and on a cluster);
- `node_env()`: the variables the Trainer injects into node `i`, for any master host and port;
- `local_processes()`: the processes a local run starts, with that environment, hosts mapped to
  127.0.0.1 and a free port.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import own_setup, program
from ..constants import DEFAULT_MASTER_PORT
from .resources import auto_procs_per_node, cpus_per_node, gpus_per_node


@dataclass(frozen=True)
class Procs:
    """Processes per node: how many, what the Trainer writes for it, and why, in words."""

    count: int
    #: The value the Trainer injects (torch: "auto" when GPUs are requested; torchrun then
    #: starts one per visible GPU).
    env: str
    reason: str


def auto_procs(resources: Mapping[str, Any] | None) -> Procs:
    """`numProcPerNode: auto` with the reason in words (resources.auto_procs_per_node, the one
    rule both backends follow). A local run starts exactly this many, never one per local CPU."""
    count = auto_procs_per_node(resources)
    gpus = gpus_per_node(resources)
    if gpus:
        return Procs(count, "auto", f"numProcPerNode auto: one per GPU ({gpus} GPUs per node)")
    if cpus_per_node(resources):
        why = f"numProcPerNode auto: no GPU, so max(1, CPU request rounded up) = {count}"
    else:
        why = "numProcPerNode auto: no GPU and no CPU request, so 1"
    return Procs(count, str(count), why)


@dataclass(frozen=True)
class JobShape:
    """The numbers a policy needs: name, nodes, processes per node, GPUs per node.

    `num_nodes` is the TrainJob's (the trainer's) node count; `num_proc_per_node` the processes
    each trainer pod runs (MPI: slots per host) as the Trainer derives them; `hosts` the pods in
    the job's world (MPI with `runLauncherAsNode`: max(num_nodes - 1, 1) node pods plus the
    launcher); `nproc_env` what the Trainer writes for the processes per node ("auto" for torch
    with GPUs); `procs_reason` says why, in words (the dry run shows it).
    """

    name: str
    num_nodes: int
    num_proc_per_node: int | None = None
    gpus_per_node: int = 0
    nproc_env: str | None = None
    procs_reason: str = ""
    launcher_as_node: bool = False
    #: MPI: the launcher's line comes before the nodes' in the hostfile (runtime job order).
    launcher_first: bool = False

    @property
    def procs(self) -> int:
        """Processes per node (1 when unset)."""
        return self.num_proc_per_node or 1

    @property
    def node_pods(self) -> int:
        """Pods of the `node` replicated job (MPI with the launcher as a node: one fewer)."""
        return max(self.num_nodes - 1, 1) if self.launcher_as_node else self.num_nodes

    @property
    def hosts(self) -> int:
        """Pods that run ranks: the node pods, plus the launcher when it is a node."""
        return self.node_pods + (1 if self.launcher_as_node else 0)

    @property
    def world_size(self) -> int:
        """Processes in the job's world (MPI: hostfile slots; torch: nodes x procs)."""
        return self.hosts * self.procs


@dataclass(frozen=True)
class ProcessSpec:
    """One process a local run starts: its name, node index and policy environment."""

    name: str
    node_index: int
    env: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Payload:
    """What the script ships: the function's source and name, JSON args, the runner, packages."""

    source: str
    func_name: str
    args_json: str
    runner: str
    packages: tuple[str, ...] = ()
    index_urls: tuple[str, ...] = ()
    #: The program's sys.argv[0] ('' = the shipped file) and sys.argv[1:] (script arguments).
    argv0: str = ""
    argv: tuple[str, ...] = ()


class Policy:
    """A framework policy (see the module docstring)."""

    name: ClassVar[str] = "plain"
    #: The runner's framework set-up step: none, jax or xgboost.
    setup: ClassVar[str] = "none"
    #: Environment names the Trainer sets for this policy; user env may not use them.
    reserved_env: ClassVar[frozenset[str]] = frozenset()

    def procs_per_node(
        self, explicit: int | None, runtime_nproc: int | None, resources: Mapping[str, Any] | None
    ) -> Procs:
        """Processes per node as the Trainer derives them for this policy: one per node here
        (plainml and jax run one process per pod; jax.go:73-80)."""
        return Procs(1, "1", f"one process per node (the {self.name} policy)")

    def launcher(self, trainer: object) -> list[str]:
        """The shell words that start the runner (python3, torchrun ..., ...)."""
        return ["exec", "python3"]

    def runner_setup(self, trainer: object) -> str:
        """The runner's set-up step for this trainer (`none` when the user opted out)."""
        return self.setup

    def setup_step(self, trainer: object, payload: Payload) -> str:
        """The set-up step the runner does: the policy's, unless turned off or done by the code."""
        return own_setup.setup_step(self.runner_setup(trainer), payload.source)

    def invocation(self, trainer: object, payload: Payload) -> list[str]:
        """The runner's arguments (shell words): what to run, the set-up, the program's argv."""
        return program.runner_invocation(
            payload.func_name, self.setup_step(trainer, payload), payload.argv0, payload.argv
        )

    def script(self, trainer: object, payload: Payload, shape: JobShape | None = None) -> str:
        """The bash script of `spec.trainer.command` (`bash -c SCRIPT`) for a job of `shape`."""
        body = (
            "set -e\n"
            + program.workdir()
            + program.materialise(payload.source, payload.args_json, payload.runner)
            + program.pip_prelude(payload.packages, payload.index_urls)
            + " ".join([*self.launch_words(trainer, shape), *self.invocation(trainer, payload)])
            + "\n"
        )
        return program.check_size(body)

    def launch_words(self, trainer: object, shape: JobShape | None) -> list[str]:
        """`launcher()` for a job of `shape` (a policy may need the shape to start its ranks)."""
        return self.launcher(trainer)

    def node_env(self, shape: JobShape, index: int, master: str, port: int) -> dict[str, str]:
        """What the Trainer injects into node `index` (master host and port as given)."""
        return {}

    def cluster_env(self, shape: JobShape, index: int) -> dict[str, str]:
        """node_env() with the cluster's names: `<job>-node-0-0.<job>` and port 29500."""
        return self.node_env(
            shape, index, f"{shape.name}-node-0-0.{shape.name}", DEFAULT_MASTER_PORT
        )

    def command_env(self, shape: JobShape) -> str:
        """Bash lines that export node i's `cluster_env` in the pod whose `JOB_COMPLETION_INDEX`
        is i: how a policy the Trainer does not enforce (a plugin's) gets its environment on a
        cluster. '' when the policy sets no environment."""
        cases = []
        for i in range(shape.hosts):
            env = self.cluster_env(shape, i)
            if env:
                words = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
                cases.append(f"  {i}) export {words} ;;\n")
        if not cases:
            return ""
        return (
            f'case "${{JOB_COMPLETION_INDEX:-0}}" in\n{"".join(cases)}'
            f'  *) echo "kf-jupyter: no {self.name} environment for node index '
            f'$JOB_COMPLETION_INDEX" >&2; exit 1 ;;\nesac\n'
        )

    def local_processes(self, shape: JobShape, port: int, job_dir: str) -> list[ProcessSpec]:
        """One process per node, each with its node's environment on 127.0.0.1:`port`."""
        return [
            ProcessSpec(f"node-{i}", i, self.node_env(shape, i, "127.0.0.1", port))
            for i in range(shape.num_nodes)
        ]
