"""A local job's trainer status endpoint: the Kubeflow Trainer's status server, on 127.0.0.1.

Standard library only (the supervisor imports it by path). The job's supervisor serves one
`StatusEndpoint` for as long as it lives; every rank gets the three variables the Trainer's
TrainJobStatus plugin injects on a cluster, so `kubeflow.trainer.update_trainjob_status(...)`,
Transformers' Kubeflow callback and `kf_jupyter.report` post their progress here unchanged:

- `KUBEFLOW_TRAINER_SERVER_URL`: `https://127.0.0.1:PORT/apis/trainer.kubeflow.org/v1alpha1/
  namespaces/local/trainjobs/NAME/status` (plain `http://` only when no `openssl` is found);
- `KUBEFLOW_TRAINER_SERVER_CA_CERT`: the job's own self-signed certificate (made with `openssl`
  when the job starts, for 127.0.0.1; unset over http);
- `KUBEFLOW_TRAINER_SERVER_TOKEN`: a file holding the job's random bearer token (owner-only).

It answers as the Trainer's server does (pkg/statusserver): `POST` with `Authorization: Bearer
<token>` and `{"trainerStatus": {...}}` gives 200 and the parsed payload; anything else a
`metav1.Status` JSON: 403 Forbidden (token), 422 Invalid (payload, or a value the TrainJob CRD's
schema refuses), 413 (over 64 KiB), 404 (another path), 405 (another method). An accepted status
replaces the job's `trainer-status.json` (as the Trainer's server-side apply replaces
`status.trainerStatus`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import threading
from datetime import datetime
from typing import Any

NAMESPACE = "local"
MAX_BODY = 1 << 16  # the Trainer's status server limit (64 KiB)
MAX_METRICS = 256  # the CRD's maxItems
MAX_METRIC_TEXT = 64  # the CRD's maxLength of a metric's name and value
STATUS_FILE = "trainer-status.json"
SERVER_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"


def status_path(namespace: str, name: str) -> str:
    """The Trainer's `StatusUrl(namespace, name)`."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


class Invalid(ValueError):
    """A payload the Trainer (or the CRD's schema behind it) refuses."""


def _int32(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"trainerStatus.{field} must be an integer, got {json.dumps(value)}")
    if not low <= value <= high:
        raise Invalid(f"trainerStatus.{field}: must be between {low} and {high}, got {value}")
    return value


def validate(payload: Any) -> dict[str, Any]:
    """The `{"trainerStatus": ...}` request, normalised as the Trainer would echo it."""
    if not isinstance(payload, dict):
        raise Invalid("Invalid payload")
    ts = payload.get("trainerStatus")
    if ts is None:
        return {"trainerStatus": None}
    if not isinstance(ts, dict):
        raise Invalid("Invalid payload")
    out: dict[str, Any] = {}
    if ts.get("progressPercentage") is not None:
        out["progressPercentage"] = _int32(ts["progressPercentage"], "progressPercentage", 0, 100)
    if ts.get("estimatedRemainingSeconds") is not None:
        out["estimatedRemainingSeconds"] = _int32(
            ts["estimatedRemainingSeconds"], "estimatedRemainingSeconds", 0, 2**31 - 1
        )
    metrics = ts.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list):
            raise Invalid("trainerStatus.metrics must be a list of {name, value}")
        if len(metrics) > MAX_METRICS:
            raise Invalid(f"trainerStatus.metrics: must have at most {MAX_METRICS} items")
        clean = []
        for m in metrics:
            if not (
                isinstance(m, dict)
                and isinstance(m.get("name"), str)
                and isinstance(m.get("value"), str)
            ):
                raise Invalid("trainerStatus.metrics[]: name and value must be strings")
            for key in ("name", "value"):
                if not 1 <= len(m[key]) <= MAX_METRIC_TEXT:
                    raise Invalid(
                        f"trainerStatus.metrics[].{key}: must be 1 to {MAX_METRIC_TEXT} "
                        f"characters, got {m[key]!r}"
                    )
            clean.append({"name": m["name"], "value": m["value"]})
        if clean:
            out["metrics"] = clean
    when = ts.get("lastUpdatedTime")
    if not isinstance(when, str) or not when:
        raise Invalid("lastUpdatedTime is required when trainerStatus is present")
    try:
        datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        raise Invalid(
            f"trainerStatus.lastUpdatedTime must be an RFC 3339 time, got {when!r}"
        ) from None
    out["lastUpdatedTime"] = when
    return {"trainerStatus": out}


