"""The Kubernetes backend: TrainJobs on a cluster running Kubeflow Trainer v2.

Uses the official `kubernetes` client (imported when the backend is created, never by
`import kf_jupyter`). Every read asks for the raw JSON (`_preload_content=False`): parsing it
with `json.loads` is many times cheaper than the client's model deserialisation. See
docs/kubernetes-backend.md for the request budget of each call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from ...build import build_trainjob
from ...config import RuntimeConfig, mask_object, mask_secrets
from ...constants import (
    CLUSTER_RUNTIME_KIND,
    CLUSTER_RUNTIME_PLURAL,
    COMPLETION_INDEX_LABEL,
    FRAMEWORK_ANNOTATION,
    GROUP,
    JOBSET_NAME_LABEL,
    LAUNCHER_JOB,
    NODE_JOB,
    REPLICATED_JOB_LABEL,
    RESULT_PREFIX,
    RUNTIME_KIND,
    RUNTIME_PLURAL,
    STEP_NAMES,
    TRAINER_CONTAINER,
    TRAINJOB_PLURAL,
    VERSION,
)
from ...errors import (
    BackendError,
    ClusterUnreachableError,
    JobFailedError,
    JobNotFoundError,
    KFJupyterError,
    NamespaceNotFoundError,
    RuntimeNotFoundError,
    ValidationError,
    WaitTimeoutError,
)
from ...failure import failure_from_pods, failure_text
from ...runtimes import Runtime
from ...trainers import BaseTrainer
from ...types import (
    COMPLETE,
    CREATED,
    FAILED,
    RUNNING,
    STATUSES,
    TERMINAL,
    Event,
    LogRecord,
    Step,
    TrainJob,
)
from ..base import StatusCallback, human_records, resolve_runtime_arg, tag_records
from .config import KubernetesBackendConfig
from .errors import Where, trainer_missing, translate
from .watch import SYNC, ObjectWatch

log = logging.getLogger("kf_jupyter.kubernetes")

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
RUNTIME_CACHE_SECONDS = 60.0
REQUEST_TIMEOUT = (10, 120)  # connect, read (seconds) for ordinary requests
POD_SELECTOR = f"{JOBSET_NAME_LABEL},{REPLICATED_JOB_LABEL} in ({','.join(STEP_NAMES)})"


def _watch_args(rv: str, seconds: int) -> dict[str, Any]:
    """The arguments of a list call that watches from `rv` for `seconds`, as raw JSON lines."""
    return {
        "watch": True,
        "resource_version": rv,
        "allow_watch_bookmarks": True,
        "timeout_seconds": seconds,
        "_preload_content": False,
        "_request_timeout": (REQUEST_TIMEOUT[0], seconds + 30),
    }


def pod_selector(job: str) -> str:
    """The SDK's selector for one TrainJob's pods (facts doc)."""
    return f"{JOBSET_NAME_LABEL}={job},{REPLICATED_JOB_LABEL} in ({','.join(STEP_NAMES)})"


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time from the API (`2026-01-02T03:04:05Z`) as an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def pod_source(pod: dict[str, Any]) -> tuple[str, int, str]:
    """(replicated job, completion index, source name) of a job's pod: node-N, launcher, ..."""
    labels = pod.get("metadata", {}).get("labels") or {}
    rjob = labels.get(REPLICATED_JOB_LABEL, NODE_JOB)
    try:
        index = int(labels.get(COMPLETION_INDEX_LABEL, "0"))
    except ValueError:
        index = 0
    if rjob == NODE_JOB:
        source = f"node-{index}"
    elif index == 0:
        source = rjob
    else:
        source = f"{rjob}-{index}"
    return rjob, index, source


_STEP_ORDER = {"dataset-initializer": 0, "model-initializer": 1, LAUNCHER_JOB: 2, NODE_JOB: 3}


