"""Server-side state: one TrainerClient per (backend, namespace), worker threads, log streams.

Each backend has its own worker pool: a Kubernetes API server that accepts connections and never
answers can hold the kubernetes threads, never the local ones. Kubernetes calls made for the UI
are bounded by `kubernetes_request_timeout` (each HTTP read, and the whole call); past it the
route answers 503 "not answering", and while every kubernetes thread is held by such a call new
kubernetes requests get that answer at once instead of queueing.
"""

from __future__ import annotations

import asyncio
import functools
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from traitlets import Float, Int, Unicode
from traitlets.config import LoggingConfigurable

from ..errors import BackendError, ClusterUnreachableError, KFJupyterError, ValidationError

if TYPE_CHECKING:
    from ..client import TrainerClient
    from ..types import TrainJob

T = TypeVar("T")

BACKENDS = ("local", "kubernetes")
#: Seconds a failed kubernetes set-up is remembered by the `backends` route (a polling UI
#: would otherwise re-read the kubeconfig on every poll).
FAILURE_TTL = 5.0
#: Seconds after a kubernetes call ran out of time during which the `backends` route reports the
#: cluster as not answering (unless a kubernetes call succeeds meanwhile).
STALL_TTL = 30.0
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class BackendUnavailableError(BackendError):
    """A backend cannot be used from this server (its Python package is missing)."""


class TooManyStreamsError(BackendError):
    """Every log-stream slot is taken (HTTP 503 until one closes)."""


def validate_backend(value: str | None) -> str:
    """The `backend` query argument: `local` (default) or `kubernetes`."""
    if value in (None, ""):
        return "local"
    if value not in BACKENDS:
        raise ValidationError(
            f"Unknown backend {value!r}: use backend=local or backend=kubernetes in the request."
        )
    return value


def validate_namespace(value: str | None) -> str | None:
    """The `namespace` query argument: an RFC 1123 label, or absent for the default."""
    if value in (None, ""):
        return None
    if len(value) > 63 or not _NAMESPACE.fullmatch(value):
        raise ValidationError(
            f"Invalid namespace {value!r}: a Kubernetes namespace is at most 63 lower-case "
            "letters, digits and '-', starting and ending with a letter or digit. Pick an "
            "existing namespace (kubectl get namespaces)."
        )
    return value