def _status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def make_certificate(directory: str) -> tuple[str, str] | None:
    """(certificate, key) paths of a new self-signed certificate for 127.0.0.1, or None."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = os.path.join(directory, "ca.crt"), os.path.join(directory, "tls.key")
    try:
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
             "-days", "3650", "-subj", "/CN=kf-jupyter local status endpoint",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=30,
        )  # fmt: skip
        os.chmod(key, 0o600)
    except (OSError, subprocess.SubprocessError):
        return None
    return cert, key


class StatusEndpoint:
    """Serves one job's status endpoint on 127.0.0.1 from a daemon thread (see the module doc).

    The token, the certificate and the listening socket are ready when the constructor returns
    (so the URL and files can go into the ranks' env at once); the HTTP and TLS machinery is
    imported and served from the thread, while the supervisor starts the ranks (a request that
    comes first waits in the socket's backlog).
    """

    def __init__(self, job_dir: str, name: str) -> None:
        self.job_dir = job_dir
        self.path = status_path(NAMESPACE, name)
        self.dir = os.path.join(job_dir, "trainer")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        self.token = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
        self.token_file = os.path.join(self.dir, "token")
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(self.token)
        self.lock = threading.Lock()
        self.tls = make_certificate(self.dir)
        self.ca_cert = self.tls[0] if self.tls else None
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}{self.path}"
        self.server: Any = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="kf-status-endpoint", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            self.server = _make_server(self)
        finally:
            self.ready.set()
        self.server.serve_forever()

    def env(self) -> dict[str, str]:
        """The variables every rank gets (the CA only over https)."""
        env = {SERVER_URL_ENV: self.url, TOKEN_ENV: self.token_file}
        if self.ca_cert:
            env[CA_CERT_ENV] = self.ca_cert
        return env

    def handle(self, req: Any) -> None:
        """One POST (any failure is answered with a metav1.Status, never raised)."""
        try:
            if req.path.split("?")[0] != self.path:
                req._refuse(404, "NotFound", "Not found")
                return
            auth = req.headers.get("Authorization") or ""
            scheme, _, token = auth.partition(" ")
            import hmac

            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), self.token.encode()
            ):
                req._refuse(403, "Forbidden", "Forbidden")
                return
            try:
                length = int(req.headers.get("Content-Length") or "-1")
            except ValueError:
                length = -1
            if length < 0:
                req._refuse(411, "BadRequest", "Content-Length required")
                return
            if length > MAX_BODY:
                if length <= 16 * MAX_BODY:  # read it, so the client sees the answer
                    req.rfile.read(length)
                req.close_connection = True
                req._refuse(413, "RequestEntityTooLarge", "Payload too large")
                return
            raw = req.rfile.read(length)
            try:
                payload = validate(json.loads(raw))
            except (ValueError, UnicodeDecodeError) as exc:
                message = str(exc) if isinstance(exc, Invalid) else "Invalid payload"
                req._refuse(422, "Invalid", message)
                return
            if payload["trainerStatus"] is not None:
                self._store(payload)
            req._answer(200, payload)
        except Exception:
            with contextlib.suppress(Exception):
                req._refuse(500, "InternalError", "Internal error")

    def _store(self, payload: dict[str, Any]) -> None:
        path = os.path.join(self.job_dir, STATUS_FILE)
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with self.lock:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(payload, fh)
            os.replace(tmp, path)

    def close(self) -> None:
        """Stop serving (the supervisor is ending)."""
        self.ready.wait(10)
        with contextlib.suppress(Exception):
            self.server.shutdown()
        with contextlib.suppress(Exception):
            self.server.server_close()
        with contextlib.suppress(Exception):
            self.sock.close()


def _make_server(endpoint: StatusEndpoint) -> Any:
    """The HTTP(S) server on the endpoint's socket (imports http.server and ssl: ~80 ms)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        server_version = "kf-jupyter-status"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the ranks' logs are the user's; requests are not logged

        def _answer(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self, code: int, reason: str, message: str) -> None:
            self._answer(code, _status_body(code, reason, message))

        def do_POST(self) -> None:
            endpoint.handle(self)

        def _not_allowed(self) -> None:
            if self.path.split("?")[0] == endpoint.path:
                self._refuse(405, "MethodNotAllowed", "Method not allowed")
            else:
                self._refuse(404, "NotFound", "Not found")

        do_GET = do_PUT = do_PATCH = do_DELETE = _not_allowed

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
    server.daemon_threads = True
    server.socket.close()
    sock: Any = endpoint.sock
    if endpoint.tls is not None:
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*endpoint.tls)
        # The handshake happens in the request's thread, so a slow client cannot stall the rest.
        sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
    server.socket = sock
    server.server_address = sock.getsockname()
    return server
