"""TEST STAND-IN for the admission webhooks of a Kubeflow Trainer v2.3.0 cluster (with JobSet).

kube-apiserver 1.20 (the harness's) calls admission webhooks but ignores the CRDs' CEL rules, and
the Trainer's and JobSet's webhook servers cannot run here. This HTTPS server (127.0.0.1, a
certificate of the harness's CA) is registered with the API server as:

- ``defaulter.trainjob.trainer.kubeflow.org`` (mutating, TrainJob create/update): sets each
  runtime patch's ``time`` as the Trainer's defaulter does;
- ``validator.trainjob.trainer.kubeflow.org`` (TrainJob create/update): the Trainer webhook's
  checks (``trainer_model.trainer_errors``), refusing as controller-runtime's ``Denied`` does
  (403 Forbidden, the aggregated field errors as the message);
- ``x-kubernetes-validations.harness.kf-jupyter.io`` (TrainJob incl. status, TrainingRuntime,
  ClusterTrainingRuntime create/update): every CEL rule of the CRDs (``cel.py``), refusing as the
  API server's own CRD validation does (422 Invalid, ``Kind.group "name" is invalid: ...``);
- ``mjobset.kb.io`` / ``vjobset.kb.io`` (JobSet create): the JobSet defaulter's completion mode and
  the JobSet webhook's name-length checks, refusing with ``apierrors.NewInvalid`` (422);
- ``pod-security.harness.kf-jupyter.io`` (pod create): the API server's own PodSecurity admission
  for namespaces labelled ``pod-security.kubernetes.io/enforce`` (``pod_security.py``), refusing
  with 403 Forbidden and the real text (``pods "X" is forbidden: violates PodSecurity ...``).

The API server prefixes every refusal with ``admission webhook "<name>" denied the request: ``,
which a real cluster does for the Trainer and JobSet webhooks but not for its own CEL rules (the
one difference in the messages; docs/kubernetes-backend.md lists it).
"""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import json
import logging
import ssl
import threading
import time
from typing import Any

from tests.k8s_cluster import pod_security, trainer_model
from tests.k8s_cluster.cel import cel_errors

