"""The Kubernetes backend: TrainJobs on a cluster running Kubeflow Trainer v2.

Uses the official `kubernetes` client (imported when the backend is created, never by
`import kf_jupyter`). The class is assembled from one module per concern, each building on the
request layer (`api.KubeApi`): `runtimes`, `jobs` (submit, list, get, delete, wait), `logs`
(read, follow, result) and `events`; `pods` and `status` are pure functions of the API's JSON.
See docs/kubernetes-backend.md for the request budget of each call.
"""

from __future__ import annotations

from ...errors import WaitTimeoutError
from ...progress import parse_time
from .api import REQUEST_TIMEOUT, SA_NAMESPACE_FILE
from .errors import trainer_missing
from .events import EventsMixin
from .logs import LogsMixin
from .pods import (
    POD_SELECTOR,
    newest_pods,
    pod_container,
    pod_phase,
    pod_selector,
    pod_source,
    pod_step,
)
from .runtimes import RUNTIME_CACHE_SECONDS
from .status import job_status


class KubernetesBackend(LogsMixin, EventsMixin):
    """Submit and follow TrainJobs on a Kubeflow Trainer cluster (see the module docstring)."""


__all__ = [
    "POD_SELECTOR",
    "REQUEST_TIMEOUT",
    "RUNTIME_CACHE_SECONDS",
    "SA_NAMESPACE_FILE",
    "KubernetesBackend",
    "WaitTimeoutError",
    "job_status",
    "newest_pods",
    "parse_time",
    "pod_container",
    "pod_phase",
    "pod_selector",
    "pod_source",
    "pod_step",
    "trainer_missing",
]
