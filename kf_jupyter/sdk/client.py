"""The work behind the SDK's backends: the Kubeflow SDK 0.5.0's methods on kf-jupyter's client.

`KFBackend` is what `KubernetesBackend`, `LocalProcessBackend` and `ContainerBackend`
(`kf_jupyter.sdk.backends.*`) share, and what `TrainerClient` (`kf_jupyter.sdk.api`) calls.
Everything is done by kf-jupyter's own `TrainerClient` (`.client`), so jobs submitted either
way show up in both, in the magics, the job panel and the server extension.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..client import TrainerClient as KFTrainerClient
from ..errors import JobFailedError as KFJobFailedError
from ..errors import RuntimeNotFoundError, ValidationError
from ..options import TrainerCommand
from ..runtimes import Runtime as KFRuntime
from ..types import STATUSES
from ..types import TrainJob as KFTrainJob
from .backends.base import RuntimeBackend
from .initializers import InitializerOption
from .options import from_sdk_option
from .trainers import builtin_options, runtime_config, to_trainer
from .types import DEFAULT_TRAINING_RUNTIME, CustomTrainer, Event, Runtime, TrainJob
from .views import placeholder_runtime, to_sdk_event, to_sdk_job, to_sdk_runtime

PROTOCOL_PREFIX = "##kf-jupyter:"
_NODE_STEP = re.compile(r"node-(\d+)")
_MPI_FRAMEWORKS = ("mpi", "deepspeed", "mlx")


class JobFailedError(KFJobFailedError, RuntimeError):
    """The job failed while waiting for another status (a RuntimeError, as the SDK raises)."""


def _print_packages() -> None:
    import shutil
    import subprocess
    import sys

    print(f"Python: {sys.version}")
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "list"], capture_output=True, text=True, check=False
    )
    print(pip.stdout or "Unable to get installed packages: pip is not available")
    if shutil.which("nvidia-smi"):
        print("Available GPUs on the single training node")
        print(subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=False).stdout)


class KFBackend(RuntimeBackend):
    """The SDK's backend methods on a kf-jupyter `TrainerClient` (`.client`).

    `line_end`: appended to every log line `get_job_logs` yields ("" as the SDK's Kubernetes
    and local-process backends give lines, "\n" as its container backend does). Attributes of
    kf-jupyter's backend (`namespace`, `config`, ...) read through.
    """

    def __init__(self, kf_config: Any, line_end: str = "") -> None:
        self.client = KFTrainerClient(kf_config)
        self.line_end = line_end

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in ("client", "line_end"):
            raise AttributeError(name)
        return getattr(self.client.backend, name)

    @property
    def backend_name(self) -> str:
        """`local` or `kubernetes`."""
        return self.client.backend_name

    # -- runtimes -------------------------------------------------------------------------------

    def _sdk_runtime(self, rt: KFRuntime) -> Runtime:
        return to_sdk_runtime(rt, self.backend_name)

    def list_runtimes(self) -> list[Runtime]:
        """The training runtimes (locally: the default install's `torch-distributed`, ...)."""
        return [self._sdk_runtime(r) for r in self.client.list_runtimes()]

    def get_runtime(self, name: str) -> Runtime:
        """One runtime by name."""
        return self._sdk_runtime(self.client.get_runtime(name))

    def get_runtime_packages(self, runtime: Runtime | str) -> None:
        """Print the Python version and packages a job on `runtime` sees (runs a 1-node job)."""
        name = self.train(runtime=runtime, trainer=CustomTrainer(func=_print_packages, num_nodes=1))
        try:
            self.wait_for_job_status(name, status={"Complete", "Failed"}, timeout=600)
            for line in self.get_job_logs(name):
                print(line, end="" if line.endswith("\n") else "\n")
        finally:
            self.delete_job(name)

    def _kf_runtime(self, runtime: Any) -> KFRuntime:
        if runtime is None:
            runtime = os.environ.get("DEFAULT_TRAINING_RUNTIME", DEFAULT_TRAINING_RUNTIME)
        if isinstance(runtime, KFRuntime):
            return runtime
        name = runtime if isinstance(runtime, str) else getattr(runtime, "name", None)
        if not isinstance(name, str):
            raise ValidationError(
                f"runtime must be a runtime name or a Runtime from client.get_runtime(), got "
                f"{type(runtime).__name__}."
            )
        return self.client.get_runtime(name)

    # -- submit ---------------------------------------------------------------------------------

    def train(
        self,
        runtime: str | Runtime | None = None,
        initializer: Any = None,
        trainer: Any = None,
        options: list[Any] | None = None,
    ) -> str:
        """Submit a TrainJob; return its name.

        `runtime`: a name or a `Runtime` (default `torch-distributed`, or
        `$DEFAULT_TRAINING_RUNTIME`). `trainer`: a `CustomTrainer`, a `CustomTrainerContainer`
        (cluster only), or None for the runtime's defaults. `options`: `Name`, `Labels`, ...
        from `kf_jupyter.sdk.options` or `kubeflow.trainer.options`, or any callable option.
        """
        ours, rt, rc, opts = self.prepare(runtime, initializer, trainer, options)
        return self.client.train(ours, runtime=rt, runtime_config=rc, options=opts)

    def prepare(
        self,
        runtime: str | Runtime | None = None,
        initializer: Any = None,
        trainer: Any = None,
        options: list[Any] | None = None,
    ) -> tuple[Any, KFRuntime, Any, list[Any]]:
        """What `train()` submits, as kf-jupyter's `(trainer, runtime, runtime_config,
        options)`: the SDK's arguments checked and converted (a sweep's trial template)."""
        rt = self._kf_runtime(runtime)
        builtin = type(trainer).__name__ == "BuiltinTrainer"
        if rt.framework == "torchtune" and trainer is not None and not builtin:
            raise ValidationError(
                f"Runtime {rt.name!r} is a torchtune runtime, which takes a BuiltinTrainer, not a "
                f"{type(trainer).__name__}. Pick a runtime for your own code, such as "
                "'torch-distributed'."
            )
        ours = to_trainer(trainer, rt, self.backend_name)
        opts = [from_sdk_option(o) for o in _as_list(options)]
        if builtin:
            opts = builtin_options(trainer, rt, initializer) + opts
        if initializer is not None:
            opts.append(InitializerOption(initializer))
        if (
            trainer is None
            and self.backend_name == "local"
            and not any(isinstance(o, TrainerCommand) for o in opts)
        ):
            raise ValidationError(
                "trainer=None runs the runtime's own image command, which the local backend "
                "cannot run. Pass trainer=CustomTrainer(func=...) to run a function locally, or "
                "a TrainerCommand([...]) option to run a command."
            )
        return ours, rt, runtime_config(trainer), opts

    # -- jobs -----------------------------------------------------------------------------------

    def _runtimes(self) -> dict[str, KFRuntime]:
        try:
            return {r.name: r for r in self.client.list_runtimes()}
        except RuntimeNotFoundError:
            return {}

    def _job(self, job: KFTrainJob, runtimes: dict[str, KFRuntime] | None = None) -> TrainJob:
        # by the listed names: a job of an old alias (local-torch) keeps its name, no warning
        rt = (self._runtimes() if runtimes is None else runtimes).get(job.runtime)
        runtime = (
            self._sdk_runtime(rt)
            if rt is not None
            else placeholder_runtime(job.runtime, job.framework, self.backend_name)
        )
        return to_sdk_job(job, runtime)

    def list_jobs(self, runtime: Runtime | None = None) -> list[TrainJob]:
        """Every job (of the namespace, on a cluster); only those of `runtime` when given."""
        jobs = self.client.list_jobs()
        if runtime is not None:
            jobs = [j for j in jobs if j.runtime == getattr(runtime, "name", runtime)]
        runtimes = self._runtimes() if jobs else {}
        return [self._job(j, runtimes) for j in jobs]

    def get_job(self, name: str) -> TrainJob:
        """One job, with its steps (`node-0`, `node-1`, ...)."""
        return self._job(self.client.get_job(name))

    def delete_job(self, name: str) -> None:
        """Delete the job and stop what it runs."""
        self.client.delete_job(name)

    def get_job_events(self, name: str) -> list[Event]:
        """What happened to the job (Kubernetes events; local state changes), oldest first."""
        return [to_sdk_event(e, name) for e in self.client.get_job_events(name)]

    def wait_for_job_status(
        self,
        name: str,
        status: set[str] | frozenset[str] = frozenset({"Complete"}),
        timeout: int = 600,
        polling_interval: int = 2,
        callbacks: list[Callable[[TrainJob], None]] | None = None,
    ) -> TrainJob:
        """Wait until the job reaches one of `status`; return it.

        Raises ValueError for bad arguments, `JobFailedError` (a RuntimeError) when the job
        fails instead, TimeoutError after `timeout` seconds. kf-jupyter follows the job (a
        watch on a cluster) rather than polling, so `polling_interval` is only validated; the
        callbacks get the job each time its status changes.
        """
        _validate_wait(status, timeout, polling_interval)
        wrapped = None
        if callbacks:
            sdk_runtime: list[Any] = []

            def relay(job: KFTrainJob) -> None:
                if not sdk_runtime:
                    sdk_runtime.append(self._job(job).runtime)
                converted = to_sdk_job(job, sdk_runtime[0])
                for cb in callbacks:
                    cb(converted)

            wrapped = [relay]
        try:
            job = self.client.wait_for_job_status(
                name, status=set(status), timeout=timeout, callbacks=wrapped
            )
        except KFJobFailedError as exc:
            if isinstance(exc, JobFailedError):
                raise
            raise JobFailedError(str(exc)) from None
        return self._job(job)

    # -- logs -----------------------------------------------------------------------------------

    def get_job_logs(self, name: str, follow: bool = False, step: str = "node-0") -> Iterator[str]:
        """The log lines of one step (`node-0` by default, as in the SDK), as an iterator.

        With `follow=True` lines arrive while the job runs and the iterator ends with the job
        (it also waits for a job that has not started yet). Each line is as the step printed
        it, ending in `line_end`; kf-jupyter's own protocol lines are left out.
        """
        job = self.client.get_job(name)
        policy = self._policy(job)
        from ..logview import readable

        if self.backend_name == "local":
            wanted = _local_sources(step, policy, job)
            records = self.client.iter_log_records(name, follow=bool(follow))
            records = (r for r in records if wanted(r.source))
        else:
            source = _cluster_source(step, policy)
            records = self.client.iter_log_records(name, step=source, follow=bool(follow))
        # What a person reads (kf_jupyter.logview): no protocol lines, banners or bar updates.
        end = self.line_end
        return (r.line + end for r in readable(records))

    def _policy(self, job: KFTrainJob) -> str:
        rt = self._runtimes().get(job.runtime)
        if rt is not None:
            return rt.ml_policy
        return "mpi" if job.framework in _MPI_FRAMEWORKS else job.framework


def _as_list(options: Iterable[Any] | None) -> list[Any]:
    if options is None:
        return []
    if callable(options) or isinstance(options, str | bytes):
        raise ValidationError("options must be a list of options, e.g. options=[Name('my-job')].")
    return list(options)


def _validate_wait(status: Any, timeout: Any, polling_interval: Any) -> None:
    wanted = set(status) if isinstance(status, set | frozenset | list | tuple) else None
    if not wanted or not wanted <= set(STATUSES):
        raise ValidationError(
            f"Expected status {status} must be a non-empty subset of {set(STATUSES)}."
        )
    for what, value in (("timeout", timeout), ("polling_interval", polling_interval)):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValidationError(f"{what} must be a positive number of seconds, got {value!r}.")
    if polling_interval >= timeout:
        raise ValidationError(
            "Polling interval must be strictly less than timeout. Received "
            f"polling_interval={polling_interval}, timeout={timeout}."
        )


def _node_index(step: str) -> int | None:
    m = _NODE_STEP.fullmatch(step) if isinstance(step, str) else None
    return int(m.group(1)) if m else None


def _step_error(step: Any, job: KFTrainJob) -> ValidationError:
    names = ", ".join(f"node-{i}" for i in range(job.num_nodes))
    return ValidationError(
        f"Job {job.name!r} has no step {step!r}. Its steps are {names} (client.get_job(name)"
        ".steps lists them)."
    )


def _local_sources(step: str, policy: str, job: KFTrainJob) -> Callable[[str], bool]:
    """Which local log sources make up SDK step `step` (the node's agent and its ranks)."""
    index = _node_index(step)
    if index is None:
        if step in ("dataset-initializer", "model-initializer"):
            return lambda source: False  # not run locally: nothing to show
        raise _step_error(step, job)
    if index >= max(job.num_nodes, 1):
        raise _step_error(step, job)
    if policy == "mpi":
        # mpirun on the launcher (the SDK's node-0) prints every rank; the other nodes only
        # run sshd on a cluster.
        return (lambda source: True) if index == 0 else (lambda source: False)
    # processes per node as the job's shape gives them (torch, or XGBoost workers per GPU)
    nproc = job.num_proc_per_node or 1

    def wanted(source: str) -> bool:
        if source == f"node-{index}":
            return True
        if source.startswith("rank-") and source[5:].isdigit():
            return int(source[5:]) // nproc == index
        return False

    return wanted


def _cluster_source(step: str, policy: str) -> str:
    """The pod source (`node-N`, `launcher`, an initializer) behind SDK step `step`."""
    index = _node_index(step)
    if index is None or policy != "mpi":
        return step
    return "launcher" if index == 0 else f"node-{index - 1}"