log = logging.getLogger("k8s-admission")
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
CEL_WEBHOOK = "x-kubernetes-validations.harness.kf-jupyter.io"
#: Plays the API server's built-in PodSecurity admission (which kube-apiserver 1.20 lacks).
POD_SECURITY_WEBHOOK = "pod-security.harness.kf-jupyter.io"
KINDS = {"trainjobs": "TrainJob", "trainingruntimes": "TrainingRuntime",
         "clustertrainingruntimes": "ClusterTrainingRuntime"}  # fmt: skip


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AdmissionServer:
    """The webhooks above; ``start()``, ``install(api_client)``, ``stop()``."""

    def __init__(self, kubeconfig: str, cert_file: str, key_file: str, ca_file: str) -> None:
        from kubernetes import client, config

        self._api = config.new_client_from_config(config_file=kubeconfig)
        self.custom = client.CustomObjectsApi(self._api)
        self._cert = (cert_file, key_file)
        self._ca = ca_file
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.refusals: list[tuple[str, str]] = []  # (webhook, message), for debugging

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> AdmissionServer:
        self._httpd = _Server(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="k8s-admission", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    # -- registration ------------------------------------------------------------------------
    def install(self, api_client: Any, timeout: float = 60.0) -> None:
        """Register the webhooks and wait until the API server calls them."""
        from kubernetes import client

        ca = base64.b64encode(open(self._ca, "rb").read()).decode()
        api = client.AdmissionregistrationV1Api(api_client)

        def hook(name: str, path: str, group: str, resources: list[str], ops: list[str],
                 version: str = VERSION) -> dict[str, Any]:  # fmt: skip
            return {
                "name": name,
                "clientConfig": {"url": f"{self.url}{path}", "caBundle": ca},
                "rules": [
                    {
                        "apiGroups": [group],
                        "apiVersions": [version],
                        "operations": ops,
                        "resources": resources,
                        "scope": "*",
                    }
                ],
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 30,
            }

        cu = ["CREATE", "UPDATE"]
        api.create_mutating_webhook_configuration(
            {
                "metadata": {"name": "kf-harness-mutating"},
                "webhooks": [
                    # Kueue's (its configuration sorts before the Trainer's, so the Trainer's
                    # defaulter then stamps the time of Kueue's patch too)
                    hook(
                        "mtrainjob.kb.io",
                        "/mutate-trainjob-kueue",
                        GROUP,
                        ["trainjobs"],
                        ["CREATE"],
                    ),
                    hook(
                        "defaulter.trainjob.trainer.kubeflow.org",
                        "/mutate-trainjob",
                        GROUP,
                        ["trainjobs"],
                        cu,
                    ),
                    hook(
                        "mjobset.kb.io",
                        "/mutate-jobset",
                        "jobset.x-k8s.io",
                        ["jobsets"],
                        ["CREATE"],
                        "v1alpha2",
                    ),
                ],
            }
        )
        api.create_validating_webhook_configuration(
            {
                "metadata": {"name": "kf-harness-validating"},
                "webhooks": [
                    hook(
                        "validator.trainjob.trainer.kubeflow.org",
                        "/validate-trainjob",
                        GROUP,
                        ["trainjobs"],
                        cu,
                    ),
                    hook(
                        CEL_WEBHOOK,
                        "/validate-cel",
                        GROUP,
                        [
                            "trainjobs",
                            "trainjobs/status",
                            "trainingruntimes",
                            "clustertrainingruntimes",
                        ],
                        cu,
                    ),
                    hook(
                        "vjobset.kb.io",
                        "/validate-jobset",
                        "jobset.x-k8s.io",
                        ["jobsets"],
                        ["CREATE"],
                        "v1alpha2",
                    ),
                    hook(
                        POD_SECURITY_WEBHOOK,
                        "/validate-pod-security",
                        "",
                        ["pods"],
                        ["CREATE"],
                        "v1",
                    ),
                ],
            }
        )
        _install_kueue_api(api_client)
        self._wait_effective(api_client, timeout)

    def _wait_effective(self, api_client: Any, timeout: float) -> None:
        """The API server loads webhook configurations asynchronously: probe with a dry run."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        custom = client.CustomObjectsApi(api_client)
        probe = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "p" * 60},
            "spec": {"replicatedJobs": [{"name": "node", "template": {}}]},
        }
        deadline = time.monotonic() + timeout
        while True:
            try:
                custom.create_namespaced_custom_object(
                    "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", probe, dry_run="All"
                )
            except ApiException as e:
                if e.status == 422 and "vjobset.kb.io" in (e.body or ""):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("the API server did not start calling the harness webhooks")
            time.sleep(0.2)

    # -- the webhooks ------------------------------------------------------------------------
    def review(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        """The AdmissionResponse for one AdmissionReview request."""
        resp: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
        obj = request.get("object") or {}
        old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
        if path == "/mutate-trainjob":
            ops = self._default_trainjob(obj, old)
            if ops:
                resp["patchType"] = "JSONPatch"
                resp["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        elif path == "/mutate-trainjob-kueue":
            ops = _kueue_default(obj)
            if ops:
                resp["patchType"] = "JSONPatch"
                resp["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        elif path == "/mutate-jobset":
            ops = []
            for i, rj in enumerate((obj.get("spec") or {}).get("replicatedJobs") or []):
                js = (rj.get("template") or {}).get("spec")
                if isinstance(js, dict) and "completionMode" not in js:
                    ops.append({"op": "add", "value": "Indexed",
                                "path": f"/spec/replicatedJobs/{i}/template/spec/completionMode"})  # fmt: skip
            if ops:
                resp["patchType"] = "JSONPatch"
                resp["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        elif path == "/validate-trainjob":
            errs = self._validate_trainjob(obj, old)
            if errs:
                resp.update(allowed=False, status=_denied(trainer_model.aggregate(errs)))
                self.refusals.append(("validator.trainjob.trainer.kubeflow.org", str(errs)))
        elif path == "/validate-cel":
            plural = (request.get("resource") or {}).get("resource", "")
            kind = KINDS.get(plural)
            if kind is not None:
                from tests.k8s_cluster.crds import crd_schema

                errors = cel_errors(crd_schema(kind), obj, old)
                if errors:
                    name = (obj.get("metadata") or {}).get("name", "")
                    resp.update(allowed=False, status=_invalid(f"{kind}.{GROUP}", kind, name,
                                                                [(e.field, str(e)) for e in errors]))  # fmt: skip
                    self.refusals.append((CEL_WEBHOOK, str(errors)))
        elif path == "/validate-pod-security":
            message = self._pod_security(request, obj)
            if message:
                resp.update(allowed=False, status=_denied(message))
                self.refusals.append((POD_SECURITY_WEBHOOK, message))
        elif path == "/validate-jobset":
            errs = trainer_model.jobset_errors(obj)
            if errs:
                msg = trainer_model.jobset_invalid_message(obj, errs)
                status = _invalid("jobset.x-k8s.io", "JobSet", obj["metadata"]["name"], [])
                status["message"] = msg
                resp.update(allowed=False, status=status)
                self.refusals.append(("vjobset.kb.io", msg))
        return resp

    def _pod_security(self, request: dict[str, Any], pod: dict[str, Any]) -> str | None:
        """Pod Security admission's refusal of a pod (``pod_security.py``), None when admitted."""
        from kubernetes import client

        ns = request.get("namespace") or (pod.get("metadata") or {}).get("namespace") or ""
        namespace = client.CoreV1Api(self._api).read_namespace(ns, _request_timeout=10)
        return pod_security.refusal(pod, namespace.metadata.labels)

    def _default_trainjob(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[Any]:
        """trainjob_webhook.go Default: stamp each runtime patch's time (kept when unchanged)."""
        patches = (obj.get("spec") or {}).get("runtimePatches") or []
        olds = {p.get("manager"): p for p in ((old or {}).get("spec") or {}).get("runtimePatches")
                or []}  # fmt: skip
        ops = []
        now = _now()
        for i, p in enumerate(patches):
            before = olds.get(p.get("manager")) if old is not None else None
            if before is not None:
                same = {k: v for k, v in before.items() if k != "time"} == {
                    k: v for k, v in p.items() if k != "time"
                }
                want = before.get("time") if same else now
            else:
                want = p.get("time") or now
            if want and want != p.get("time"):
                ops.append({"op": "add", "path": f"/spec/runtimePatches/{i}/time", "value": want})
        return ops

    def _validate_trainjob(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
        from kubernetes.client.rest import ApiException

        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return []
        ref = (obj.get("spec") or {}).get("runtimeRef") or {}
        ns = (obj.get("metadata") or {}).get("namespace", "")
        runtime: dict[str, Any] | None
        try:
            if ref.get("kind", "ClusterTrainingRuntime") == "TrainingRuntime":
                runtime = self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, ns, "trainingruntimes", ref.get("name", ""),
                    _request_timeout=10,
                )  # fmt: skip
            else:
                runtime = self.custom.get_cluster_custom_object(
                    GROUP, VERSION, "clustertrainingruntimes", ref.get("name", ""),
                    _request_timeout=10,
                )  # fmt: skip
        except ApiException as e:
            if e.status != 404:
                raise
            runtime = None
        active: list[str] = []
        if old is not None:
            try:
                js = self.custom.get_namespaced_custom_object(
                    "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", obj["metadata"]["name"],
                    _request_timeout=10,
                )  # fmt: skip
                active = [
                    s.get("name", "")
                    for s in (js.get("status") or {}).get("replicatedJobsStatus") or []
                    if int(s.get("active") or 0) > 0
                ]
            except ApiException as e:
                if e.status != 404:
                    raise
        return trainer_model.trainer_errors(obj, old, runtime, active)


def _kueue_default(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """Kueue's TrainJob webhook Default, on CREATE (kueue pkg/controller/jobs/trainjob/
    trainjob_webhook.go:67-105): every TrainJob gets Kueue's own (empty) runtime patch, queued
    or not; a queued one is also suspended until admitted (WorkloadShouldBeSuspended; the
    harness runs Kueue without manageJobsWithoutQueueName and without a LocalQueue named
    `default`, so an unlabelled job is neither suspended nor given a queue)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    spec = obj.get("spec") or {}
    ops: list[dict[str, Any]] = []
    if "kueue.x-k8s.io/queue-name" in labels:
        ops.append({"op": "add", "path": "/spec/suspend", "value": True})
    patch = {"manager": "kueue.x-k8s.io/manager",
             "trainingRuntimeSpec": {"template": {"spec": {}}}}  # fmt: skip
    patches = spec.get("runtimePatches")
    if patches is None:
        ops.append({"op": "add", "path": "/spec/runtimePatches", "value": [patch]})
    else:
        ops.append({"op": "add", "path": "/spec/runtimePatches/-", "value": patch})
    return ops


def _denied(message: str) -> dict[str, Any]:
    """controller-runtime admission.Denied: 403 Forbidden with the message."""
    return {"status": "Failure", "code": 403, "reason": "Forbidden", "message": message}


def _invalid(qualified: str, kind: str, name: str, causes: list[tuple[str, str]]) -> dict[str, Any]:
    """apierrors.NewInvalid: 422 Invalid, one cause per field error."""
    body = causes[0][1] if len(causes) == 1 else "[" + ", ".join(c[1] for c in causes) + "]"
    return {
        "status": "Failure",
        "code": 422,
        "reason": "Invalid",
        "message": f'{qualified} "{name}" is invalid: {body}',
        "details": {
            "name": name,
            "group": qualified.split(".", 1)[1] if "." in qualified else "",
            "kind": kind,
            "causes": [
                {"reason": "FieldValueInvalid", "message": msg.split(": ", 1)[1], "field": f}
                for f, msg in causes
            ],
        },
    }


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, owner: AdmissionServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner = owner
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*owner._cert)
        self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("admission: " + format, *args)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            review = json.loads(self.rfile.read(length))
            request = review.get("request") or {}
            response = self.server.owner.review(self.path.split("?", 1)[0], request)
        except Exception as e:  # a webhook error refuses (failurePolicy Fail), with the reason
            log.exception("admission webhook %s", self.path)
            response = {
                "uid": (locals().get("request") or {}).get("uid", ""),
                "allowed": False,
                "status": {"status": "Failure", "code": 500, "message": f"harness webhook: {e}"},
            }
        data = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _install_kueue_api(api_client: Any) -> None:
    """Kueue's API group, as an installed Kueue serves it (its LocalQueue kind, no schema and no
    controller: the stand-in plays Kueue): what a client's API discovery sees of Kueue."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "localqueues.kueue.x-k8s.io"},
        "spec": {
            "group": "kueue.x-k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "localqueues", "singular": "localqueue", "kind": "LocalQueue"},
            "versions": [{"name": "v1beta2", "served": True, "storage": True, "schema": {
                "openAPIV3Schema": {"type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }  # fmt: skip
    try:
        client.ApiextensionsV1Api(api_client).create_custom_resource_definition(crd)
    except ApiException as e:
        if e.status != 409:
            raise
