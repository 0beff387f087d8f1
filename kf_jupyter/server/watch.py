"""Job records followed for every page at once: the stream socket's `job` subscriptions.

A job is read once per interval however many subscriptions follow it (pages, tabs, a sweep
view and a job panel of the same job), and every subscriber is sent what changed for it. The
jobs of one backend and namespace that are due together are read in one worker call (a chunk
at a time: 64 local jobs, one Kubernetes job, so a call stays within the cluster's timeout),
one after the other: a page following 1,000 jobs holds one API thread at a time, not the
whole pool, so `GET jobs` and the other pages never wait behind its reads (issue 38: 1,024
job subscriptions, each polled on its own, slowed `GET jobs` from ~10 ms to 6.6-11.7 s). A
group whose reads took T seconds waits at least 2T before reading again, so the reads take
at most a third of a thread however many jobs are followed (each then is read less often).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from .handlers import status_of

#: Jobs read per worker call (local; a Kubernetes call reads one: each is a request).
LOCAL_CHUNK = 64
#: The longest wait after failed reads (the interval doubles up to this).
MAX_BACKOFF = 60.0

#: What a subscriber is sent: (type, field name, JSON text of the field) or, for an error,
#: ("error", exception, final).
Deliver = Callable[[str, Any, Any], None]


class Subscriber:
    """One subscription's view of a job: what it asked for and what it was last sent."""

    def __init__(self, watch: _Watch, events: bool, interval: float, deliver: Deliver) -> None:
        self.watch = watch
        self.events = events
        self.interval = interval
        self.deliver = deliver
        self.sent_job: str | None = None
        self.sent_events: str | None = None
        self.closed = False

    def refresh(self) -> None:
        """Read the job now (after Suspend or Resume)."""
        if not self.closed:
            self.watch.due = 0.0
            self.watch.group.wake.set()

    def close(self) -> None:
        """Stop following (the job is read no more once nobody follows it)."""
        if not self.closed:
            self.closed = True
            self.watch.drop(self)


class _Watch:
    """One job, read for all of its subscribers."""

    def __init__(self, group: _Group, name: str) -> None:
        self.group = group
        self.name = name
        self.subs: list[Subscriber] = []
        self.due = 0.0
        self.delay = 0.0  # after errors: the backed-off wait

    def drop(self, sub: Subscriber) -> None:
        if sub in self.subs:
            self.subs.remove(sub)
        if not self.subs:
            self.group.watches.pop(self.name, None)
            if not self.group.watches:
                self.group.wake.set()  # its loop ends now

    def interval(self) -> float:
        return min(s.interval for s in self.subs)

    def wants_events(self) -> bool:
        return any(s.events for s in self.subs)

    def deliver(self, body: Any, events: Any, error: BaseException | None, now: float) -> None:
        """Send each subscriber what changed for it; end the watch once the job is over."""
        from ..types import TERMINAL

        subs = list(self.subs)
        if error is not None:
            final = status_of(error) == 404
            for s in subs:
                s.deliver("error", error, final)
            if final:
                self._end(subs)
            else:
                self.delay = min(MAX_BACKOFF, max(self.delay, self.interval()) * 2)
                self.due = now + self.delay
            return
        self.delay = 0.0
        job_text = json.dumps(body)
        events_text = json.dumps(events) if events is not None else None
        for s in subs:
            if s.sent_job != job_text:
                s.sent_job = job_text
                s.deliver("job", "job", job_text)
            if s.events and events_text is not None and s.sent_events != events_text:
                s.sent_events = events_text
                s.deliver("events", "events", events_text)
        if body.get("status") in TERMINAL:
            self._end(subs)
        else:
            self.due = now + self.interval()

    def _end(self, subs: list[Subscriber]) -> None:
        for s in subs:
            s.closed = True
            s.deliver("end", None, None)
        self.subs.clear()
        self.group.watches.pop(self.name, None)


def _read(client: Any, items: list[tuple[str, bool]]) -> list[tuple[Any, Any, Any]]:
    """Blocking: (record, events or None, error) of each (name, with events)."""
    out: list[tuple[Any, Any, Any]] = []
    for name, with_events in items:
        try:
            body = client.get_job(name).to_dict()
            events = None
            if with_events:
                events = [e.to_dict() for e in client.get_job_events(name)]
            out.append((body, events, None))
        except Exception as exc:
            out.append((None, None, exc))
    return out


class _Group:
    """The jobs followed on one backend and namespace, read by one loop."""

    def __init__(self, watcher: JobWatcher, backend: str, namespace: str | None) -> None:
        self.watcher = watcher
        self.backend = backend
        self.namespace = namespace
        self.watches: dict[str, _Watch] = {}
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.rest = 0.0  # the least wait between two rounds of reads (twice the last round)

    async def run(self) -> None:
        kf = self.watcher.kf
        chunk = 1 if self.backend == "kubernetes" else LOCAL_CHUNK
        try:
            while self.watches:
                self.wake.clear()
                now = time.monotonic()
                due = [w for w in self.watches.values() if w.due <= now]
                started = time.monotonic()
                for i in range(0, len(due), chunk):
                    part = [w for w in due[i : i + chunk] if w.subs]
                    if not part:
                        continue
                    items = [(w.name, w.wants_events()) for w in part]
                    try:
                        client = await kf.client(self.backend, self.namespace)
                        results = await kf.run_on(self.backend, _read, client, items)
                    except Exception as exc:  # no client, or the call was not answered
                        results = [(None, None, exc)] * len(part)
                    done = time.monotonic()
                    for w, (body, events, error) in zip(part, results, strict=True):
                        if w.subs:
                            w.deliver(body, events, error, done)
                if due:
                    self.rest = 2 * (time.monotonic() - started)
                if not self.watches:
                    break
                next_due = min(w.due for w in self.watches.values())
                wait = max(next_due - time.monotonic(), self.rest if due else 0.0)
                if wait > 0:
                    try:
                        await asyncio.wait_for(self.wake.wait(), wait)
                    except TimeoutError:
                        pass
        finally:
            key = (self.backend, self.namespace)
            if self.watcher.groups.get(key) is self:
                del self.watcher.groups[key]


class JobWatcher:
    """Every `job` subscription of the server's stream sockets (one per server)."""

    def __init__(self, kf: Any) -> None:
        self.kf = kf
        self.groups: dict[tuple[str, str | None], _Group] = {}

    def subscribe(
        self,
        backend: str,
        namespace: str | None,
        name: str,
        events: bool,
        interval: float,
        deliver: Deliver,
    ) -> Subscriber:
        """Follow `name`: `deliver` gets its record (and events) whenever they change for
        this subscriber, errors, and `end` once the job is over (or gone)."""
        key = (backend, namespace)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(self, backend, namespace)
        watch = group.watches.get(name)
        if watch is None:
            watch = group.watches[name] = _Watch(group, name)
        sub = Subscriber(watch, events, interval, deliver)
        watch.subs.append(sub)
        watch.due = 0.0  # the new subscriber gets the record at once
        group.wake.set()
        if group.task is None or group.task.done():
            group.task = asyncio.ensure_future(group.run())
        return sub

    @property
    def followed(self) -> int:
        """How many distinct jobs are followed now."""
        return sum(len(g.watches) for g in self.groups.values())
