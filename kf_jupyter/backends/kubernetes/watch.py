"""List-then-watch of TrainJobs or pods that survives 410 Gone and dropped connections.

One `ObjectWatch` costs one LIST and then one long WATCH request; it only sends another request
when the server ends the watch (its timeout, a restart, a dropped connection: reconnect from the
last resourceVersion after a short back-off) or says the resourceVersion is too old (410: list
again, reported as a `SYNC`). It never polls on a timer.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ...errors import BackendError
from .errors import Where, is_api_exception, retryable

SYNC = "SYNC"  # a full list: (SYNC, [objects])
MAX_WATCH_SECONDS = 290  # server-side watch timeout when there is no deadline
BACKOFF_START, BACKOFF_MAX = 0.2, 2.0
# After a lost connection, how long a 404 (a restarting API server not serving a CRD yet) is
# retried rather than reported.
RECOVERY_SECONDS = 30.0


def iter_lines(resp: Any, keep_partial: bool = False) -> Iterator[bytes]:
    """Complete lines of a streamed urllib3 response as they arrive (without the newline).

    A connection that breaks mid-line raises (urllib3 ProtocolError) and the partial line is
    dropped; at a clean end the last unterminated line is yielded only if `keep_partial`.
    """
    buf = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        if not chunk:
            continue
        buf += chunk
        if b"\n" not in buf:
            continue
        *lines, buf = buf.split(b"\n")
        yield from lines
    if buf and keep_partial:
        yield buf


class ObjectWatch:
    """Events of one kind of object: `(SYNC, items)`, then `(ADDED|MODIFIED|DELETED, obj)`.

    `list_fn(**kw)` and `watch_fn(resource_version, timeout_seconds)` return raw urllib3
    responses (made with `_preload_content=False`); `on_error` turns an exception into the
    kf-jupyter error to raise. Iteration ends at `deadline` (time.monotonic) or on `close()`.
    """

    def __init__(
        self,
        list_fn: Callable[[], Any],
        watch_fn: Callable[[str, int], Any],
        on_error: Callable[[BaseException], Exception],
        deadline: float | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self._list_fn = list_fn
        self._watch_fn = watch_fn
        self._on_error = on_error
        self.deadline = deadline
        self.stop = stop or threading.Event()
        self._resp: Any = None
        self._lock = threading.Lock()
        self.reconnects = 0
        self.relists = 0

    def close(self) -> None:
        """Stop iterating (from any thread): ends a blocked read by closing the connection."""
        self.stop.set()
        with self._lock:
            resp = self._resp
        if resp is not None:
            _close(resp)

    def _remaining(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.monotonic()

    def _set_resp(self, resp: Any) -> None:
        with self._lock:
            self._resp = resp
        if self.stop.is_set():
            _close(resp)

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        rv: str | None = None
        backoff = BACKOFF_START
        recovering_until: float | None = None  # after a lost connection: when to stop forgiving
        while not self.stop.is_set() and self._remaining() > 0:
            try:
                if rv is None:
                    resp = self._list_fn()
                    data = json.loads(resp.data)
                    rv = str(data.get("metadata", {}).get("resourceVersion") or "")
                    yield SYNC, list(data.get("items") or [])
                    if self.stop.is_set():
                        return
                remaining = self._remaining()
                if remaining <= 0:
                    return
                seconds = max(1, math.ceil(min(MAX_WATCH_SECONDS, remaining)))
                resp = self._watch_fn(rv, seconds)
                self._set_resp(resp)
                for line in iter_lines(resp):
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    etype, obj = event.get("type"), event.get("object") or {}
                    if etype == "ERROR":
                        if obj.get("code") == 410:  # resourceVersion too old: list again
                            rv = None
                            self.relists += 1
                            break
                        raise BackendError(
                            f"The watch ended with an error: {obj.get('message', obj)}"
                        )
                    new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if new_rv:
                        rv = str(new_rv)
                    backoff = BACKOFF_START
                    recovering_until = None
                    if etype == "BOOKMARK":
                        continue
                    yield str(etype), obj
                    if self.stop.is_set():
                        return
                # a clean end: the server's timeout (or a graceful shutdown): watch again
                if rv is not None:
                    self.reconnects += 1
            except GeneratorExit:
                raise
            except Exception as exc:
                if self.stop.is_set():
                    return
                if is_api_exception(exc) and getattr(exc, "status", 0) == 410:
                    rv = None
                    self.relists += 1
                    continue
                starting = (  # a restarted API server 404s a CRD's path until it serves it
                    recovering_until is not None
                    and time.monotonic() < recovering_until
                    and is_api_exception(exc)
                    and getattr(exc, "status", 0) == 404
                )
                if not retryable(exc) and not _broken_stream(exc) and not starting:
                    raise self._on_error(exc) from None
                if recovering_until is None:
                    recovering_until = time.monotonic() + RECOVERY_SECONDS
                self.reconnects += 1
                wait = min(backoff, max(0.0, self._remaining()))
                self.stop.wait(wait)
                backoff = min(backoff * 2, BACKOFF_MAX)
            finally:
                with self._lock:
                    resp, self._resp = self._resp, None
                if resp is not None:
                    _close(resp)


def _broken_stream(exc: BaseException) -> bool:
    """A read that broke mid-stream (json of a half line, a reset)."""
    return isinstance(exc, ValueError | OSError) and not isinstance(exc, BackendError)


def _close(resp: Any) -> None:
    for meth in ("shutdown", "close", "release_conn"):
        fn = getattr(resp, meth, None)
        if fn is not None:
            try:
                fn()
            except Exception:
                pass


def watch_where(kind: str, namespace: str, name: str | None = None) -> Where:
    """The `Where` of a watch (for error messages)."""
    return Where("watch", kind, namespace, name)
