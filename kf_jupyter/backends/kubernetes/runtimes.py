"""Training runtimes of the cluster: ClusterTrainingRuntimes and the namespace's TrainingRuntimes."""

from __future__ import annotations

import logging
import time
from typing import Any

from ...constants import (
    CLUSTER_RUNTIME_KIND,
    CLUSTER_RUNTIME_PLURAL,
    FRAMEWORK_ANNOTATION,
    GROUP,
    RUNTIME_KIND,
    RUNTIME_PLURAL,
    VERSION,
)
from ...errors import BackendError, KFJupyterError, RuntimeNotFoundError, did_you_mean
from ...runtimes import Runtime
from .api import KubeApi
from .errors import Where

log = logging.getLogger("kf_jupyter.kubernetes")

RUNTIME_CACHE_SECONDS = 60.0


class RuntimesMixin(KubeApi):
    """Listing runtimes, and a short-lived cache of them for job details."""

    def _fetch_runtimes(self) -> dict[tuple[str, str], Runtime]:
        cluster = self._json(
            Where("list", CLUSTER_RUNTIME_PLURAL),
            self.custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            CLUSTER_RUNTIME_PLURAL,
        )
        local = self._json(
            Where("list", RUNTIME_PLURAL, self.namespace),
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            RUNTIME_PLURAL,
        )
        out: dict[tuple[str, str], Runtime] = {}
        for items, kind in ((cluster, CLUSTER_RUNTIME_KIND), (local, RUNTIME_KIND)):
            for obj in items.get("items") or []:
                rt = Runtime.from_manifest({**obj, "kind": obj.get("kind") or kind})
                out[(rt.kind, rt.name)] = rt
        with self._lock:
            self._runtime_cache = (time.monotonic(), out)
        return out

    def _cached_runtimes(self) -> dict[tuple[str, str], Runtime]:
        with self._lock:
            cache = self._runtime_cache
        if cache and time.monotonic() - cache[0] < RUNTIME_CACHE_SECONDS:
            return cache[1]
        try:
            return self._fetch_runtimes()
        except (BackendError, KFJupyterError) as exc:
            log.debug("runtimes unavailable for job details: %s", exc)
            return {}

    def list_runtimes(self, framework: str | None = None) -> list[Runtime]:
        """ClusterTrainingRuntimes and the namespace's TrainingRuntimes (namespaced wins a clash).

        Runtimes without the framework label are listed with framework `unknown`.
        """
        by_name: dict[str, Runtime] = {}
        for (kind, name), rt in sorted(self._fetch_runtimes().items()):
            if kind == RUNTIME_KIND or name not in by_name:
                by_name[name] = rt
        runtimes = sorted(by_name.values(), key=lambda r: r.name)
        if framework is not None:
            runtimes = [r for r in runtimes if r.framework == framework]
        return runtimes

    def get_runtime(self, name: str) -> Runtime:
        """One runtime by name (the namespace's TrainingRuntime wins over a cluster one)."""
        runtimes = self.list_runtimes()
        for rt in runtimes:
            if rt.name == name:
                return rt
        names = ", ".join(r.name for r in runtimes) or "none"
        raise RuntimeNotFoundError(
            f"No training runtime named {name!r} in namespace {self.namespace!r} or cluster-wide."
            f"{did_you_mean(name, (r.name for r in runtimes))} Available runtimes: {names}. Check the name with client.list_runtimes()."
        )

    def _runtime_of(self, obj: dict[str, Any], runtimes: dict[tuple[str, str], Runtime]) -> Any:
        ref = (obj.get("spec") or {}).get("runtimeRef") or {}
        kind = ref.get("kind") or CLUSTER_RUNTIME_KIND
        return runtimes.get((kind, ref.get("name", "")))

    @staticmethod
    def _needs_runtime(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        trainer = (obj.get("spec") or {}).get("trainer") or {}
        return not (
            (meta.get("annotations") or {}).get(FRAMEWORK_ANNOTATION)
            and trainer.get("numNodes")
            and trainer.get("numProcPerNode")
        )
