"""REST handlers of the kf-jupyter server extension (every route authenticated and authorized).

Routes, under `<base_url>kf-jupyter/api/` (see docs/server.md):
`backends`, `runtimes`, `jobs`, `jobs/<name>`, `jobs/<name>/logs`, `jobs/<name>/events`,
`jobs/<name>/cancel` (POST).
Blocking backend calls run on worker threads; log streams are pumped by one thread each.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.iostream import StreamClosedError

from ..errors import (
    ClusterUnreachableError,
    ForbiddenError,
    JobNotFoundError,
    JobStateError,
    KFJupyterError,
    NamespaceNotFoundError,
    RuntimeNotFoundError,
    TrainerNotInstalledError,
    ValidationError,
)
from ..logview import readable
from ..types import LogRecord
from ..validation import validate_job_name
from .state import (
    BackendUnavailableError,
    KFJupyterServer,
    TooManyStreamsError,
    validate_backend,
    validate_namespace,
)

API_PREFIX = "kf-jupyter/api"
AUTH_RESOURCE = "kf_jupyter"
_FRAMEWORK = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})
#: Most records written to the client in one chunk.
_BATCH = 2000
#: Records buffered between a pump thread and a slow client before the pump waits.
_QUEUE_SIZE = 10000
_MAX_TAIL = 1_000_000


def status_of(exc: BaseException) -> int:
    """HTTP status of an error, per the REST contract."""
    if isinstance(exc, ValidationError):
        return 400
    if isinstance(exc, ForbiddenError):
        return 403
    if isinstance(exc, JobNotFoundError | RuntimeNotFoundError | NamespaceNotFoundError):
        return 404
    if isinstance(exc, JobStateError):
        return 409
    if isinstance(
        exc,
        ClusterUnreachableError
        | TrainerNotInstalledError
        | BackendUnavailableError
        | TooManyStreamsError,
    ):
        return 503
    return 500


def error_body(exc: BaseException) -> dict[str, str]:
    """The JSON error of the contract: the one-paragraph message and the exception class name."""
    if isinstance(exc, KFJupyterError):
        return {"error": str(exc), "kind": type(exc).__name__}
    return {
        "error": (
            f"The kf-jupyter server extension hit an unexpected {type(exc).__name__}. The "
            "Jupyter server log has the details; please report it if it persists."
        ),
        "kind": type(exc).__name__,
    }


class KFHandler(APIHandler):
    """Base of every kf-jupyter handler: query parsing, the shared state, JSON errors."""

    auth_resource = AUTH_RESOURCE

    @property
    def kf(self) -> KFJupyterServer:
        """The extension's shared state."""
        return self.settings["kf_jupyter"]

    def target(self) -> tuple[str, str | None]:
        """The (backend, namespace) the request is about."""
        backend = validate_backend(self.get_query_argument("backend", None))
        namespace = validate_namespace(self.get_query_argument("namespace", None))
        return backend, namespace

    async def client(self) -> Any:
        """The TrainerClient of the request's backend and namespace."""
        backend, namespace = self.target()
        return await self.kf.client(backend, namespace)

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a blocking client call off the event loop, on the request's backend's pool."""
        backend, _ = self.target()
        return await self.kf.run_on(backend, fn, *args, **kwargs)

    async def answer(
        self, method: str, *args: Any, render: Callable[[Any], Any], job: str | None = None
    ) -> None:
        """Call a client method off the event loop and send `render(result)` as JSON.

        `job` (a `{name}` path segment) is validated before anything touches a backend or the
        disk; any error becomes the contract's JSON error.
        """
        try:
            if job is not None:
                args = (_job_name(job), *args)
            client = await self.client()
            result = await self.call(getattr(client, method), *args)
        except Exception as exc:
            self.send_error_json(exc)
            return
        if result is None:
            self.set_status(204)
            self.finish()
        else:
            self.finish(json.dumps(render(result)))

    def send_error_json(self, exc: BaseException) -> None:
        """Finish the request with the contract's JSON error (never a traceback)."""
        status = status_of(exc)
        if status == 500:
            self.log.error(
                "kf-jupyter: %s %s failed", self.request.method, self.request.path, exc_info=exc
            )
        self.clear()
        self.set_status(status)
        self.finish(json.dumps(error_body(exc)))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Errors raised outside our try blocks (auth, XSRF, origin) are JSON too."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, web.HTTPError):
            message = exc.log_message or exc.reason or self._reason
            body = {"error": message % exc.args if exc.args else message, "kind": "HTTPError"}
        elif exc is not None:
            body = error_body(exc)
        else:
            body = {"error": self._reason, "kind": "HTTPError"}
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))


