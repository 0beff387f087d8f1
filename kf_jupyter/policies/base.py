"""What a framework policy is: the launch line, and the environment of each process.

Mirrors the Trainer's EnforceMLPolicy plugins (see docs/architecture.md). A policy gives
- `script()`: the bash script that runs the function (same locally and on a cluster);
- `node_env()`: the variables the Trainer injects into node `i`, for any master host and port;
- `local_processes()`: the processes a local run starts, with that environment, hosts mapped to
  127.0.0.1 and a free port.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .. import own_setup, program
from ..constants import DEFAULT_MASTER_PORT


@dataclass(frozen=True)
class JobShape:
    """The numbers a policy needs: name, nodes, processes per node, GPUs per node."""

    name: str
    num_nodes: int
    num_proc_per_node: int | None = None
    gpus_per_node: int = 0

    @property
    def procs(self) -> int:
        """Processes per node (1 when unset)."""
        return self.num_proc_per_node or 1


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

    def script(self, trainer: object, payload: Payload) -> str:
        """The bash script of `spec.trainer.command` (`bash -c SCRIPT`)."""
        body = (
            "set -e\n"
            + program.pip_prelude(payload.packages, payload.index_urls)
            + program.materialise(payload.source, payload.args_json, payload.runner)
            + " ".join([*self.launcher(trainer), *self.invocation(trainer, payload)])
            + "\n"
        )
        return program.check_size(body)

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
