"""TEST STAND-IN logic: how the Trainer v2.3.0 retries a failed reconcile and records it.

- Retries: ``TrainJobReconciler.Reconcile`` returns the error (trainjob_controller.go:104-139),
  and controller-runtime requeues the TrainJob through its default rate limiter (the Trainer
  passes ``controller.Options{}``, cmd/trainer-controller-manager/main.go:162): the larger of a
  per-item exponential back-off (5 ms doubled per failure, at most 1000 s) and an overall token
  bucket (10 per second, burst 100) (client-go util/workqueue/default_rate_limiters.go
  ``DefaultTypedControllerRateLimiter``). ``Backoff`` gives those delays.
- Events: the reconciler records through ``mgr.GetEventRecorder`` (pkg/controller/setup.go:44),
  an events.k8s.io/v1 recorder (client-go tools/events): the first failure creates an Event
  (``eventTime``, ``note``, ``action: Reconciling``, ``reportingController``); an isomorphic one
  (same type, action, reason, controller, instance, regarding) does not create another: the
  second turns it into a series, patched at once with ``series: {count: 2, lastObservedTime}``;
  later ones only raise the count in the recorder's cache, written when the cache is refreshed
  (every 30 min) or the series ends (6 min without one) (event_broadcaster.go ``recordToSink``,
  ``refreshExistingEventSeries``, ``finishSeries``). The note stays the first failure's.
  ``EventSeriesRecorder`` does that against the harness's API server; ``flush`` is the refresh.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from typing import Any

BASE_DELAY = 0.005
MAX_DELAY = 1000.0
BUCKET_QPS, BUCKET_BURST = 10.0, 100
CONTROLLER = "trainer-trainjob-controller"


class Backoff:
    """controller-runtime's default rate limiter for one queue: ``when(item)`` is the delay
    before the item's next try; ``forget(item)`` after a success."""

    def __init__(self) -> None:
        self._failures: dict[str, int] = {}
        self._tokens = float(BUCKET_BURST)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def when(self, item: str) -> float:
        with self._lock:
            n = self._failures.get(item, 0)
            self._failures[item] = n + 1
            item_delay = min(BASE_DELAY * 2**n, MAX_DELAY)
            now = time.monotonic()
            self._tokens = min(BUCKET_BURST, self._tokens + (now - self._last) * BUCKET_QPS)
            self._last = now
            self._tokens -= 1
            bucket_delay = max(0.0, -self._tokens / BUCKET_QPS)
            return max(item_delay, bucket_delay)

    def failures(self, item: str) -> int:
        with self._lock:
            return self._failures.get(item, 0)

    def forget(self, item: str) -> None:
        with self._lock:
            self._failures.pop(item, None)


def _micro(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventSeriesRecorder:
    """client-go's events.k8s.io recorder for the stand-in's Trainer controller."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._api = client.EventsV1Api(api_client)
        self._instance = f"{CONTROLLER}-{os.uname().nodename}"
        self._cache: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def warning(self, obj: dict[str, Any], reason: str, action: str, note: str) -> None:
        """Record one Warning about `obj` (a TrainJob)."""
        meta = obj["metadata"]
        regarding = {
            "apiVersion": obj.get("apiVersion", "trainer.kubeflow.org/v1alpha1"),
            "kind": obj.get("kind", "TrainJob"),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        }
        key = ("Warning", action, reason, CONTROLLER, self._instance, tuple(sorted(
            (k, str(v)) for k, v in regarding.items())))  # fmt: skip
        now = time.time()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached.get("series"):
                cached["series"]["count"] += 1
                cached["series"]["lastObservedTime"] = _micro(now)
                return
            if cached is not None:
                cached["series"] = {"count": 2, "lastObservedTime": _micro(now)}
                body = dict(cached)
            else:
                body = {
                    "apiVersion": "events.k8s.io/v1",
                    "kind": "Event",
                    "metadata": {
                        "name": f"{meta['name']}.{int(now * 1e9):x}",
                        "namespace": meta["namespace"],
                    },
                    "eventTime": _micro(now),
                    "reportingController": CONTROLLER,
                    "reportingInstance": self._instance,
                    "action": action,
                    "reason": reason,
                    "regarding": regarding,
                    "note": note,
                    "type": "Warning",
                }
                self._cache[key] = body
                body = dict(body)
        self._write(body)

    def flush(self) -> None:
        """refreshExistingEventSeries: write every series' current count and time."""
        with self._lock:
            bodies = [dict(b) for b in self._cache.values() if b.get("series")]
        for body in bodies:
            self._write(body)

    def _write(self, body: dict[str, Any]) -> None:
        from kubernetes.client.rest import ApiException

        meta = body["metadata"]
        try:
            if body.get("series"):
                patch = {"series": dict(body["series"])}
                try:
                    self._api.patch_namespaced_event(meta["name"], meta["namespace"], patch)
                    return
                except ApiException as e:
                    if e.status != 404:
                        raise
            self._api.create_namespaced_event(meta["namespace"], body)
        except ApiException:
            pass  # the real recorder gives up on a refused event too (recordEvent)
