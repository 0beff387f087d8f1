"""Turn `kubernetes` client failures into kf-jupyter errors: one paragraph, what to do, no secrets.

Nothing here imports the `kubernetes` package at module level; exceptions are recognised by
their attributes (`status`, `reason`, `body`) and by urllib3's exception classes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ...config import mask_secrets
from ...constants import GROUP
from ...errors import (
    BackendError,
    ClusterUnreachableError,
    ForbiddenError,
    JobNotFoundError,
    JobRejectedError,
    KFJupyterError,
    NamespaceNotFoundError,
    RuntimeNotFoundError,
    TrainerNotInstalledError,
)

#: The resources of the Trainer API group, as kubectl names them.
TRAINER_RESOURCES = ("trainjobs", "trainingruntimes", "clustertrainingruntimes")


@dataclass(frozen=True)
class Where:
    """What was being asked when a request failed (for the error message)."""

    verb: str
    resource: str
    namespace: str | None = None
    name: str | None = None

    @property
    def full_resource(self) -> str:
        """`trainjobs.trainer.kubeflow.org` for Trainer resources, `pods` for core ones."""
        base = self.resource.split("/", 1)[0]
        return f"{self.resource}.{GROUP}" if base in TRAINER_RESOURCES else self.resource

    @property
    def scope(self) -> str:
        """`in namespace X` or `cluster-wide`."""
        return f"in namespace {self.namespace!r}" if self.namespace else "cluster-wide"


def is_api_exception(exc: BaseException) -> bool:
    """An HTTP error answer from the API server (kubernetes.client.ApiException)."""
    return type(exc).__name__ == "ApiException" and hasattr(exc, "status")


def is_connection_error(exc: BaseException) -> bool:
    """A failure to reach or keep talking to the server (urllib3/socket/SSL level)."""
    import urllib3.exceptions as u3

    return isinstance(
        exc,
        u3.MaxRetryError
        | u3.ProtocolError
        | u3.NewConnectionError
        | u3.TimeoutError
        | u3.SSLError
        | u3.ProxyError
        | ConnectionError
        | TimeoutError,
    )


def status_body(exc: BaseException) -> dict[str, Any]:
    """The `Status` object the server sent with an error, or {} if it sent something else."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body.strip().startswith("{"):
        return {}
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _server_message(exc: BaseException) -> str:
    st = status_body(exc)
    msg = st.get("message") or getattr(exc, "reason", "") or ""
    if not st:
        raw = getattr(exc, "body", None)
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        if isinstance(raw, str) and raw.strip():
            msg = raw.strip().splitlines()[0][:300]
    return mask_secrets(str(msg))


def translate(
    exc: BaseException, where: Where, host: str = "", user: str | None = None
) -> KFJupyterError:
    """The kf-jupyter error for a failed request (callers `raise translate(...) from None`)."""
    if isinstance(exc, KFJupyterError):
        return exc
    host = mask_secrets(host or "the configured API server")
    if not is_api_exception(exc):
        if is_connection_error(exc):
            return ClusterUnreachableError(
                f"Cannot reach the Kubernetes API server at {host} (while trying to "
                f"{where.verb} {where.full_resource} {where.scope}): "
                f"{mask_secrets(_short(exc))}. Check that your kubeconfig (or "
                "KubernetesBackendConfig(config_file=..., context=...)) points at the right "
                "cluster, that the cluster is running, and that you are on its network or VPN."
            )
        return BackendError(
            f"Request to {host} failed while trying to {where.verb} {where.full_resource} "
            f"{where.scope}: {type(exc).__name__}: {mask_secrets(_short(exc))}."
        )
    code = int(getattr(exc, "status", 0) or 0)
    msg = _server_message(exc)
    st = status_body(exc)
    details = st.get("details") or {}
    who = f" (kubeconfig user {user!r})" if user else ""
    if code == 401:
        return ForbiddenError(
            f"The API server at {host} did not accept your credentials{who} (401 Unauthorized) "
            f"when asked to {where.verb} {where.full_resource} {where.scope}. Your token or "
            "certificate is missing or expired: log in again (refresh the kubeconfig) and retry."
        )
    if code in (400, 403) and "admission webhook" in msg and "denied the request" in msg:
        # the Trainer's (controller-runtime's) webhook refuses with 403: not a permission matter
        return JobRejectedError(
            f"The cluster refused the {where.full_resource} {where.name!r} {where.scope}: "
            f"{mask_secrets(msg)}. Fix what it names (the trainer's arguments or the options) "
            "and submit again; client.dry_run(...) shows what is sent."
        )
    if code == 403:
        return ForbiddenError(
            f"Forbidden: you{who} may not {where.verb} {where.full_resource} {where.scope} "
            f"(server: {msg}). Ask a cluster admin for a Role that grants it, or use a "
            "namespace you have access to with KubernetesBackendConfig(namespace=...)."
        )
    if code == 404:
        base = where.resource.split("/", 1)[0]
        if details.get("kind") == "namespaces" or (
            base == "namespaces" and where.name == where.namespace
        ):
            return NamespaceNotFoundError(
                f"Namespace {where.namespace!r} does not exist on {host} (asked to {where.verb} "
                f"{where.full_resource} there). Create it, or pass an existing one with "
                "KubernetesBackendConfig(namespace=...)."
            )
        if base in TRAINER_RESOURCES and not st:
            return trainer_missing(host, where)
        if base == "trainjobs":
            return JobNotFoundError(
                f"No TrainJob named {where.name!r} {where.scope}. List the jobs with "
                "client.list_jobs() and check the name (and the namespace)."
            )
        if base in ("trainingruntimes", "clustertrainingruntimes"):
            return RuntimeNotFoundError(
                f"No {base[:-1]} named {where.name!r} {where.scope}. List them with "
                "client.list_runtimes()."
            )
        return BackendError(
            f"Not found while trying to {where.verb} {where.full_resource} {where.scope}: {msg}."
        )
    if code == 409:
        return JobRejectedError(
            f"Cannot {where.verb} {where.full_resource} {where.name!r} {where.scope}: it already "
            f"exists (server: {msg}). Pick another name (Name option) or delete the old one."
        )
    if code == 422 or (code == 400 and where.verb == "create"):
        causes = details.get("causes") or []
        fields = "; ".join(
            mask_secrets(f"{c.get('field', '?')}: {c.get('message', c.get('reason', ''))}")
            for c in causes
            if isinstance(c, dict)
        )
        return JobRejectedError(
            f"The API server rejected the {where.full_resource} {where.name!r} {where.scope}: "
            f"{fields or msg}. Fix these fields (the trainer's arguments or the options) and "
            "submit again; client.dry_run(...) shows what is sent."
        )
    return BackendError(
        f"The API server at {host} answered {code} {getattr(exc, 'reason', '')} when asked to "
        f"{where.verb} {where.full_resource} {where.scope}: {msg}."
    )


def trainer_missing(host: str, where: Where) -> TrainerNotInstalledError:
    """The error for a cluster without the Kubeflow Trainer CRDs."""
    return TrainerNotInstalledError(
        f"Kubeflow Trainer is not installed on the cluster at {mask_secrets(host)}: the API "
        f"server does not serve {where.full_resource} (asked to {where.verb} it {where.scope}), "
        f"so the CRD trainjobs.{GROUP} is missing. Install Kubeflow Trainer v2 "
        "(its CRDs and runtimes), or point the kubeconfig at a cluster that has it."
    )


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException) and str(reason):
        text = str(reason)
    return text.splitlines()[0][:300] if text else type(exc).__name__


def retryable(exc: BaseException) -> bool:
    """A failure worth retrying after a pause: connection trouble, 429, 5xx (server restarting)."""
    if is_api_exception(exc):
        code = int(getattr(exc, "status", 0) or 0)
        return code == 429 or code >= 500 or code == 0
    return is_connection_error(exc)
