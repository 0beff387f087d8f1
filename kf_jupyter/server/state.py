"""Server-side state: one TrainerClient per (backend, namespace), worker threads, log streams."""

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

T = TypeVar("T")

BACKENDS = ("local", "kubernetes")
#: Seconds a failed kubernetes set-up is remembered by the `backends` route (a polling UI
#: would otherwise re-read the kubeconfig on every poll).
FAILURE_TTL = 5.0
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

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, self.api_threads), thread_name_prefix="kf-jupyter-api"
        )
        self._clients: dict[tuple[str, str | None], TrainerClient] = {}
        self._client_lock = threading.Lock()
        self._streams_lock = threading.Lock()
        self._streams: set[threading.Event] = set()
        self._closed = False
        self._kube_failure: tuple[float, str] | None = None

    # -- threads ----------------------------------------------------------------------------

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call on the worker pool, off the tornado event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

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
            return TrainerClient(
                KubernetesBackendConfig(namespace=namespace, config_file=self.kubeconfig or None)
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
        fut = self.run(self._cached_client, backend, namespace)
        if backend == "kubernetes":
            try:
                return await asyncio.wait_for(fut, self.kubernetes_timeout)
            except TimeoutError:
                raise ClusterUnreachableError(
                    f"The Kubernetes API server did not answer within {self.kubernetes_timeout:g} "
                    "seconds. Check the cluster address in your kubeconfig and your network, "
                    "then refresh."
                ) from None
        return await fut

    async def backends_info(self) -> dict[str, Any]:
        """What the `backends` route returns: local always, kubernetes with its namespace or error."""
        kube: dict[str, Any] = {
            "name": "kubernetes",
            "available": False,
            "namespace": None,
            "error": None,
        }
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
