"""What a framework policy is: the launch line, and the environment of each process.

Mirrors the Trainer's EnforceMLPolicy plugins (see docs/architecture.md). A policy gives
- `script()`: the bash script that runs the function (same locally and on a cluster);
- `node_env()`: the variables the Trainer injects into node `i`, for any master host and port;
- `local_processes()`: the processes a local run starts, with that environment, hosts mapped to
  127.0.0.1 and a free port.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

from .. import own_setup, program
from ..constants import DEFAULT_MASTER_PORT

_SUFFIXES: dict[str, Fraction] = {
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def quantity_value(quantity: object) -> int:
    """A Kubernetes quantity as a whole number rounded up, as `resource.Quantity.Value()` gives
    it ("500m" -> 1, "2" -> 2, "1.5" -> 2); 0 for anything unreadable."""
    text = str(quantity).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and not text.endswith("e" + suffix):
            number, scale = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        number, scale = text, Fraction(1)
    try:
        value = Fraction(number) * scale if "e" not in number.lower() else Fraction(float(number))
    except (ValueError, ZeroDivisionError):
        return 0
    return max(0, math.ceil(value))


def as_requirements(resources: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """`{"requests": ..., "limits": ...}` from either that form or a flat name -> quantity map
    (a trainer's `resources()`, which the TrainJob sends as both requests and limits)."""
    resources = dict(resources or {})
    if set(resources) <= {"requests", "limits", "claims"}:
        return {
            "requests": dict(resources.get("requests") or {}),
            "limits": dict(resources.get("limits") or {}),
        }
    return {"requests": dict(resources), "limits": dict(resources)}


def _gpus_in(resource_list: Mapping[str, Any]) -> int:
    for name, quantity in resource_list.items():
        if "gpu" in str(name).lower():
            return quantity_value(quantity)
    return 0


def gpus_per_node(resources: Mapping[str, Any] | None) -> int:
    """GPUs per node as the Trainer counts them: the first resource whose name contains "gpu"
    (any vendor), from the requests, else from the limits (pkg/runtime/runtime.go:280)."""
    req = as_requirements(resources)
    return _gpus_in(req["requests"]) or _gpus_in(req["limits"])


def cpus_per_node(resources: Mapping[str, Any] | None) -> int:
    """The CPU request rounded up, else the CPU limit, else 0 (torch.go:228 getNumCPUPerNode)."""
    req = as_requirements(resources)
    request = quantity_value(req["requests"].get("cpu", 0))
    return request or quantity_value(req["limits"].get("cpu", 0))


@dataclass(frozen=True)
class Procs:
    """Processes per node: how many, what the Trainer writes for it, and why, in words."""

    count: int
    #: The value the Trainer injects (torch: "auto" when GPUs are requested; torchrun then
    #: starts one per visible GPU).
    env: str
    reason: str


def auto_procs_per_node(resources: Mapping[str, Any] | None) -> Procs:
    """`numProcPerNode: auto`, the one rule both backends follow (torch.go:121-135): one process
    per GPU when GPUs are requested, else max(1, CPU request rounded up).

    `resources` are the TrainJob's `resourcesPerNode`, or the runtime's node container's when
    the job sets none. A local run starts exactly this many, never one per local CPU.
    """
    gpus = gpus_per_node(resources)
    if gpus:
        return Procs(gpus, "auto", f"numProcPerNode auto: one per GPU ({gpus} GPUs per node)")
    cpus = cpus_per_node(resources)
    if cpus:
        why = f"numProcPerNode auto: no GPU, so max(1, CPU request rounded up) = {max(1, cpus)}"
    else:
        why = "numProcPerNode auto: no GPU and no CPU request, so 1"
    return Procs(max(1, cpus), str(max(1, cpus)), why)


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

    def local_processes(self, shape: JobShape, port: int, job_dir: str) -> list[ProcessSpec]:
        """One process per node, each with its node's environment on 127.0.0.1:`port`."""
        return [
            ProcessSpec(f"node-{i}", i, self.node_env(shape, i, "127.0.0.1", port))
            for i in range(shape.num_nodes)
        ]