def _job_name(name: str) -> str:
    """Validate the `{name}` path segment before anything touches a backend or the disk."""
    return validate_job_name(name)


class BackendsHandler(KFHandler):
    """GET backends: which backends this server can use, and the current namespace."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """List the backends."""
        try:
            info = await self.kf.backends_info()
        except Exception as exc:
            self.send_error_json(exc)
            return
        self.finish(json.dumps(info))


class RuntimesHandler(KFHandler):
    """GET runtimes?backend=&namespace=&framework=: training runtimes."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """List runtimes, optionally of one framework."""
        try:
            framework = self.get_query_argument("framework", None) or None
            if framework is not None and not _FRAMEWORK.fullmatch(framework):
                raise ValidationError(
                    f"Invalid framework {framework!r}: use a framework label such as torch, "
                    "deepspeed, mpi, jax or xgboost."
                )
            client = await self.client()
            runtimes = await self.call(client.list_runtimes, framework)
        except Exception as exc:
            self.send_error_json(exc)
            return
        backend, _ = self.target()
        self.finish(json.dumps({"runtimes": [_runtime_entry(backend, r) for r in runtimes]}))


def _runtime_entry(backend: str, rt: Any) -> dict[str, Any]:
    """A runtime's JSON, with `runs_here` and `unsupported_reason` (why this backend cannot)."""
    reason = None
    if backend == "local":
        from ..backends.local.runtimes import unsupported_reason

        reason = unsupported_reason(rt)
    return {**rt.to_dict(), "runs_here": reason is None, "unsupported_reason": reason}


class JobsHandler(KFHandler):
    """GET jobs?backend=&namespace=: every job of the backend."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """List jobs (running Kubernetes jobs without trainerStatus: progress from log markers)."""
        try:
            client = await self.client()
            as_json = getattr(client.backend, "list_jobs_json", None)
            if as_json is not None:  # local: finished jobs' JSON comes from its index
                body = await self.call(as_json)
                self.finish('{"jobs": ' + body + "}")
                return
            jobs = await self.call(client.list_jobs)
            if self.target()[0] == "kubernetes":
                await self.kf.fill_log_progress(client, jobs)
        except Exception as exc:
            self.send_error_json(exc)
            return
        self.finish(json.dumps({"jobs": [j.to_dict() for j in jobs]}))


class JobHandler(KFHandler):
    """GET / DELETE jobs/{name}: one job."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        """One job."""
        await self.answer("get_job", job=name, render=lambda job: job.to_dict())

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        """Delete the job (and stop its processes); 204."""
        await self.answer("delete_job", job=name, render=lambda _: None)


class JobCancelHandler(KFHandler):
    """POST jobs/{name}/cancel: stop a running job; an ended job is left alone (409).

    The answer is the job as the backend records it afterwards (local: status Failed, reason
    Cancelled; Kubernetes: the TrainJob is deleted, `{"name", "status": "Deleted"}`), so the
    frontend shows the backend's state, never the one the button hoped for. 409 carries the
    ended job under `job` (a late Cancel on a Complete job shows Complete).
    """

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        """Cancel the job if it still runs."""
        from ..widgets.monitor import cancel_if_running

        try:
            name = _job_name(name)
            client = await self.client()
            cancelled, job = await self.call(cancel_if_running, client, name)
        except Exception as exc:
            self.send_error_json(exc)
            return
        body = job.to_dict() if job is not None else {"name": name, "status": "Deleted"}
        if not cancelled:
            self.set_status(409)
            self.finish(
                json.dumps(
                    {
                        "error": f"Job {name} already ended ({body['status']}); nothing was "
                        "cancelled.",
                        "kind": "JobEnded",
                        "job": body,
                    }
                )
            )
            return
        self.finish(json.dumps(body))


class JobEventsHandler(KFHandler):
    """GET jobs/{name}/events: what happened to the job."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        """The job's events."""
        await self.answer(
            "get_job_events",
            job=name,
            render=lambda events: {"events": [e.to_dict() for e in events]},
        )


