"""`TrainerClient` with the Kubeflow SDK 0.5.0's methods, signatures and return types.

SDK code runs on kf-jupyter by changing only its import (`from kubeflow.trainer import ...` ->
`from kf_jupyter.sdk import ...`), on the local backend (the default here) and on a cluster.
Each backend config picks its backend as in the SDK: `KubernetesBackendConfig` ->
`KubernetesBackend`, `LocalProcessBackendConfig` or None -> `LocalProcessBackend`,
`ContainerBackendConfig` -> `ContainerBackend` (local processes; lines keep their newline).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ...backends.kubernetes.config import KubernetesBackendConfig
from ...backends.local.config import LocalBackendConfig
from ..backends.container.backend import ContainerBackend
from ..backends.container.types import ContainerBackendConfig
from ..backends.kubernetes.backend import KubernetesBackend
from ..backends.localprocess.backend import LocalProcessBackend
from ..backends.localprocess.types import LocalProcessBackendConfig
from ..client import KFBackend
from ..configs import backend_config as to_backend_config
from ..types.types import Event, Initializer, Runtime, TrainJob


def _backend(config: Any) -> KFBackend:
    kind = type(config).__name__
    if config is None or kind == "LocalProcessBackendConfig":
        return LocalProcessBackend(config)
    if kind == "ContainerBackendConfig":
        return ContainerBackend(config)
    if kind == "KubernetesBackendConfig":
        return KubernetesBackend(config)
    kf = to_backend_config(config)  # kf-jupyter's own configs; anything else: a clear error
    if isinstance(kf, LocalBackendConfig):
        return KFBackend(kf)
    return KubernetesBackend(kf)


class TrainerClient:
    """The Kubeflow SDK's `TrainerClient`, on kf-jupyter's backends.

    `backend_config`: `KubernetesBackendConfig` for a cluster; `LocalProcessBackendConfig`,
    `ContainerBackendConfig` or None for kf-jupyter's local backend (every node a local
    process group). The SDK's own config objects are accepted too. `.backend` is the SDK-style
    backend; `.client` kf-jupyter's own `TrainerClient` behind it.
    """

    def __init__(
        self,
        backend_config: KubernetesBackendConfig
        | LocalProcessBackendConfig
        | ContainerBackendConfig
        | None = None,
    ) -> None:
        self.backend = _backend(backend_config)

    @property
    def client(self) -> Any:
        """kf-jupyter's own `TrainerClient` doing the work (jobs show up in both)."""
        return self.backend.client

    @property
    def backend_name(self) -> str:
        """`local` or `kubernetes`."""
        return self.backend.backend_name

    def list_runtimes(self) -> list[Runtime]:
        """The training runtimes (locally: the default install's `torch-distributed`, ...)."""
        return self.backend.list_runtimes()

    def get_runtime(self, name: str) -> Runtime:
        """One runtime by name."""
        return self.backend.get_runtime(name)

    def get_runtime_packages(self, runtime: Runtime) -> None:
        """Print the Python version and packages a job on `runtime` sees (runs a 1-node job)."""
        return self.backend.get_runtime_packages(runtime)

    def train(
        self,
        runtime: str | Runtime | None = None,
        initializer: Initializer | None = None,
        trainer: Any = None,
        options: list[Any] | None = None,
    ) -> str:
        """Submit a TrainJob; return its name.

        `runtime`: a name or a `Runtime` (default `torch-distributed`, or
        `$DEFAULT_TRAINING_RUNTIME`). `trainer`: a `CustomTrainer`, a `CustomTrainerContainer`
        (cluster only), a `BuiltinTrainer` (torchtune runtimes, cluster only) or None for the
        runtime's defaults. `options`: `Name`, `Labels`, ... from `kf_jupyter.sdk.options` or
        `kubeflow.trainer.options`, or any callable option. A `TrainJobTemplate` unpacks into
        it: `client.train(**template)`.
        """
        return self.backend.train(
            runtime=runtime, initializer=initializer, trainer=trainer, options=options
        )

    def list_jobs(self, runtime: Runtime | None = None) -> list[TrainJob]:
        """Every job (of the namespace, on a cluster); only those of `runtime` when given."""
        return self.backend.list_jobs(runtime=runtime)

    def get_job(self, name: str) -> TrainJob:
        """One job, with its steps (`node-0`, `node-1`, ...)."""
        return self.backend.get_job(name)

    def get_job_logs(
        self, name: str, step: str = "node-0", follow: bool | None = False
    ) -> Iterator[str]:
        """The log lines of one step (`node-0` by default), as an iterator.

        With `follow=True` lines arrive while the job runs and the iterator ends with the job.
        Lines come as the SDK's backend of the same config gives them: without their newline
        (Kubernetes, local process), with it (container).
        """
        return self.backend.get_job_logs(name, follow=bool(follow), step=step)

    def get_job_events(self, name: str) -> list[Event]:
        """What happened to the job (Kubernetes events; local state changes), oldest first."""
        return self.backend.get_job_events(name)

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
        fails instead, TimeoutError after `timeout` seconds. The job is followed (a watch on a
        cluster) rather than polled; the callbacks get the job each time its status changes.
        """
        return self.backend.wait_for_job_status(
            name,
            status=status,
            timeout=timeout,
            polling_interval=polling_interval,
            callbacks=callbacks,
        )

    def delete_job(self, name: str) -> None:
        """Delete the job and stop what it runs."""
        self.backend.delete_job(name)


__all__ = [
    "ContainerBackend",
    "ContainerBackendConfig",
    "KubernetesBackend",
    "KubernetesBackendConfig",
    "LocalProcessBackend",
    "LocalProcessBackendConfig",
    "TrainerClient",
]
