"""One WebSocket per page that carries every live monitor's and job panel's updates.

Browsers open at most 6 HTTP/1.1 connections per host. A log stream held open per monitor (the
SSE route `jobs/{name}/logs?follow=1`) therefore took every connection once six monitors were
live, and saving, the file browser and the sidebar waited behind them (issue 20). The lab
extension now opens one socket, `<base_url>kf-jupyter/api/stream`, and multiplexes over it:

Client to server (JSON text frames):
- `{"op": "logs", "id": ID, "job": NAME, "backend": B, "namespace": NS, "tail": N}`: follow a
  job's log (the last N lines first, then new ones) until the job ends.
- `{"op": "job", "id": ID, "job": NAME, "backend": B, "namespace": NS, "interval": S,
  "events": BOOL}`: the job's record (and events), sent whenever it changes, polled every S s
  until the job has finished.
- `{"op": "refresh", "id": ID}`: poll a `job` subscription now (after Suspend, say).
- `{"op": "close", "id": ID}`: end a subscription.

Server to client: `{"id": ID, "type": T, ...}` with T one of `records` (`records`: a list of
`{"source", "line"}`), `end` (the log is complete; `status`), `job` (`job`), `events`
(`events`), `queued` (a `logs` subscription waits for one of the page's own log streams to end;
`share`: how many a page holds at once), `error` (`error`, `kind`, `status`: the REST route's
HTTP status; a `logs` subscription ends with it, a `job` one keeps polling except after 404).

Many subscriptions stay cheap (issue 38): every page's `job` subscriptions of one job share one
read (watch.py, batched per backend), and a page holds at most a quarter of the server's
`max_log_streams`, so one page cannot take every slot from the other tabs.

The socket is authenticated (the server's token or login cookie, as the kernel sockets) and
authorized (`read` on `kf_jupyter`), and refuses other origins (WebSocketMixin). It only reads:
Cancel, Suspend and Resume stay POST routes with the XSRF check.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from jupyter_core.utils import ensure_async
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import web, websocket

from ..errors import ValidationError
from .handlers import AUTH_RESOURCE, _job_name, _LogPump, error_body, status_of
from .state import validate_backend, validate_namespace

#: Subscriptions one socket may hold at once, a guard far above any page's views: a `job` one
#: ends (and stops counting) once its job is over, and the lab opens a few log ones at a time.
MAX_SUBSCRIPTIONS = 10_000
#: A page holds at most this share of the server's log streams (`max_log_streams` / 4, at
#: least one) at once; its other `logs` subscriptions wait in order, told `queued`, and start
#: as its own streams end: one page (a 150-trial sweep) cannot take every slot (issue 38).
PAGE_LOG_SHARE = 4
#: Largest client frame accepted (a subscription is a few hundred bytes).
MAX_FRAME = 16 * 1024
_MAX_TAIL = 1_000_000


def _subscription_id(raw: Any) -> str:
    if not isinstance(raw, str) or not 0 < len(raw) <= 64:
        raise ValidationError("Each message needs an id: a string of 1 to 64 characters.")
    return raw


def _int(raw: Any, default: int, low: int, high: int, what: str) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise ValidationError(f"Invalid {what} {raw!r}: give a whole number from {low} to {high}.")
    return raw


class StreamSocket(WebSocketMixin, websocket.WebSocketHandler, JupyterHandler):  # type: ignore[misc]
    """GET stream (WebSocket): every monitor's and panel's updates over one connection."""

    auth_resource = AUTH_RESOURCE

    @property
    def kf(self) -> Any:
        """The extension's shared state."""
        return self.settings["kf_jupyter"]

    @property
    def log_share(self) -> int:
        """Log streams this page may hold at once (the rest of its `logs` wait)."""
        return max(1, int(self.kf.max_log_streams) // PAGE_LOG_SHARE)

    @property
    def watcher(self) -> Any:
        """The server's one JobWatcher (every page's `job` subscriptions)."""
        from .watch import JobWatcher

        watcher = self.settings.get("kf_jupyter_watcher")
        if watcher is None:
            watcher = self.settings["kf_jupyter_watcher"] = JobWatcher(self.kf)
        return watcher

    async def pre_get(self) -> None:
        """Authenticate and authorize before the upgrade (403 otherwise)."""
        user = self.current_user
        if user is None:
            self.log.warning("kf-jupyter: unauthenticated stream socket refused")
            raise web.HTTPError(403)
        allowed = await ensure_async(
            self.authorizer.is_authorized(self, user, "read", AUTH_RESOURCE)
        )
        if not allowed:
            raise web.HTTPError(403)

    async def get(self, *args: Any, **kwargs: Any) -> None:
        """Upgrade to a WebSocket once the user is known and allowed."""
        await self.pre_get()
        res = super().get(*args, **kwargs)
        if res is not None:
            await res

    def open(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """A page connected."""
        self._subs: dict[str, asyncio.Task[None]] = {}
        self._jobs: dict[str, Any] = {}  # job subscriptions (watch.Subscriber), by id
        self._stops: dict[str, threading.Event] = {}
        self._closed = False
        self._log_slots = asyncio.Semaphore(self.log_share)
        super().open(*args, **kwargs)

    def on_message(self, message: str | bytes) -> None:
        """Start, poke or end a subscription."""
        if len(message) > MAX_FRAME:
            self._send_error("", ValidationError("Message too large."))
            return
        sid = ""
        try:
            body = json.loads(message)
            if not isinstance(body, dict):
                raise ValidationError("Each message is a JSON object with op and id.")
            sid = _subscription_id(body.get("id"))
            op = body.get("op")
            if op == "close":
                self._end(sid)
                return
            if op == "refresh":
                sub = self._jobs.get(sid)
                if sub is not None:
                    sub.refresh()
                return
            if op not in ("logs", "job"):
                raise ValidationError(f"Unknown op {op!r}: use logs, job, refresh or close.")
            name = _job_name(body.get("job") if isinstance(body.get("job"), str) else "")
            backend = validate_backend(body.get("backend") or None)
            namespace = validate_namespace(body.get("namespace") or None)
            self._end(sid)  # the same id again: the new subscription replaces the old one
            if len(self._subs) + len(self._jobs) >= MAX_SUBSCRIPTIONS:
                raise ValidationError(
                    f"This page already follows {MAX_SUBSCRIPTIONS} jobs over its connection; "
                    "close some monitors or job panels."
                )
            if op == "logs":
                tail = _int(body.get("tail"), 1000, 1, _MAX_TAIL, "tail")
                coro = self._logs(sid, backend, namespace, name, tail)
            else:
                interval = _int(body.get("interval"), 1000, 250, 60000, "interval (ms)")
                self._jobs[sid] = self.watcher.subscribe(
                    backend,
                    namespace,
                    name,
                    body.get("events") is True,
                    interval / 1000,
                    lambda kind, a, b, sid=sid: self._deliver(sid, kind, a, b),
                )
                return
        except json.JSONDecodeError:
            self._send_error(sid, ValidationError("Messages are JSON objects."))
            return
        except Exception as exc:
            self._send_error(sid, exc)
            return
        task = asyncio.ensure_future(coro)
        self._subs[sid] = task
        task.add_done_callback(lambda t, sid=sid: self._forget(sid, t))

    def _forget(self, sid: str, task: asyncio.Task[None]) -> None:
        if self._subs.get(sid) is task:
            del self._subs[sid]
            self._stops.pop(sid, None)

    def _end(self, sid: str) -> None:
        stop = self._stops.pop(sid, None)
        if stop is not None:
            self.kf.close_stream(stop)
        task = self._subs.pop(sid, None)
        if task is not None:
            task.cancel()
        sub = self._jobs.pop(sid, None)
        if sub is not None:
            sub.close()

    def on_close(self) -> None:
        """The page went away: stop every subscription and free its log-stream slots now."""
        self._closed = True
        for sid in [*getattr(self, "_subs", {}), *getattr(self, "_jobs", {})]:
            self._end(sid)

    def _deliver(self, sid: str, kind: str, a: Any, b: Any) -> None:
        """What the JobWatcher has for the job subscription `sid`: a record or events (field
        name, JSON text), an error (exception, final) or its end."""
        sub = self._jobs.get(sid)
        if kind == "end" or (kind == "error" and b):
            self._jobs.pop(sid, None)
        if kind == "error":
            self._send_error(sid, a)
            return
        if kind == "end" or sub is None:
            return
        if self._closed:
            self._jobs.pop(sid, None)
            sub.close()
            return
        self._post(f'{{"id": {json.dumps(sid)}, "type": "{kind}", "{a}": {b}}}')

    def _post(self, text: str) -> None:
        """Write a message without waiting for it to go out."""
        if self._closed:
            return
        try:
            done = self.write_message(text)
        except websocket.WebSocketClosedError:
            self.on_close()
            return
        done.add_done_callback(_consume)

    async def _send(self, sid: str, kind: str, **fields: Any) -> bool:
        if self._closed:
            return False
        try:
            await self.write_message(json.dumps({"id": sid, "type": kind, **fields}))
        except websocket.WebSocketClosedError:
            self._closed = True
            return False
        return True

    def _send_error(self, sid: str, exc: BaseException) -> None:
        status = status_of(exc)
        if status == 500:
            self.log.error("kf-jupyter: stream subscription %r failed", sid, exc_info=exc)
        if self._closed:
            return
        try:
            self.write_message(
                json.dumps({"id": sid, "type": "error", "status": status, **error_body(exc)})
            )
        except websocket.WebSocketClosedError:
            self._closed = True

    async def _logs(
        self, sid: str, backend: str, namespace: str | None, name: str, tail: int
    ) -> None:
        if self._log_slots.locked():  # told at once (no await: the order stays the page's)
            self._post(json.dumps({"id": sid, "type": "queued", "share": self.log_share}))
        async with self._log_slots:  # first thing: the page's streams start in its order
            await self._follow_logs(sid, backend, namespace, name, tail)

    async def _follow_logs(
        self, sid: str, backend: str, namespace: str | None, name: str, tail: int
    ) -> None:
        try:
            client = await self.kf.client(backend, namespace)
            await self.kf.run_on(backend, client.get_job, name)  # 404 before any record
            stop = self.kf.open_stream()
        except Exception as exc:
            self._send_error(sid, exc)
            return
        self._stops[sid] = stop
        pump = _LogPump(
            asyncio.get_running_loop(),
            lambda stop: client.iter_log_records(name, follow=True, tail_lines=tail, stop=stop),
            stop,
        )
        pump.start()
        try:
            async for batch in pump.batches(self.kf.keepalive_seconds):
                if batch is None:
                    continue  # the socket's own pings keep it alive
                records = [{"source": r.source, "line": r.line} for r in batch]
                if not await self._send(sid, "records", records=records):
                    return
            if stop.is_set():
                return
            if pump.error is not None:
                self.log.warning("kf-jupyter: log stream of %s ended with %r", name, pump.error)
                self._send_error(sid, pump.error)
                return
            status = None
            try:
                status = (await self.kf.run_on(backend, client.get_job, name)).status
            except Exception:
                pass
            await self._send(sid, "end", status=status)
        finally:
            pump.cancel()
            self.kf.close_stream(stop)


def _consume(future: Any) -> None:
    """Retrieve a write's outcome (a page gone meanwhile is no error to log)."""
    if not future.cancelled():
        future.exception()
