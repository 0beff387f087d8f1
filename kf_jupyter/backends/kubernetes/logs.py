"""Logs of a TrainJob's pods: read them, follow them, and find the function's result in them.

`LogsMixin` holds the backend calls. `LogFollower` follows the logs of every pod of a job at once,
as one generator of tagged records: two watches (the TrainJob, and the job's pods) tell the follower when pods appear, start and
end, and when the job ends. Each pod that has started gets a reader thread that streams its log
(`follow=true`) and counts the lines it has passed on; after a dropped connection it reconnects
and skips that many lines, so no line is repeated or lost (a partial last line is held back until
the pod has ended). The generator ends when the job has ended and every reader has finished.
"""

from __future__ import annotations

import collections
import contextlib
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

from ...constants import CLUSTER_RUNTIME_KIND, LAUNCHER_JOB, RESULT_PREFIX, RUNTIME_KIND
from ...errors import (
    BackendError,
    JobFailedError,
    JobNotFoundError,
    JobStateError,
    KFJupyterError,
    ValidationError,
)
from ...logview import UPDATE, UPDATE_BYTES, collapse_cr, followed_line, log_lines, terminal_line
from ...types import COMPLETE, FAILED, LogRecord, TrainJob
from ..base import human_records, tag_records
from .api import REQUEST_TIMEOUT, KubeApi
from .errors import Where, is_api_exception, retryable
from .jobs import JobsMixin
from .logstore import LogStore, attempt_header
from .pods import newest_pods, pod_container, pod_selector, pod_source
from .restarts import failed_runs, restart_count
from .watch import BACKOFF_MAX, BACKOFF_START, SYNC, ObjectWatch, _close

ENDED = ("Succeeded", "Failed")
CLEAN_END_WAIT = 2.0  # a stream ended but the pod has not ended yet: wait this long for news
STOP_POLL_SECONDS = 0.25  # how often a silent follow checks its consumer's stop event


def _terminal(obj: dict[str, Any]) -> bool:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") in (COMPLETE, FAILED) and c.get("status") == "True":
            return True
    return False