class KFJupyterServer(LoggingConfigurable):
    """Settings and shared state of the kf-jupyter server extension (`c.KFJupyterServer.*`)."""

    state_dir = Unicode(
        "",
        help="Job store of the local backend. Empty: $KF_JUPYTER_STATE_DIR, else "
        "$XDG_DATA_HOME/kf-jupyter, else ~/.local/share/kf-jupyter (what kernels use).",
    ).tag(config=True)
    api_threads = Int(8, help="Worker threads for backend calls (list, get, delete, events).").tag(
        config=True
    )
    max_log_streams = Int(
        200, help="Log streams open at once; more are refused with 503 until one closes."
    ).tag(config=True)
    keepalive_seconds = Float(
        15.0, help="Idle time after which an open log stream sends an SSE comment."
    ).tag(config=True)
    kubeconfig = Unicode(
        "",
        help="Kubeconfig file of the kubernetes backend. Empty: the kubernetes client's default "
        "($KUBECONFIG as it was when the client was imported, else ~/.kube/config, else the "
        "in-cluster service account).",
    ).tag(config=True)
    kubernetes_timeout = Float(
        20.0, help="Seconds to wait for the kubernetes backend to connect before giving up."
    ).tag(config=True)
    kubernetes_threads = Int(
        4,
        help="Worker threads for kubernetes backend calls, apart from the local backend's "
        "(`api_threads`): a hung API server can hold only these.",
    ).tag(config=True)
    kubernetes_request_timeout = Float(
        10.0,
        help="Seconds a request made for the UI waits for the Kubernetes API server (the read "
        "timeout of each HTTP call, and the bound of the whole call) before the route answers "
        "503 'not answering'.",
    ).tag(config=True)

    progress_ttl = Float(
        10.0,
        help="Seconds the progress read from a running Kubernetes job's log markers is reused "
        "(jobs without trainerStatus): at most one log request per such job per this time.",
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from .progress import ProgressCache

        self._progress = ProgressCache()
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, self.api_threads), thread_name_prefix="kf-jupyter-api"
        )
        self._kube_pool = ThreadPoolExecutor(
            max_workers=max(1, self.kubernetes_threads), thread_name_prefix="kf-jupyter-k8s"
        )
        self._kube_lock = threading.Lock()
        self._kube_busy = 0  # kubernetes calls running or queued
        self._kube_stalled: float | None = None  # when a kubernetes call last ran out of time
        self._clients: dict[tuple[str, str | None], TrainerClient] = {}
        self._client_lock = threading.Lock()
        self._streams_lock = threading.Lock()
        self._streams: set[threading.Event] = set()
        self._closed = False
        self._kube_failure: tuple[float, str] | None = None

    # -- threads ----------------------------------------------------------------------------

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call on the local backend's worker pool, off the tornado event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def run_on(self, backend: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call of `backend` on that backend's own pool (kubernetes: bounded)."""
        if backend != "kubernetes":
            return await self.run(fn, *args, **kwargs)
        return await self._run_kube(
            functools.partial(fn, *args, **kwargs), self.kubernetes_request_timeout
        )

    def not_answering(self, seconds: float) -> str:
        """The 'cluster not answering' message."""
        host = ""
        with self._client_lock:
            for (backend, _), client in self._clients.items():
                if backend == "kubernetes":
                    host = str(getattr(client.backend, "host", "") or "")
                    break
        where = f" at {host}" if host else ""
        return (
            f"The Kubernetes API server{where} is not answering (no reply within {seconds:g} s). "
            "The cluster may be down, overloaded or unreachable from this Jupyter server; check "
            "it (kubectl get --raw /readyz) and refresh. Local jobs are not affected."
        )

    def _kube_done(self, _: Any) -> None:
        with self._kube_lock:
            self._kube_busy -= 1

    async def _run_kube(self, call: Callable[[], T], seconds: float) -> T:
        stalled = self._kube_stalled
        if (
            stalled is not None
            and self._kube_busy >= self.kubernetes_threads
            and time.monotonic() - stalled < FAILURE_TTL
        ):
            raise ClusterUnreachableError(self.not_answering(seconds))  # no thread is free

        with self._kube_lock:
            self._kube_busy += 1
        try:
            cf = self._kube_pool.submit(call)
        except RuntimeError:  # pool shut down: the server is stopping
            self._kube_done(None)
            raise
        cf.add_done_callback(self._kube_done)  # also runs if cancelled before it started
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(cf), seconds)
        except TimeoutError:
            self._kube_stalled = time.monotonic()
            message = self.not_answering(seconds)
            self._kube_failure = (self._kube_stalled, message)
            raise ClusterUnreachableError(message) from None
        self._kube_stalled = None
        return result

    async def fill_log_progress(self, client: TrainerClient, jobs: list[TrainJob]) -> None:
        """Give running Kubernetes jobs without trainerStatus the progress of their last log
        marker (cached per job for `progress_ttl`; read on the kubernetes pool; never raises)."""
        from .progress import read_progress, wants_progress

        wanted = [j for j in jobs if wants_progress(j)]
        if not wanted:
            return
        stale = self._progress.claim(wanted, time.monotonic(), self.progress_ttl)

        async def read(job: TrainJob) -> None:
            try:
                status = await self._run_kube(
                    functools.partial(read_progress, client, job), self.kubernetes_request_timeout
                )
            except Exception:  # not answering, no thread free: no progress this time
                status = None
            self._progress.put(job, time.monotonic(), status)

        await asyncio.gather(*(read(j) for j in stale))
        for job in wanted:
            job.trainer_status = self._progress.get(job)

    def open_stream(self) -> threading.Event:
        """Reserve a log-stream slot; the returned event tells its pump thread to stop."""
        with self._streams_lock:
            if self._closed or len(self._streams) >= self.max_log_streams:
                if self._closed:
                    raise TooManyStreamsError(
                        "The kf-jupyter server is shutting down and opens no more log streams. "
                        "Reload the page once the Jupyter server is back."
                    )
                raise TooManyStreamsError(
                    f"The kf-jupyter server already serves {len(self._streams)} log streams "
                    f"(the limit, c.KFJupyterServer.max_log_streams, is {self.max_log_streams}). "
                    "Close some log panels or browser tabs and retry, or raise the limit in "
                    "jupyter_server_config.py."
                )
            stop = threading.Event()
            self._streams.add(stop)
            return stop

    def close_stream(self, stop: threading.Event) -> None:
        """Release a slot taken by open_stream and tell its pump to stop (idempotent)."""
        stop.set()
        with self._streams_lock:
            self._streams.discard(stop)

    @property
    def open_streams(self) -> int:
        """How many log streams are open now."""
        with self._streams_lock:
            return len(self._streams)

    def shutdown(self) -> None:
        """Stop every log stream and the worker pool (server shutdown)."""
        with self._streams_lock:
            self._closed = True
            for stop in self._streams:
                stop.set()
            self._streams.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._kube_pool.shutdown(wait=False, cancel_futures=True)

    # -- clients ----------------------------------------------------------------------------

    def local_state_dir(self) -> Path:
        """The local job store this server reads."""
        from ..backends.local.config import LocalBackendConfig

        return LocalBackendConfig(state_dir=self.state_dir or None).resolved_state_dir

    def _make_client(self, backend: str, namespace: str | None) -> TrainerClient:
        from ..client import TrainerClient

        if backend == "local":
            from ..backends.local.config import LocalBackendConfig

            return TrainerClient(LocalBackendConfig(state_dir=self.state_dir or None))
        from ..backends.kubernetes.config import KubernetesBackendConfig

        try:
            read = max(0.1, self.kubernetes_request_timeout)
            return TrainerClient(
                KubernetesBackendConfig(
                    namespace=namespace,
                    config_file=self.kubeconfig or None,
                    request_timeout=(min(5.0, read), read),
                )
            )
        except KFJupyterError:
            raise
        except ImportError as exc:
            raise BackendUnavailableError(
                f"The kubernetes backend cannot be loaded in this Jupyter server ({exc}). "
                "Install it into the server's environment with: pip install 'kf-jupyter[kubernetes]'."
            ) from None
        except Exception as exc:  # kubeconfig missing or unreadable
            raise ClusterUnreachableError(
                f"Cannot set up the Kubernetes client: {type(exc).__name__}: {exc}. Check that "
                "the Jupyter server can read a kubeconfig ($KUBECONFIG or ~/.kube/config) or "
                "runs in a pod with a service account."
            ) from None

    def _cached_client(self, backend: str, namespace: str | None) -> TrainerClient:
        key = (backend, None if backend == "local" else namespace)
        with self._client_lock:
            client = self._clients.get(key)
        if client is not None:
            return client
        client = self._make_client(backend, key[1])
        with self._client_lock:
            return self._clients.setdefault(key, client)

    async def client(self, backend: str, namespace: str | None) -> TrainerClient:
        """The cached TrainerClient of a backend and namespace (created off the event loop)."""
        key = (backend, None if backend == "local" else namespace)
        with self._client_lock:
            client = self._clients.get(key)
        if client is not None:
            return client
        if backend == "kubernetes":
            return await self._run_kube(
                functools.partial(self._cached_client, backend, namespace), self.kubernetes_timeout
            )
        return await self.run(self._cached_client, backend, namespace)

    async def backends_info(self) -> dict[str, Any]:
        """What the `backends` route returns: local always, kubernetes with its namespace or error."""
        kube: dict[str, Any] = {
            "name": "kubernetes",
            "available": False,
            "namespace": None,
            "error": None,
        }
        stalled = self._kube_stalled
        if stalled is not None and time.monotonic() - stalled < STALL_TTL:
            kube["error"] = self.not_answering(self.kubernetes_request_timeout)
            return {"backends": [{"name": "local", "available": True}, kube], "default": "local"}
        failed = self._kube_failure
        if failed is not None and time.monotonic() - failed[0] < FAILURE_TTL:
            kube["error"] = failed[1]
            return {"backends": [{"name": "local", "available": True}, kube], "default": "local"}
        try:
            client = await self.client("kubernetes", None)
        except KFJupyterError as exc:
            kube["error"] = str(exc)
        except Exception as exc:
            self.log.warning("kf-jupyter: kubernetes backend unavailable", exc_info=True)
            kube["error"] = f"The kubernetes backend failed to start ({type(exc).__name__})."
        else:
            self._kube_failure = None
            kube["available"] = True
            kube["namespace"] = getattr(client.backend, "namespace", None)
        if kube["error"] is not None:
            self._kube_failure = (time.monotonic(), kube["error"])
        return {
            "backends": [{"name": "local", "available": True}, kube],
            "default": "local",
        }
