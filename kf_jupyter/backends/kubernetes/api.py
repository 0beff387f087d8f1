"""The request layer of the Kubernetes backend: configuration, raw JSON calls and watches.

Every read asks for the raw JSON (`_preload_content=False`): parsing it with `json.loads` is many
times cheaper than the client's model deserialisation. The job, runtime, log and event modules
build on `KubeApi`; none of them imports another's module except down this chain
(api <- runtimes <- jobs <- logs; api <- events), so there is no import circle.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from ...config import mask_secrets
from ...constants import GROUP, TRAINJOB_PLURAL, VERSION
from ...errors import ClusterUnreachableError, KFJupyterError
from ...runtimes import Runtime
from .config import KubernetesBackendConfig
from .errors import Where, translate
from .watch import ObjectWatch

SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
REQUEST_TIMEOUT = (10, 120)  # connect, read (seconds) for ordinary requests
#: The events that can say why a TrainJob does not start (pods' own warnings are read elsewhere).
WARNINGS_NOT_PODS = "type=Warning,involvedObject.kind!=Pod"


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


class KubeApi:
    """The cluster connection of one backend: client objects, namespace, raw requests, watches."""

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
        self._kueue: bool | None = None  # the cluster serves Kueue's API (_serves_kueue)

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
        kwargs.setdefault("_request_timeout", self.config.request_timeout or REQUEST_TIMEOUT)
        try:
            resp = fn(*args, _preload_content=False, **kwargs)
            data = resp.data
        except Exception as exc:
            raise self._error(exc, where) from None
        return json.loads(data) if data else {}

    def _serves_kueue(self) -> bool:
        """Whether the cluster serves Kueue's API (`kueue.x-k8s.io`), whose webhook adds a
        runtime patch to every TrainJob created; asked once per backend (API discovery, open to
        every authenticated user). When discovery fails, assume it does (the safe count)."""
        with self._lock:
            if self._kueue is not None:
                return self._kueue
        from kubernetes import client

        try:
            data = (
                client.ApisApi(self.api_client)
                .get_api_versions(_preload_content=False, _request_timeout=REQUEST_TIMEOUT)
                .data
            )
            groups = {g.get("name") for g in json.loads(data).get("groups") or []}
            found = "kueue.x-k8s.io" in groups
        except Exception:
            found = True
        with self._lock:
            self._kueue = found
        return found

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

    # -- watches ----------------------------------------------------------------------------
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

    def trainjob_warnings(self, name: str | None = None) -> list[dict[str, Any]]:
        """Warning events about anything but pods in the namespace (one request, filtered by the
        API server): the Trainer reports a failed reconcile only as an event about the TrainJob,
        the Job controller a pod the API server refused only as one about the Job
        (`status.reconcile_failure` picks the job's). `name` is kept for the callers' sake."""
        data = self._json(
            Where("list", "events", self.namespace),
            self.core.list_namespaced_event,
            self.namespace,
            field_selector=WARNINGS_NOT_PODS,
        )
        return [e for e in data.get("items") or [] if e.get("type") == "Warning"]

    def trainjob_event_watch(
        self, name: str, deadline: float | None = None, stop: threading.Event | None = None
    ) -> ObjectWatch:
        """A list-then-watch of the Warning events about anything but pods (the TrainJob's and
        its Jobs' among them)."""

        def list_fn() -> Any:
            return self.core.list_namespaced_event(
                self.namespace,
                field_selector=WARNINGS_NOT_PODS,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )

        def watch_fn(rv: str, seconds: int) -> Any:
            return self.core.list_namespaced_event(
                self.namespace, field_selector=WARNINGS_NOT_PODS, **_watch_args(rv, seconds)
            )

        where = Where("watch", "events", self.namespace)
        return ObjectWatch(list_fn, watch_fn, lambda e: self._error(e, where), deadline, stop)


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