def _container_running(pod: dict[str, Any]) -> bool:
    """The pod's trainer container is running (not terminated, not waiting to restart)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any((cs.get("state") or {}).get("running") for cs in statuses[:1])


def _started(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") in ("Running", *ENDED):
        return True
    return any(
        (cs.get("state") or {}).get("running") or (cs.get("state") or {}).get("terminated")
        for cs in status.get("containerStatuses") or []
    )


class _Reader(threading.Thread):
    """Streams one pod's log into the follower's queue; resumes by line count."""

    def __init__(self, follower: LogFollower, pod: dict[str, Any]) -> None:
        super().__init__(daemon=True, name=f"kf-log-{pod['metadata']['name']}")
        self.f = follower
        self.pod_name = pod["metadata"]["name"]
        self.container = pod_container(pod)
        self.source = pod_source(pod)[2]
        self.phase = str((pod.get("status") or {}).get("phase") or "Pending")
        self.restarts = restart_count(pod)  # the container a plain log read serves (restarts.py)
        self.running = _container_running(pod)
        self.deleted = False
        self.cond = threading.Condition()
        self._version = 0
        self._resp: Any = None
        self.reconnects = 0
        self._shown = ""  # the last update record of the line being written

    def update(self, pod: dict[str, Any] | None) -> None:
        """The pod changed (or was deleted, when None)."""
        with self.cond:
            if pod is None:
                if not self.deleted:
                    # A deleted pod's stream should end with its container; if it does not (a
                    # kubelet that keeps it open), end it ourselves rather than wait forever.
                    timer = threading.Timer(CLEAN_END_WAIT, self.close)
                    timer.daemon = True
                    timer.start()
                self.deleted = True
            else:
                self.phase = str((pod.get("status") or {}).get("phase") or self.phase)
                self.restarts = max(self.restarts, restart_count(pod))
                self.running = _container_running(pod)
            self._version += 1
            self.cond.notify_all()

    def _wait_change(self, seconds: float) -> None:
        with self.cond:
            seen = self._version
            self.cond.wait_for(lambda: self._version != seen or self.f.stop.is_set(), seconds)

    def close(self) -> None:
        """Unblock a read (the follower is closing)."""
        resp = self._resp
        if resp is not None:
            _close(resp)
        with self.cond:
            self.cond.notify_all()

    def _open(self, follow: bool) -> Any:
        resp = self.f.backend.core.read_namespaced_pod_log(
            self.pod_name,
            self.f.backend.namespace,
            container=self.container,
            follow=follow,
            _preload_content=False,
            _request_timeout=(10, None) if follow else (10, 120),
        )
        self._resp = resp
        if self.f.stop.is_set():
            _close(resp)
        return resp

    def _emit(self, raw: bytes, follow: bool = False) -> None:
        text = raw.decode("utf-8", "replace")
        # a bar: its last state; following, a bar stays live across a print (followed_line)
        lines = followed_line(text) if follow else [terminal_line(text)]
        self._shown = ""
        for line in lines:
            self.f.keep(self.source, line)
            self.f.q.put(("line", LogRecord(self.source, line)))

    def _emit_update(self, partial: bytearray) -> None:
        """A progress bar still being written (`\\r` redraws, no newline yet): its current state
        as one update record (see kf_jupyter.logview), as the local backend sends it.

        Looks at the end of the line only, however long the bar has run.
        """
        tail = bytes(partial[-UPDATE_BYTES:])
        if b"\r" not in tail.rstrip(b"\r"):
            return
        text = collapse_cr(tail.decode("utf-8", "replace"))
        if text.strip() and text != self._shown:
            self._shown = text
            self.f.q.put(("line", LogRecord(self.source, UPDATE + text)))

    def _previous_rest(self, skip: int) -> None:
        """The end of the container run that was restarted under a broken stream: its log is
        now the previous one (`previous=true`), past the `skip` lines passed on."""
        try:
            resp = self.f.backend.core.read_namespaced_pod_log(
                self.pod_name,
                self.f.backend.namespace,
                container=self.container,
                previous=True,
                _preload_content=False,
                _request_timeout=(10, 120),
            )
            lines = resp.data.split(b"\n")
        except Exception:
            return  # gone with its pod: what was passed on is what there is
        if lines and lines[-1] == b"":
            lines.pop()
        for raw in lines[skip:]:
            self._emit(raw)

    def _next_run(self, opened: int, clean: bool, pos: int) -> bool:
        """After a stream ended: True when the container it read (the `opened`-th restart) has
        been restarted since; then the next run's lines start from 0 under an attempt line."""
        if self.restarts <= opened:
            return False
        if not clean and self.restarts == opened + 1:
            self._previous_rest(pos)
        line = attempt_header(self.source, self.restarts + 1)
        self.f.keep(self.source, line)
        self.f.q.put(("line", LogRecord(self.source, line)))
        return True

    def _tail(self, n: int) -> int:
        """Pass on the last n lines logged so far; return how many lines exist (the offset)."""
        last: collections.deque[bytes] = collections.deque(maxlen=n)
        count, buf = 0, b""
        resp = self._open(follow=False)
        for chunk in resp.stream(amt=None, decode_content=False):
            buf += chunk
            *lines, buf = buf.split(b"\n")
            count += len(lines)
            last.extend(lines)
        for raw in last:
            self._emit(raw)
        return count

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:
            if not self.f.stop.is_set():
                self.f.q.put(("error", exc))
        finally:
            self.f.q.put(("done", self))

    def _run(self) -> None:
        pos = 0  # complete lines passed on so far (the resume offset)
        backoff = BACKOFF_START
        tail = self.f.tail_lines
        # A plain log read serves the container of the pod's restartCount (running, else
        # terminated, else lastState's: kubelet validateContainerLogStatus); `opened` is it.
        opened = self.restarts
        if opened and tail is None:
            line = attempt_header(self.source, opened + 1)
            self.f.keep(self.source, line)
            self.f.q.put(("line", LogRecord(self.source, line)))
        while not self.f.stop.is_set():
            skip, buf, clean = pos, bytearray(), False
            try:
                if tail is not None:
                    pos = self._tail(tail)
                    tail = None
                    continue
                opened = self.restarts
                resp = self._open(follow=True)
                for chunk in resp.stream(amt=None, decode_content=False):
                    buf += chunk  # a bytearray: a bar redrawn for hours costs its length
                    if b"\n" not in chunk:
                        if not skip:
                            self._emit_update(buf)
                        continue
                    *lines, rest = buf.split(b"\n")
                    buf = bytearray(rest)
                    for raw in lines:
                        if skip:
                            skip -= 1
                            continue
                        pos += 1
                        self._emit(raw, follow=True)
                    if buf and not skip:
                        self._emit_update(buf)
                clean = True
                backoff = BACKOFF_START
            except Exception as exc:
                if self.f.stop.is_set():
                    return
                code = getattr(exc, "status", None) if is_api_exception(exc) else None
                if code == 404:
                    return  # the pod is gone
                if code == 400:  # not started yet (or no such container): wait for news
                    if self.deleted or (self.phase in ENDED and self.f.job_done):
                        return
                    self._wait_change(1.0)
                    continue
                if not (retryable(exc) or isinstance(exc, OSError | ValueError)):
                    where = Where("get", "pods/log", self.f.backend.namespace, self.pod_name)
                    raise self.f.backend._error(exc, where) from None
            finally:
                resp, self._resp = self._resp, None
                if resp is not None:
                    _close(resp)
            if self.f.stop.is_set():
                return
            ended = self.deleted or self.phase in ENDED
            if clean and buf and skip == 0 and (ended or self.restarts > opened or not
                                                self.running):  # fmt: skip
                pos += 1
                self._emit(buf)  # the last line had no newline (its container ended)
                buf = bytearray()
            if clean and ended:
                return
            self.reconnects += 1
            if self._next_run(opened, clean, pos):
                pos = 0  # a new container: its log starts empty
                continue
            if clean:
                # The pod's end, or (restartPolicy OnFailure) the container's restart, has not
                # reached us yet: a container that ended is not read again from `pos` (the
                # kubelet may serve the next run there by then), only a running one.
                self._wait_change(CLEAN_END_WAIT)
                while not (self.running or self.deleted or self.phase in ENDED
                           or self.restarts > opened or self.f.stop.is_set()):  # fmt: skip
                    self._wait_change(CLEAN_END_WAIT)
                if self._next_run(opened, True, pos):
                    pos = 0
            else:
                self.f.stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)