def newest_pods(pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One pod per (replicated job, index), the newest (restarts), in step order."""
    best: dict[tuple[str, int], dict[str, Any]] = {}
    for pod in pods:
        rjob, index, _ = pod_source(pod)
        key = (rjob, index)
        meta = pod.get("metadata", {})
        stamp = (meta.get("creationTimestamp") or "", meta.get("name") or "")
        cur = best.get(key)
        if cur is None or stamp > (
            cur["metadata"].get("creationTimestamp") or "",
            cur["metadata"].get("name") or "",
        ):
            best[key] = pod
    return [best[k] for k in sorted(best, key=lambda k: (_STEP_ORDER.get(k[0], 9), k[0], k[1]))]


def pod_container(pod: dict[str, Any]) -> str:
    """The container whose log is the step's log (`node`, else the first one)."""
    containers = pod.get("spec", {}).get("containers") or []
    names = [c.get("name") for c in containers]
    if TRAINER_CONTAINER in names:
        return TRAINER_CONTAINER
    return str(names[0]) if names else TRAINER_CONTAINER


def pod_phase(pod: dict[str, Any]) -> str:
    """The pod's phase (Pending, Running, Succeeded, Failed, Unknown)."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def pod_step(pod: dict[str, Any]) -> Step:
    """A job step from its pod."""
    rjob, index, source = pod_source(pod)
    status = pod.get("status") or {}
    exit_code = None
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == pod_container(pod):
            term = (cs.get("state") or {}).get("terminated")
            if term and term.get("exitCode") is not None:
                exit_code = int(term["exitCode"])
    gpu = False
    for c in pod.get("spec", {}).get("containers") or []:
        res = c.get("resources") or {}
        if any("gpu" in k for part in res.values() if isinstance(part, dict) for k in part):
            gpu = True
    return Step(
        name=source,
        status=pod_phase(pod),
        rank=index if rjob == NODE_JOB else None,
        exit_code=exit_code,
        device="gpu" if gpu else "cpu",
    )


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        c.get("type", ""): c
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }


def job_status(
    obj: dict[str, Any], pods: list[dict[str, Any]] | None, num_nodes: int
) -> tuple[str, str, str]:
    """(status, reason, message) of a TrainJob, as the SDK derives it.

    Complete/Failed conditions win; a Suspended job is Created; otherwise Running when every
    trainer node runs (from the pods when given, else from `status.jobsStatus`), else Created.
    """
    conds = _conditions(obj)
    for ctype in (FAILED, COMPLETE):
        c = conds.get(ctype)
        if c and c.get("status") == "True":
            return ctype, str(c.get("reason") or ""), str(c.get("message") or "")
    susp = conds.get("Suspended")
    if susp and susp.get("status") == "True":
        return CREATED, str(susp.get("reason") or "Suspended"), str(susp.get("message") or "")
    if pods is not None:
        live = ("Running", "Succeeded")
        nodes = [p for p in pods if pod_source(p)[0] == NODE_JOB]
        launchers = [p for p in pods if pod_source(p)[0] == LAUNCHER_JOB]
        running_nodes = sum(pod_phase(p) in live for p in nodes)
        launcher_up = bool(launchers) and all(pod_phase(p) in live for p in launchers)
        if nodes and (
            running_nodes >= num_nodes or (launcher_up and running_nodes >= num_nodes - 1)
        ):
            return RUNNING, "", ""
        return CREATED, "", ""
    trainer_jobs = [
        js
        for js in (obj.get("status") or {}).get("jobsStatus") or []
        if js.get("name") in (NODE_JOB, LAUNCHER_JOB)
    ]
    if trainer_jobs and all(
        int(js.get("ready") or 0) + int(js.get("succeeded") or 0) >= 1 for js in trainer_jobs
    ):
        return RUNNING, "", ""
    return CREATED, "", ""


class KubernetesBackend:
    """Submit and follow TrainJobs on a Kubeflow Trainer cluster (see the module docstring)."""

    name = "kubernetes"

    def __init__(self, config: KubernetesBackendConfig | None = None) -> None:
        from kubernetes import client

        self.config = config or KubernetesBackendConfig()
        configuration, self._kube_user, ns_from_config = self._load_configuration(self.config)
        self.configuration = configuration
        self.host = str(getattr(configuration, "host", "") or "")
        self.namespace: str = self.config.namespace or ns_from_config or "default"
        self.api_client = client.ApiClient(configuration)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self._runtime_cache: tuple[float, dict[tuple[str, str], Runtime]] | None = None
        self._lock = threading.Lock()

    # -- configuration -----------------------------------------------------------------------
    @staticmethod
    def _load_configuration(cfg: KubernetesBackendConfig) -> tuple[Any, str | None, str | None]:
        """(client Configuration, kubeconfig user name, namespace of the context or pod)."""
        from kubernetes import client, config

        user, namespace = _context_user_namespace(cfg.config_file, cfg.context)
        if namespace is None:
            namespace = _service_account_namespace()
        if cfg.client_configuration is not None:
            return cfg.client_configuration, user, namespace
        configuration = client.Configuration()
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
            SA_NAMESPACE_FILE
        )
        try:
            if cfg.config_file or cfg.context or not in_cluster:
                config.load_kube_config(
                    config_file=cfg.config_file,
                    context=cfg.context,
                    client_configuration=configuration,
                    persist_config=False,
                )
            else:
                config.load_incluster_config(client_configuration=configuration)
                user = user or "the pod's service account"
        except Exception as exc:  # ConfigException, file errors, yaml errors
            where = cfg.config_file or os.environ.get("KUBECONFIG") or "~/.kube/config"
            raise ClusterUnreachableError(
                f"Cannot load the Kubernetes configuration (kubeconfig {where}"
                f"{', context ' + repr(cfg.context) if cfg.context else ''}): "
                f"{mask_secrets(str(exc).splitlines()[0] if str(exc) else type(exc).__name__).rstrip('.')}. "
                "Point KubernetesBackendConfig(config_file=..., context=...) at a valid "
                "kubeconfig, or run inside the cluster with a service account."
            ) from None
        configuration.connection_pool_maxsize = max(
            int(getattr(configuration, "connection_pool_maxsize", 0) or 0), 32
        )
        return configuration, user, namespace

    # -- raw requests -----------------------------------------------------------------------
    def _error(self, exc: BaseException, where: Where) -> KFJupyterError:
        return translate(exc, where, self.host, self._kube_user)

    def _json(self, where: Where, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call a client method for its raw JSON answer; failures become kf-jupyter errors."""
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        try:
            resp = fn(*args, _preload_content=False, **kwargs)
            data = resp.data
        except Exception as exc:
            raise self._error(exc, where) from None
        return json.loads(data) if data else {}

    def _list_trainjobs(self, **kwargs: Any) -> dict[str, Any]:
        return self._json(
            Where("list", TRAINJOB_PLURAL, self.namespace),
            self.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAINJOB_PLURAL,
            **kwargs,
        )

    def _get_trainjob(self, name: str) -> dict[str, Any]:
        return self._json(
            Where("get", TRAINJOB_PLURAL, self.namespace, name),
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAINJOB_PLURAL,
            name,
        )

    def _list_pods(self, selector: str) -> list[dict[str, Any]]:
        data = self._json(
            Where("list", "pods", self.namespace),
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=selector,
        )
        return list(data.get("items") or [])

    # -- runtimes ---------------------------------------------------------------------------
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
            f"No training runtime named {name!r} in namespace {self.namespace!r} or cluster-wide. "
            f"Available runtimes: {names}. Check the name with client.list_runtimes()."
        )

    # -- submit -----------------------------------------------------------------------------
    def _build(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None,
        runtime_config: RuntimeConfig | None,
        options: Iterable[Any] | None,
    ) -> dict[str, Any]:
        rt = resolve_runtime_arg(self, trainer, runtime)
        return build_trainjob(trainer, rt, runtime_config, options, backend=self)

    def dry_run(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> dict[str, Any]:
        """The TrainJob `train` would create (runtime resolved on the cluster), creating nothing."""
        job = self._build(trainer, runtime, runtime_config, options)
        # A preview is printed and shown: credentials in index URLs are masked (train() sends
        # the real ones).
        return mask_object({"backend": self.name, "namespace": self.namespace, "trainjob": job})

    def train(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> str:
        """Create the TrainJob; return its name."""
        job = self._build(trainer, runtime, runtime_config, options)
        name = job["metadata"]["name"]
        self._json(
            Where("create", TRAINJOB_PLURAL, self.namespace, name),
            self.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAINJOB_PLURAL,
            job,
        )
        log.info("created TrainJob %s/%s", self.namespace, name)
        return str(name)

    # -- jobs -------------------------------------------------------------------------------
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

    def _to_trainjob(
        self,
        obj: dict[str, Any],
        pods: list[dict[str, Any]] | None,
        runtimes: dict[tuple[str, str], Runtime],
    ) -> TrainJob:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        trainer = spec.get("trainer") or {}
        rt = self._runtime_of(obj, runtimes)
        num_nodes = int(trainer.get("numNodes") or (rt.num_nodes if rt else 1) or 1)
        nproc_raw = trainer.get("numProcPerNode")
        nproc: int | None
        try:
            nproc = int(nproc_raw) if nproc_raw is not None else None
        except (TypeError, ValueError):
            nproc = None
        if nproc is None and rt is not None:
            nproc = rt.num_proc_per_node
        framework = (meta.get("annotations") or {}).get(FRAMEWORK_ANNOTATION) or (
            rt.framework if rt else "unknown"
        )
        chosen = newest_pods(pods) if pods is not None else None
        status, reason, message = job_status(obj, chosen, num_nodes)
        failure = failure_from_pods(chosen) if status == FAILED else None
        if failure is not None:
            message = f"{failure_text(failure)}\n({message or reason})"
        completion = None
        if status in TERMINAL:
            completion = parse_time(_conditions(obj)[status].get("lastTransitionTime"))
        return TrainJob(
            name=str(meta.get("name", "")),
            status=status,
            backend=self.name,
            runtime=str((spec.get("runtimeRef") or {}).get("name", "")),
            framework=str(framework),
            num_nodes=num_nodes,
            num_proc_per_node=nproc,
            reason=reason,
            message=mask_secrets(message),
            creation_time=parse_time(meta.get("creationTimestamp")),
            completion_time=completion,
            namespace=str(meta.get("namespace") or self.namespace),
            steps=[pod_step(p) for p in chosen or []],
            labels=dict(meta.get("labels") or {}),
            failure=failure,
        )

    def _check_namespace(self) -> None:
        """After an empty list: say so plainly if the namespace does not exist."""
        try:
            self.core.read_namespace(self.namespace, _request_timeout=REQUEST_TIMEOUT)
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                raise NamespaceNotFoundError(
                    f"Namespace {self.namespace!r} does not exist on {self.host}. Create it, or "
                    "pass an existing one with KubernetesBackendConfig(namespace=...)."
                ) from None
            # 403 (no cluster-scoped read) or anything else: the empty list stands.

    def list_jobs(self) -> list[TrainJob]:
        """Every TrainJob of the namespace: one TrainJob list and one pod list, whatever the count."""
        items = self._list_trainjobs().get("items") or []
        if not items:
            self._check_namespace()
            return []
        pods_by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in self._list_pods(POD_SELECTOR):
            job = (pod.get("metadata", {}).get("labels") or {}).get(JOBSET_NAME_LABEL)
            if job:
                pods_by_job.setdefault(job, []).append(pod)
        runtimes = self._cached_runtimes() if any(map(self._needs_runtime, items)) else {}
        jobs = [
            self._to_trainjob(obj, pods_by_job.get(obj["metadata"]["name"], []), runtimes)
            for obj in items
        ]
        jobs.sort(key=lambda j: (j.creation_time is None, j.creation_time), reverse=True)
        return jobs

    def get_job(self, name: str) -> TrainJob:
        """One TrainJob with its steps (newest pod per replicated job and index)."""
        obj = self._get_trainjob(name)
        pods = self._list_pods(pod_selector(name))
        runtimes = self._cached_runtimes() if self._needs_runtime(obj) else {}
        return self._to_trainjob(obj, pods, runtimes)

    def delete_job(self, name: str) -> None:
        """Delete the TrainJob; foreground propagation removes its JobSet and pods first."""
        self._json(
            Where("delete", TRAINJOB_PLURAL, self.namespace, name),
            self.custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAINJOB_PLURAL,
            name,
            propagation_policy="Foreground",
        )

    # -- waiting ----------------------------------------------------------------------------
    def trainjob_watch(
        self, name: str, deadline: float | None = None, stop: threading.Event | None = None
    ) -> ObjectWatch:
        """A list-then-watch of the one TrainJob (field selector metadata.name)."""
        field = f"metadata.name={name}"

        def list_fn() -> Any:
            return self.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                TRAINJOB_PLURAL,
                field_selector=field,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )

        def watch_fn(rv: str, seconds: int) -> Any:
            return self.custom.list_namespaced_custom_object(
                GROUP,
                VERSION,
                self.namespace,
                TRAINJOB_PLURAL,
                field_selector=field,
                **_watch_args(rv, seconds),
            )

        where = Where("watch", TRAINJOB_PLURAL, self.namespace, name)
        return ObjectWatch(list_fn, watch_fn, lambda e: self._error(e, where), deadline, stop)

    def pod_watch(
        self, selector: str, deadline: float | None = None, stop: threading.Event | None = None
    ) -> ObjectWatch:
        """A list-then-watch of the pods matching a label selector."""

        def list_fn() -> Any:
            return self.core.list_namespaced_pod(
                self.namespace,
                label_selector=selector,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )

        def watch_fn(rv: str, seconds: int) -> Any:
            return self.core.list_namespaced_pod(
                self.namespace,
                label_selector=selector,
                **_watch_args(rv, seconds),
            )

        where = Where("watch", "pods", self.namespace)
        return ObjectWatch(list_fn, watch_fn, lambda e: self._error(e, where), deadline, stop)

    def wait_for_job_status(
        self,
        name: str,
        status: set[str] | frozenset[str] = frozenset({COMPLETE}),
        timeout: float = 600,
        callbacks: list[StatusCallback] | None = None,
    ) -> TrainJob:
        """Block until the job reaches one of `status`, following a watch (it never polls).

        Requests: one list and one watch (more only if the watch breaks or expires), and one
        pod list at the end for the steps of the returned job. Callbacks run on each change of
        status (the jobs they get carry no steps; the returned one does).
        """
        wanted = set(status)
        if not wanted or not wanted <= set(STATUSES):
            raise ValidationError(
                f"status must be a non-empty subset of {list(STATUSES)}, got {sorted(wanted)}."
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValidationError(f"timeout must be a number of seconds > 0, got {timeout!r}.")
        deadline = time.monotonic() + timeout
        runtimes: dict[tuple[str, str], Runtime] = {}
        last: TrainJob | None = None
        watch = self.trainjob_watch(name, deadline)
        try:
            for etype, payload in watch:
                if etype == SYNC:
                    if not payload:
                        raise JobNotFoundError(
                            f"No TrainJob named {name!r} in namespace {self.namespace!r}. List "
                            "the jobs with client.list_jobs() and check the name."
                        )
                    obj = payload[0]
                elif etype == "DELETED":
                    raise JobNotFoundError(
                        f"TrainJob {name!r} was deleted while waiting for it to become "
                        f"{'/'.join(sorted(wanted))}."
                    )
                else:
                    obj = payload
                if not runtimes and self._needs_runtime(obj):
                    runtimes = self._cached_runtimes()
                job = self._to_trainjob(obj, None, runtimes)
                if last is None or job.status != last.status:
                    for cb in callbacks or []:
                        cb(job)
                last = job
                if job.status == FAILED and FAILED not in wanted:
                    with contextlib.suppress(KFJupyterError):  # the pods hold the root cause
                        job = self._to_trainjob(obj, self._list_pods(pod_selector(name)), runtimes)
                    raise JobFailedError(
                        f"TrainJob {name!r} failed ({job.reason or 'Failed'}: "
                        f"{job.message or 'no message'}). Read its logs with "
                        f"client.get_job_logs({name!r}) and its events with "
                        f"client.get_job_events({name!r})."
                    )
                if job.status in wanted:
                    pods = self._list_pods(pod_selector(name))
                    return self._to_trainjob(obj, pods, runtimes)
        finally:
            watch.close()
        raise WaitTimeoutError(
            f"TrainJob {name!r} did not reach {'/'.join(sorted(wanted))} within {timeout:g} s "
            f"(last status: {last.status if last else 'unknown'}). Wait longer with timeout=..., "
            f"or look at client.get_job_events({name!r})."
        )

    # -- logs -------------------------------------------------------------------------------
    def _select_pods(self, pods: list[dict[str, Any]], step: str | None) -> list[dict[str, Any]]:
        chosen = newest_pods(pods)
        if step is None:
            return chosen
        return [p for p in chosen if pod_source(p)[2] == step or pod_source(p)[0] == step]

    def _read_log(self, pod: dict[str, Any], tail_lines: int | None) -> list[str]:
        meta = pod["metadata"]
        kwargs: dict[str, Any] = {"container": pod_container(pod)}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
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
        text = data.decode("utf-8", "replace")
        return text.splitlines()

    def iter_log_records(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
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
            from .logs import LogFollower

            return LogFollower(self, name, step, tail_lines).records()
        return self._static_records(name, step, tail_lines)

    def _static_records(
        self, name: str, step: str | None, tail_lines: int | None
    ) -> Iterator[LogRecord]:
        self._get_trainjob(name)  # JobNotFoundError first
        for pod in self._select_pods(self._list_pods(pod_selector(name)), step):
            source = pod_source(pod)[2]
            for line in self._read_log(pod, tail_lines):
                yield LogRecord(source, line)

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
        multi = len(self.log_sources(job, step)) > 1
        return tag_records(human_records(self, name, step, follow, tail_lines), multi)

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
                ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp")
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


def _context_user_namespace(
    config_file: str | None, context: str | None
) -> tuple[str | None, str | None]:
    """(user, namespace) of the kubeconfig context, (None, None) without a kubeconfig."""
    try:
        from kubernetes import config

        contexts, current = config.list_kube_config_contexts(config_file)
    except Exception:
        return None, None
    chosen = current
    if context:
        chosen = next((c for c in contexts or [] if c.get("name") == context), None)
    ctx = (chosen or {}).get("context") or {}
    return ctx.get("user"), ctx.get("namespace")


def _service_account_namespace() -> str | None:
    try:
        with open(SA_NAMESPACE_FILE, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


__all__ = ["KubernetesBackend", "WaitTimeoutError", "trainer_missing"]