class JobLifecycleHandler(KFHandler):
    """POST jobs/{name}/suspend and jobs/{name}/resume: 204 once asked (locally: once done)."""

    @web.authenticated
    @authorized
    async def post(self, name: str, action: str) -> None:
        """Suspend or resume the job."""
        await self.answer(f"{action}_job", job=name, render=lambda _: None)


class _LogPump:
    """Pulls log records from a backend generator on its own thread into a bounded queue.

    The event loop is woken (at most once per drain) with `call_soon_threadsafe`. `stop` (the
    client went away) is handed to the backend's generator too, so a follow of a silent job ends
    within its poll interval rather than at the next line; the pump then closes the generator.
    `cancel()` also wakes `batches()` at once.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        open_records: Callable[[threading.Event], Iterator[LogRecord]],
        stop: threading.Event,
    ) -> None:
        self.loop = loop
        self.open_records = open_records
        self.stop = stop
        self.records: queue.Queue[LogRecord] = queue.Queue(_QUEUE_SIZE)
        self.wake = asyncio.Event()
        self.done = False
        self.error: BaseException | None = None
        self._pending = False
        self.thread = threading.Thread(target=self._run, name="kf-jupyter-logs", daemon=True)

    def start(self) -> None:
        """Start the pump thread."""
        self.thread.start()

    def _notify(self) -> None:
        if self._pending:
            return
        self._pending = True
        try:
            self.loop.call_soon_threadsafe(self.wake.set)
        except RuntimeError:  # loop closed: the server is stopping
            self.stop.set()

    def _put(self, rec: LogRecord) -> bool:
        while not self.stop.is_set():
            try:
                self.records.put(rec, timeout=0.25)
            except queue.Full:
                continue
            self._notify()
            return True
        return False

    def _run(self) -> None:
        gen: Iterator[LogRecord] | None = None
        try:
            gen = self.open_records(self.stop)
            for rec in gen:
                if not self._put(rec) or self.stop.is_set():
                    break
        except BaseException as exc:
            self.error = exc
        finally:
            close = getattr(gen, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:  # a generator that fails to close must not kill the pump
                    pass
            self.done = True
            self._pending = False
            self._notify()

    def cancel(self) -> None:
        """Stop the pump and end `batches()` now (on the event loop: the client went away)."""
        self.stop.set()
        self.wake.set()

    async def batches(self, idle: float) -> Any:
        """Yield lists of records as they arrive; None after `idle` seconds without any."""
        while not self.stop.is_set():
            try:
                await asyncio.wait_for(self.wake.wait(), idle)
            except TimeoutError:
                yield None
                continue
            self.wake.clear()
            self._pending = False  # before draining, so a record put now wakes us again
            while True:
                batch: list[LogRecord] = []
                try:
                    while len(batch) < _BATCH:
                        batch.append(self.records.get_nowait())
                except queue.Empty:
                    pass
                if not batch:
                    break
                yield batch
            if self.done and self.records.empty():
                return


def _sse(data: dict[str, Any], event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


class JobLogsHandler(KFHandler):
    """GET jobs/{name}/logs: the log, streamed as server-sent events (follow=1) or plain text."""

    _stop: threading.Event | None = None
    _pump: _LogPump | None = None

    def _flag(self, name: str) -> bool:
        raw = (self.get_query_argument(name, "") or "").lower()
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise ValidationError(f"Invalid {name}={raw!r}: use {name}=1 or {name}=0.")

    def _tail(self) -> int | None:
        raw = self.get_query_argument("tail", None)
        if raw in (None, ""):
            return None
        try:
            tail = int(raw)
        except ValueError:
            tail = -1
        if not 0 < tail <= _MAX_TAIL:
            raise ValidationError(
                f"Invalid tail={raw!r}: give the number of last lines to send, a whole number "
                f"from 1 to {_MAX_TAIL}, or leave tail out for the whole log."
            )
        return tail

    def on_connection_close(self) -> None:
        """The client went away: stop pulling the job's log and free its slot now."""
        if self._pump is not None:
            self._pump.cancel()
        if self._stop is not None:
            self.kf.close_stream(self._stop)

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        """Stream (follow=1) or send (default) the job's log."""
        try:
            name = _job_name(name)
            follow = self._flag("follow")
            tail = self._tail()
            step = self.get_query_argument("step", None) or None
            client = await self.client()
            await self.call(client.get_job, name)  # 404 etc. before any header goes out
            stop = self.kf.open_stream()
        except Exception as exc:
            self.send_error_json(exc)
            return
        self._stop = stop
        try:
            await self._stream(client, name, step, follow, tail, stop)
        finally:
            self.kf.close_stream(stop)

    async def _stream(
        self,
        client: Any,
        name: str,
        step: str | None,
        follow: bool,
        tail: int | None,
        stop: threading.Event,
    ) -> None:
        loop = asyncio.get_running_loop()
        pump = _LogPump(
            loop,
            lambda stop: client.iter_log_records(
                name, step=step, follow=follow, tail_lines=tail, stop=stop
            ),
            stop,
        )
        self._pump = pump
        content_type = "text/event-stream" if follow else "text/plain"
        self.set_header("Content-Type", f"{content_type}; charset=utf-8")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        pump.start()
        try:
            if follow:
                self.write(": stream open\n\n")
                await self.flush()
            async for batch in pump.batches(self.kf.keepalive_seconds):
                if batch is None:
                    if follow:
                        self.write(": keep-alive\n\n")
                        await self.flush()
                    continue
                if follow:
                    chunk = "".join(_sse({"source": r.source, "line": r.line}) for r in batch)
                else:
                    chunk = "".join(f"[{r.source}] {r.line}\n" for r in readable(batch))
                self.write(chunk)
                await self.flush()
            if stop.is_set():  # the client went away: nobody to tell how it ended
                return
            if pump.error is not None:
                self.log.warning("kf-jupyter: log stream of %s ended with %r", name, pump.error)
            if follow:
                if pump.error is not None:
                    self.write(_sse(error_body(pump.error), event="error"))
                status = None
                try:
                    status = (await self.call(client.get_job, name)).status
                except Exception:
                    pass
                self.write(_sse({"status": status}, event="end"))
            elif pump.error is not None:
                self.write(f"[kf-jupyter] log stream failed: {error_body(pump.error)['error']}\n")
            self.finish(set_content_type=f"{content_type}; charset=utf-8")
        except StreamClosedError:
            stop.set()
        finally:
            stop.set()


def route_table(base_url: str) -> list[tuple[str, type[Any]]]:
    """The (pattern, handler) pairs registered under `<base_url>kf-jupyter/api/`."""
    from .socket import StreamSocket

    root = url_path_join(base_url, API_PREFIX)
    name = r"(?P<name>[^/]+)"
    return [
        (url_path_join(root, "backends") + "/?", BackendsHandler),
        (url_path_join(root, "runtimes") + "/?", RuntimesHandler),
        (url_path_join(root, "stream") + "/?", StreamSocket),
        (url_path_join(root, "jobs") + "/?", JobsHandler),
        (url_path_join(root, "jobs", name) + "/?", JobHandler),
        (url_path_join(root, "jobs", name, "logs") + "/?", JobLogsHandler),
        (url_path_join(root, "jobs", name, "cancel") + "/?", JobCancelHandler),
        (url_path_join(root, "jobs", name, "events") + "/?", JobEventsHandler),
        (
            url_path_join(root, "jobs", name, r"(?P<action>suspend|resume)") + "/?",
            JobLifecycleHandler,
        ),
    ]