class LogFollower:
    """`records()` yields the log records of every pod of a job until the job ends."""

    def __init__(
        self,
        backend: KubeApi,
        name: str,
        step: str | None,
        tail_lines: int | None,
        stop: threading.Event | None = None,
    ) -> None:
        self.backend = backend
        #: Set by the consumer (another thread) to end `records()` soon, even while no line comes.
        self.caller_stop = stop
        self.name = name
        self.step = step
        self.tail_lines = tail_lines
        self.q: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.stop = threading.Event()
        self.job_done = False
        self.readers: dict[str, _Reader] = {}  # by pod uid
        self.running: set[_Reader] = set()
        # the client's copy of every line followed from the start (logstore.py); lines read
        # before the TrainJob (its uid) is known wait in `_early`
        self.store: LogStore | None = None
        self._early: list[tuple[str, str]] | None = [] if tail_lines is None else None
        self._keep_lock = threading.Lock()

    def keep(self, source: str, line: str) -> None:
        """Copy a passed-on line into the job's kept logs (follows from the start only)."""
        with self._keep_lock:
            if self.store is not None:
                self.store.append(source, line)
            elif self._early is not None:
                self._early.append((source, line))

    def _open_store(self, obj: dict[str, Any]) -> None:
        with self._keep_lock:
            if self._early is None or self.store is not None or not obj:
                return
            self.store = LogStore.of(self.backend.namespace, obj)
            for source, line in self._early:
                self.store.append(source, line)
            self._early = []

    def _wanted(self, pod: dict[str, Any]) -> bool:
        if self.step is None:
            return True
        rjob, _, source = pod_source(pod)
        return self.step in (source, rjob)

    def _pump(self, tag: str, watch: ObjectWatch) -> None:
        try:
            for etype, payload in watch:
                self.q.put((tag, etype, payload))
        except Exception as exc:
            if not self.stop.is_set():
                self.q.put(("error", exc))

    def _on_pod(self, pod: dict[str, Any], deleted: bool = False) -> None:
        uid = pod.get("metadata", {}).get("uid") or pod.get("metadata", {}).get("name")
        reader = self.readers.get(uid)
        if reader is not None:
            reader.update(None if deleted else pod)
            return
        if deleted or not self._wanted(pod) or not _started(pod):
            return
        reader = _Reader(self, pod)
        self.readers[uid] = reader
        self.running.add(reader)
        reader.start()

    def _sync_pods(self, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            seen.add(pod.get("metadata", {}).get("uid"))
            self._on_pod(pod)
        for uid, reader in self.readers.items():
            if uid not in seen:
                reader.update(None)

    def records(self) -> Iterator[LogRecord]:
        """The generator (see the module docstring)."""
        job_watch = self.backend.trainjob_watch(self.name, stop=self.stop)
        pod_watch = self.backend.pod_watch(pod_selector(self.name), stop=self.stop)
        threads = [
            threading.Thread(target=self._pump, args=("job", job_watch), daemon=True),
            threading.Thread(target=self._pump, args=("pod", pod_watch), daemon=True),
        ]
        job_seen = False
        try:
            threads[0].start()
            threads[1].start()
            while True:
                try:
                    item = self.q.get(timeout=STOP_POLL_SECONDS)
                except queue.Empty:
                    if self.caller_stop is not None and self.caller_stop.is_set():
                        break
                    continue
                kind = item[0]
                if kind == "line":
                    yield item[1]
                    continue
                if kind == "error":
                    raise item[1]
                if kind == "done":
                    self.running.discard(item[1])
                elif kind == "job":
                    etype, payload = item[1], item[2]
                    if etype == SYNC and not payload and not job_seen:
                        raise JobNotFoundError(
                            f"No TrainJob named {self.name!r} in namespace "
                            f"{self.backend.namespace!r}. List the jobs with client.list_jobs()."
                        )
                    job_seen = True
                    obj = payload[0] if etype == SYNC and payload else payload
                    if isinstance(obj, dict):
                        self._open_store(obj)
                    ended = etype == "DELETED" or (etype == SYNC and not payload)
                    if (ended or _terminal(obj)) and not self.job_done:
                        self.job_done = True
                        # the pod watch may lag the job's: make sure every started pod is read
                        self._sync_pods(self.backend._list_pods(pod_selector(self.name)))
                elif kind == "pod":
                    etype, payload = item[1], item[2]
                    if etype == SYNC:
                        self._sync_pods(payload)
                    else:
                        self._on_pod(payload, deleted=etype == "DELETED")
                if self.job_done and not self.running:
                    break
        finally:
            self.stop.set()
            job_watch.close()
            pod_watch.close()
            for reader in list(self.readers.values()):
                reader.close()
            if self.store is not None:
                self.store.close()


class LogsMixin(JobsMixin):
    """The log calls of the backend protocol, and the result read from rank 0's log."""

    def _select_pods(self, pods: list[dict[str, Any]], step: str | None) -> list[dict[str, Any]]:
        chosen = newest_pods(pods)
        if step is None:
            return chosen
        return [p for p in chosen if pod_source(p)[2] == step or pod_source(p)[0] == step]

    def _read_log(
        self, pod: dict[str, Any], tail_lines: int | None, previous: bool = False
    ) -> list[str]:
        meta = pod["metadata"]
        kwargs: dict[str, Any] = {"container": pod_container(pod)}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if previous:
            kwargs["previous"] = True
        try:
            resp = self.core.read_namespaced_pod_log(
                meta["name"],
                self.namespace,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
                **kwargs,
            )
            data = resp.data
        except Exception as exc:
            if getattr(exc, "status", None) in (400, 404):  # not started yet / gone
                return []
            raise self._error(exc, Where("get", "pods/log", self.namespace, meta["name"])) from None
        return log_lines(data.decode("utf-8", "replace"))

    def iter_log_records(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[LogRecord]:
        """Log lines of every pod of the job (node-N, launcher, ...), each tagged with its source.

        Without follow: what each pod has logged so far, pod after pod. With follow: waits for
        the pods to appear and start, streams them all at once until the job ends, and resumes a
        dropped stream without repeating lines (docs/kubernetes-backend.md).
        """
        if tail_lines is not None and (
            isinstance(tail_lines, bool) or not isinstance(tail_lines, int) or tail_lines < 0
        ):
            raise ValidationError(f"tail_lines must be a whole number ≥ 0, got {tail_lines!r}.")
        if follow:
            return LogFollower(self, name, step, tail_lines, stop=stop).records()
        return self._static_records(name, step, tail_lines)

    def _pod_runs(self, pod: dict[str, Any], tail_lines: int | None) -> list[str]:
        """A pod's log; of a restarted container the previous run's too, under attempt lines."""
        count = restart_count(pod)
        previous: list[str] = []
        if not count and failed_runs(pod):
            # it failed and the kubelet may have restarted it at once since (the first restart
            # has no back-off): then the failed run is the previous one
            previous = self._read_log(pod, None, previous=True)
            count = 1 if previous else 0
        current = self._read_log(pod, tail_lines)
        if not count:
            return current
        source = pod_source(pod)[2]
        lines = [
            *(
                [attempt_header(source, count)] if count > 1 else []
            ),  # the runs before are gone from the cluster
            *(previous or self._read_log(pod, None, previous=True)),
            attempt_header(source, count + 1),
            *current,
        ]
        return lines[-tail_lines:] if tail_lines else ([] if tail_lines == 0 else lines)

    def _static_records(
        self, name: str, step: str | None, tail_lines: int | None
    ) -> Iterator[LogRecord]:
        obj = self._get_trainjob(name)  # JobNotFoundError first
        store = LogStore.of(self.namespace, obj)
        pods = self._select_pods(self._list_pods(pod_selector(name)), step)
        have = set()
        for pod in pods:
            source = pod_source(pod)[2]
            have.add(source)
            kept = store.read(source) if restart_count(pod) else None
            lines = self._pod_runs(pod, tail_lines)
            if kept is not None and len(kept) > len(lines) and tail_lines is None:
                lines = kept  # a follow saw more runs than the kubelet keeps
            for line in lines:
                yield LogRecord(source, line)
        # pods that are gone (a Job that gave up, a job kf-jupyter stopped): the kept copy
        for source in store.sources():
            if source in have or (
                step is not None and step not in (source, source.rsplit("-", 1)[0])
            ):
                continue
            kept = store.read(source) or []
            if tail_lines is not None:
                kept = kept[-tail_lines:] if tail_lines else []
            for line in kept:
                yield LogRecord(source, line)

    def _keep_logs(self, obj: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        """Save what the trainer pods still have (every run the kubelet keeps) before the job
        is stopped and they are deleted."""
        store = LogStore.of(self.namespace, obj)
        with contextlib.suppress(KFJupyterError):  # fresher: the kubelet restarts at once
            pods = self._list_pods(pod_selector(str(obj["metadata"]["name"])))
        for pod in newest_pods(pods):
            try:
                store.save(pod_source(pod)[2], self._pod_runs(pod, None))
            except KFJupyterError:
                continue

    def log_sources(self, job: TrainJob, step: str | None) -> list[str]:
        """The sources a job's logs come from (node-0..N-1, the launcher of MPI jobs, ...)."""
        sources = {s.name for s in job.steps}
        sources.update(f"node-{i}" for i in range(job.num_nodes))
        cached = self._cached_runtimes()
        rt = cached.get((RUNTIME_KIND, job.runtime)) or cached.get(
            (CLUSTER_RUNTIME_KIND, job.runtime)
        )
        if rt is not None and rt.ml_policy == "mpi":
            sources.add(LAUNCHER_JOB)
        if step is not None:
            sources = {s for s in sources if s == step or s.rsplit("-", 1)[0] == step}
        return sorted(sources)

    def get_job_logs(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
    ) -> Iterator[str]:
        """Log lines, tagged `[node-N] ` when the job has more than one pod."""
        job = self.get_job(name)
        if job.reason == "MultiKueue" and not job.steps:
            raise JobStateError(
                f"TrainJob {name!r} runs on a MultiKueue worker cluster: its pods and their logs "
                "are there, not on this cluster. Read them with a kubeconfig for that cluster."
            )
        multi = len(self.log_sources(job, step)) > 1
        return tag_records(human_records(self, name, step, follow, tail_lines), multi)

    def get_job_result(self, name: str) -> Any:
        """The function's return value: the `##kf-jupyter:result` line of global rank 0's log."""
        job = self.get_job(name)
        pods = newest_pods(self._list_pods(pod_selector(name)))
        launchers = [p for p in pods if pod_source(p)[0] == LAUNCHER_JOB]
        rank0 = launchers or [p for p in pods if pod_source(p)[2] == "node-0"]
        for pod in rank0:
            for line in reversed(self._read_log(pod, None)):
                idx = line.find(RESULT_PREFIX)
                if idx >= 0:
                    try:
                        return json.loads(line[idx + len(RESULT_PREFIX) :])
                    except ValueError:
                        raise BackendError(
                            f"The result line of TrainJob {name!r} is not valid JSON (the log "
                            "line may have been cut). Read it with client.get_job_logs()."
                        ) from None
        if job.status == FAILED:
            raise JobFailedError(
                f"TrainJob {name!r} failed ({job.reason}: {job.message}), so it has no result. "
                f"Read its logs with client.get_job_logs({name!r})."
            )
        if job.status != COMPLETE:
            raise BackendError(
                f"TrainJob {name!r} is {job.status} and has not printed a result yet. Wait with "
                f"client.wait_for_job_status({name!r}) first."
            )
        raise BackendError(
            f"TrainJob {name!r} completed but rank 0's log has no '{RESULT_PREFIX.strip()}' "
            "line: the job did not run a kf-jupyter function (a TrainerCommand option), or the "
            "pod's log is gone. Read what is left with client.get_job_logs()."
        )
