"""Events about a TrainJob, its JobSet, Jobs and pods."""

from __future__ import annotations

from datetime import datetime

from ...config import mask_secrets
from ...constants import STEP_NAMES
from ...progress import parse_time
from ...types import Event
from .api import KubeApi
from .errors import Where
from .pods import pod_selector


class EventsMixin(KubeApi):
    """`get_job_events`."""

    def get_job_events(self, name: str) -> list[Event]:
        """Events about the TrainJob, its JobSet, Jobs and pods, oldest first."""
        pods = {p["metadata"]["name"] for p in self._list_pods(pod_selector(name))}
        data = self._json(
            Where("list", "events", self.namespace),
            self.core.list_namespaced_event,
            self.namespace,
        )
        jobs = {f"{name}-{rj}-0" for rj in STEP_NAMES}
        out: list[Event] = []
        for ev in data.get("items") or []:
            inv = ev.get("involvedObject") or {}
            kind, oname = inv.get("kind"), inv.get("name")
            related = (
                (kind in ("TrainJob", "JobSet") and oname == name)
                or (kind == "Pod" and oname in pods)
                or (kind == "Job" and oname in jobs)
            )
            if not related:
                continue
            when = parse_time(
                (ev.get("series") or {}).get("lastObservedTime")
                or ev.get("lastTimestamp")
                or ev.get("eventTime")
                or ev.get("firstTimestamp")
            )
            out.append(
                Event(
                    time=when,
                    type=str(ev.get("type") or ""),
                    reason=str(ev.get("reason") or ""),
                    message=mask_secrets(str(ev.get("message") or "")),
                    involved_object=f"{kind}/{oname}",
                )
            )
        out.sort(key=lambda e: (e.time is None, e.time or datetime.min))
        return out
