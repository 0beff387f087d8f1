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

It accepts and refuses what the Trainer's server (kubeflow/trainer v2.3.0 pkg/statusserver, a Go
`net/http` server) does, with the same codes and `metav1.Status` bodies:

- 413 `RequestEntityTooLarge` for a `Content-Length` over 64 KiB (checked first, as its
  middleware does); a chunked body is read up to 64 KiB (`http.MaxBytesReader`);
- 404 `NotFound` for every other path and method (its mux sends all but `POST .../status` to a
  not-found handler), 301 to the cleaned path for an unclean one (`ServeMux`);
- 403 `Forbidden` without exactly one `Bearer <token>` credential of this job, or for another
  job's path (the token's audience is this job);
- 422 `Invalid` "Invalid payload" for a body Go's `json.Decoder` refuses (the first JSON value is
  decoded, later bytes are ignored; keys match case-insensitively; a wrong type, a number outside
  int32, a `lastUpdatedTime` that `time.Parse(time.RFC3339, ...)` refuses, nesting too deep);
- 422 `Invalid` with the API server's message for what the TrainJob CRD's schema refuses
  (progress outside 0-100, a negative ETA, over 256 metrics, a name or value not 1-64 characters,
  no `lastUpdatedTime`);
- 200 and the decoded request, encoded as Go does (`lastUpdatedTime` in UTC, whole seconds);
  an accepted status replaces the job's `trainer-status.json` (as the Trainer's server-side
  apply replaces `status.trainerStatus`). No `trainerStatus`: 200 `{}` and nothing changes.

Under load or attack by another local user it holds: one asyncio loop in one daemon thread serves
every connection (no thread or blocked read per connection), at most `MAX_CONNECTIONS` are open
(the oldest that is not mid-request is closed for a new one, so idle connections can neither fill
the supervisor's file descriptors nor shut out the ranks), and the Trainer's timeouts apply (TLS
handshake and each request 10 s, writes 10 s, keep-alive idle 120 s). Nothing that happens to the
endpoint can raise into the supervisor: a job never fails because of it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

NAMESPACE = "local"
MAX_BODY = 1 << 16  # the Trainer's status server limit (64 KiB)
MAX_METRICS = 256  # the CRD's maxItems
MAX_METRIC_TEXT = 64  # the CRD's maxLength of a metric's name and value
MAX_HEADER = (1 << 20) + 4096  # net/http's DefaultMaxHeaderBytes and its slack
LINGER_S = 1.0  # how long a refused body is read out before close (net/http waits 500 ms)
LINGER_MAX = 4 << 20  # and at most this much of it
MAX_DISCARD = 256 << 10  # net/http reads out at most this much of an unread body to reuse a conn
MAX_CONNECTIONS = 64  # open at once; the oldest one not mid-request goes for a new one
READ_TIMEOUT = 10.0  # the Trainer's readTimeout (TLS handshake, then each request)
WRITE_TIMEOUT = 10.0  # writeTimeout
IDLE_TIMEOUT = 120.0  # idleTimeout (a kept-alive connection between requests)
STATUS_FILE = "trainer-status.json"
SERVER_URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
_INT32 = (-(2**31), 2**31 - 1)
_ROUTE = re.compile(
    r"/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status"
)


def status_path(namespace: str, name: str) -> str:
    """The Trainer's `StatusUrl(namespace, name)`."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


class Invalid(ValueError):
    """A payload the Trainer refuses with 422 (the message is what it answers)."""


# -- the body, as Go's encoding/json decodes it into UpdateTrainJobStatusRequest ---------------


class _Object(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs in order (duplicates kept, as Go sees them)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")


_DECODER = json.JSONDecoder(object_pairs_hook=_Object, parse_constant=_no_constant)
_SURROGATE = re.compile("[\ud800-\udfff]")
_TIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:\d{2})\Z"
)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise Invalid("Invalid payload")
    return _SURROGATE.sub("\ufffd", value)  # Go decodes a lone surrogate as U+FFFD


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not _INT32[0] <= value <= _INT32[1]:
        raise Invalid("Invalid payload")  # Go: a JSON type or int32 range error
    return value


def parse_rfc3339(text: str) -> datetime:
    """`text` as Go's `time.Parse(time.RFC3339, text)` reads it (ValueError if it refuses).

    A 'T' and a zone ('Z' or ±hh:mm) are required; fractional seconds (after '.' or ',') are
    allowed; a one-digit hour is accepted, as Go's general parser does.
    """
    m = _TIME.match(text)
    if m is None:
        raise ValueError(text)
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(text)
    frac = m.group(7) or ""
    micro = int((frac + "000000")[:6]) if frac else 0
    zone = m.group(8)
    tz = UTC
    if zone != "Z":
        hh, mm = int(zone[1:3]), int(zone[4:6])
        if hh > 23 or mm > 59:
            raise ValueError(text)
        delta = timedelta(hours=hh, minutes=mm)
        tz = timezone(-delta if zone[0] == "-" else delta)
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)


def _time(value: Any) -> str | None:
    if value is None:
        return None  # metav1.Time: null is the zero time
    try:
        when = parse_rfc3339(_text(value)).astimezone(UTC)
    except (ValueError, OverflowError):
        raise Invalid("Invalid payload") from None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")  # metav1.Time marshals UTC, whole seconds


def _fold(key: str) -> str:
    return key.casefold()


def _metric(value: Any, into: dict[str, str]) -> dict[str, str]:
    if value is None:
        return into
    if not isinstance(value, _Object):
        raise Invalid("Invalid payload")
    for key, item in value:
        field = {"name": "name", "value": "value"}.get(_fold(key))
        if field is not None and item is not None:
            into[field] = _text(item)
    return into


def _trainer_status(value: _Object, ts: dict[str, Any]) -> dict[str, Any]:
    for key, item in value:
        k = _fold(key)
        if k in ("progresspercentage", "estimatedremainingseconds"):
            field = "progressPercentage" if k[0] == "p" else "estimatedRemainingSeconds"
            if item is None:
                ts.pop(field, None)
            else:
                ts[field] = _int(item)
        elif k == "metrics":
            if item is None:
                ts.pop("metrics", None)
                continue
            if not isinstance(item, list) or isinstance(item, _Object):
                raise Invalid("Invalid payload")
            old = ts.get("metrics") or []
            # Go decodes a repeated array into the existing elements, then truncates.
            ts["metrics"] = [
                _metric(m, dict(old[i]) if i < len(old) else {"name": "", "value": ""})
                for i, m in enumerate(item)
            ]
        elif k == "lastupdatedtime":
            ts["lastUpdatedTime"] = _time(item)
    return ts


def decode(raw: bytes) -> dict[str, Any] | None:
    """The `trainerStatus` of a request body as Go's `json.Decoder` fills the Trainer's
    `UpdateTrainJobStatusRequest` (None when absent or null); `Invalid("Invalid payload")` where
    Go's decoder returns an error. Only the first JSON value counts; what follows is not read."""
    text = raw.decode("utf-8", "replace")  # Go replaces invalid UTF-8 in strings with U+FFFD
    start = len(text) - len(text.lstrip(" \t\r\n"))
    try:
        value, _ = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):  # syntax, EOF, or nesting too deep
        raise Invalid("Invalid payload") from None
    if value is None:
        return None  # null into a struct: nothing
    if not isinstance(value, _Object):
        raise Invalid("Invalid payload")
    ts: dict[str, Any] | None = None
    for key, item in value:
        if _fold(key) != "trainerstatus":
            continue
        if item is None:
            ts = None
        elif isinstance(item, _Object):
            ts = _trainer_status(item, ts if ts is not None else {})
        else:
            raise Invalid("Invalid payload")
    return ts


def schema_errors(ts: dict[str, Any]) -> list[str]:
    """What the TrainJob CRD's schema and CEL rule refuse in `status.trainerStatus`, in the API
    server's words (empty when it is accepted)."""
    base = "status.trainerStatus"
    errors = []
    for field, high in (("progressPercentage", 100), ("estimatedRemainingSeconds", None)):
        v = ts.get(field)
        if v is None:
            continue
        path = f"{base}.{field}"
        if v < 0:
            errors.append(
                f"{path}: Invalid value: {v}: {path} in body should be greater than or equal to 0"
            )
        elif high is not None and v > high:
            errors.append(
                f"{path}: Invalid value: {v}: {path} in body should be less than or equal to {high}"
            )
    metrics = ts.get("metrics") or []
    if len(metrics) > MAX_METRICS:
        errors.append(
            f"{base}.metrics: Too many: {len(metrics)}: must have at most {MAX_METRICS} items"
        )
    for i, m in enumerate(metrics):
        for key in ("name", "value"):
            text = m[key]
            path = f"{base}.metrics[{i}].{key}"
            if len(text) < 1:
                errors.append(
                    f'{path}: Invalid value: "": {path} in body should be at least 1 chars long'
                )
            elif len(text) > MAX_METRIC_TEXT:
                errors.append(
                    f"{path}: Invalid value: {json.dumps(text)}: {path} in body should be at most {MAX_METRIC_TEXT} chars long"
                )
    if ts.get("lastUpdatedTime") is None:
        errors.append(
            f'{base}: Invalid value: "object": lastUpdatedTime is required when trainerStatus is present'
        )
    return errors


def encode(ts: dict[str, Any] | None) -> dict[str, Any]:
    """The request as Go marshals it back (omitempty fields left out, in the struct's order)."""
    if ts is None:
        return {}
    out: dict[str, Any] = {}
    for field in ("progressPercentage", "estimatedRemainingSeconds"):
        if ts.get(field) is not None:
            out[field] = ts[field]
    if ts.get("metrics"):
        out["metrics"] = [{k: m[k] for k in ("name", "value") if m[k]} for m in ts["metrics"]]
    out["lastUpdatedTime"] = ts.get("lastUpdatedTime")
    return {"trainerStatus": out}


def go_json(body: Any) -> bytes:
    """`json.NewEncoder(w).Encode(body)`: compact, HTML characters escaped, a final newline."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    for ch, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(ch, esc)
    return (text + "\n").encode("utf-8", "replace")


def validate(payload: Any) -> dict[str, Any]:
    """`{"trainerStatus": ...}` (a parsed body) as the Trainer echoes it, or `Invalid`."""
    ts = decode(json.dumps(payload).encode())
    if ts is not None:
        errors = schema_errors(ts)
        if errors:
            raise Invalid("; ".join(errors))
    return encode(ts)


def _status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    # metav1.Status as the Trainer's badRequest() encodes it: no kind or apiVersion
    return {"metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


#: A folder holding a certificate and key made ahead for this job alone (`ca.crt`, `tls.key`),
#: set by the supervisor host in the supervisor it forks (supervisor_host.py); used once.
SPARE_CERTIFICATE: str | None = None


def certificate_argv(openssl: str, directory: str) -> list[str]:
    """The `openssl` command that makes a self-signed certificate for 127.0.0.1 in `directory`."""
    cert, key = os.path.join(directory, "ca.crt"), os.path.join(directory, "tls.key")
    return [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
            "-days", "3650", "-subj", "/CN=kf-jupyter local status endpoint",
            "-addext", "subjectAltName=IP:127.0.0.1"]  # fmt: skip


def _take_spare(directory: str) -> tuple[str, str] | None:
    """Move the certificate made ahead for this job into `directory` (None if there is none)."""
    global SPARE_CERTIFICATE
    spare, SPARE_CERTIFICATE = SPARE_CERTIFICATE, None
    if not spare:
        return None
    cert, key = os.path.join(directory, "ca.crt"), os.path.join(directory, "tls.key")
    try:
        os.rename(os.path.join(spare, "tls.key"), key)
        os.rename(os.path.join(spare, "ca.crt"), cert)
        os.chmod(key, 0o600)
    except OSError:
        for path in (cert, key):
            with contextlib.suppress(OSError):
                os.unlink(path)
        return None
    finally:
        shutil.rmtree(spare, ignore_errors=True)
    return cert, key


def make_certificate(directory: str) -> tuple[str, str] | None:
    """(certificate, key) paths of a new self-signed certificate for 127.0.0.1, or None."""
    made = _take_spare(directory)
    if made is not None:
        return made
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = os.path.join(directory, "ca.crt"), os.path.join(directory, "tls.key")
    try:
        subprocess.run(
            certificate_argv(openssl, directory),
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
    (so the URL and files can go into the ranks' env at once); the event loop and TLS machinery
    start in the thread while the supervisor starts the ranks (a request that comes first waits
    in the socket's backlog).
    """

    def __init__(self, job_dir: str, name: str, start: bool = True) -> None:
        self.job_dir = job_dir
        self.name = name
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
        self.sock.listen(128)
        scheme = "https" if self.tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.sock.getsockname()[1]}{self.path}"
        self.max_connections = _connection_cap()
        self.counts = {"accepted": 0, "evicted": 0, "requests": 0}
        self.closing = False
        self.ready = threading.Event()
        self._server: _Server | None = None
        self.thread = threading.Thread(target=self._serve, name="kf-status-endpoint", daemon=True)
        self.started = False
        if start:
            self.start()

    def start(self) -> None:
        """Serve from now on (once). `StatusEndpoint(..., start=False)` then `start()`: the
        supervisor starts it when the first client connects (its listening socket readable), so
        the thread's event loop and TLS set-up are not on the path of a job that never calls it
        (issue 21); a request that comes first waits in the socket's backlog."""
        if not self.started:
            self.started = True
            self.thread.start()

    def env(self) -> dict[str, str]:
        """The variables every rank gets (the CA only over https)."""
        env = {SERVER_URL_ENV: self.url, TOKEN_ENV: self.token_file}
        if self.ca_cert:
            env[CA_CERT_ENV] = self.ca_cert
        return env

    def _serve(self) -> None:
        """The thread: run the server's loop until close(); never raise, never stop early."""
        try:
            self._server = _Server(self)
        except Exception:
            self.ready.set()
            return
        self.ready.set()
        while not self.closing:
            try:
                self._server.run()
            except BaseException:  # the endpoint must not end the supervisor
                time.sleep(0.1)
        with contextlib.suppress(Exception):
            self._server.loop.close()

    def accept(self, ts: dict[str, Any]) -> None:
        """Store an accepted status: it replaces `trainer-status.json` (atomically)."""
        path = os.path.join(self.job_dir, STATUS_FILE)
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with self.lock:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(encode(ts), fh)
            os.replace(tmp, path)

    def authorized(self, header: str | None, namespace: str, name: str) -> bool:
        """One `Bearer <token>` credential, of this job, for this job's path (as the Trainer's
        authorizer: the token's audience is one TrainJob)."""
        import hmac

        parts = (header or "").split()
        if len(parts) != 2 or parts[0].lower() != "bearer":
            return False
        ok = hmac.compare_digest(parts[1].encode("utf-8", "replace"), self.token.encode())
        return ok and (namespace, name) == (NAMESPACE, self.name)

    def close(self) -> None:
        """Stop serving (the supervisor is ending)."""
        if not self.started:
            with contextlib.suppress(Exception):
                self.sock.close()
            return
        self.ready.wait(10)
        self.closing = True
        server = self._server
        if server is not None:
            with contextlib.suppress(Exception):
                server.loop.call_soon_threadsafe(server.stop.set)
        self.thread.join(5)
        with contextlib.suppress(Exception):
            self.sock.close()


def _connection_cap() -> int:
    """`MAX_CONNECTIONS`, fewer where the open-file limit is small (a quarter of what is left)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return MAX_CONNECTIONS
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(4, min(MAX_CONNECTIONS, (soft - 64) // 4))


# -- HTTP/1.1 on asyncio: what net/http accepts and refuses, every connection bounded ----------

_REASONS = {
    100: "Continue", 200: "OK", 301: "Moved Permanently", 400: "Bad Request", 403: "Forbidden",
    404: "Not Found", 413: "Request Entity Too Large", 417: "Expectation Failed",
    422: "Unprocessable Entity", 431: "Request Header Fields Too Large",
    500: "Internal Server Error", 501: "Not Implemented", 505: "HTTP Version Not Supported",
}  # fmt: skip
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


class _Reply(Exception):
    """A request net/http refuses before any handler runs: plain text, then the conn closes."""

    def __init__(self, code: int, detail: str = "") -> None:
        super().__init__(code, detail)
        self.code, self.detail = code, detail


class _Request:
    """One parsed request head."""

    def __init__(self, lines: list[bytes]) -> None:
        parts = lines[0].decode("latin-1").split(" ")
        if len(parts) != 3:
            raise _Reply(400, "malformed HTTP request")
        self.method, target, proto = parts
        if not _TOKEN.match(self.method):
            raise _Reply(400, "invalid method")
        m = re.fullmatch(r"HTTP/(\d+)\.(\d+)", proto)
        if m is None:
            raise _Reply(400, "malformed HTTP version")
        if int(m.group(1)) != 1:
            raise _Reply(505, "unsupported protocol version")
        self.http11 = int(m.group(2)) >= 1
        self.headers: dict[str, list[str]] = {}
        for raw in lines[1:]:
            line = raw.decode("latin-1")
            name, sep, value = line.partition(":")
            if not sep or not _TOKEN.match(name):
                raise _Reply(400, "malformed MIME header line")
            value = value.strip(" \t")
            if _CTL.search(value):
                raise _Reply(400, "invalid header value")
            self.headers.setdefault(name.lower(), []).append(value)
        hosts = self.headers.get("host", [])
        if self.http11 and not hosts:
            raise _Reply(400, "missing required Host header")
        if len(hosts) > 1:
            raise _Reply(400, "too many Host headers")
        if _CTL.search(target) or not target:
            raise _Reply(400, "malformed request")
        if target.startswith("/"):
            raw_path, _, self.query = target.partition("?")
        elif re.match(r"https?://", target, re.I):
            from urllib.parse import urlsplit

            split = urlsplit(target)
            raw_path, self.query = split.path or "/", split.query
        else:
            raise _Reply(400, "malformed request")
        if _BAD_ESCAPE.search(raw_path):
            raise _Reply(400, "invalid URL escape")
        self.raw_path = raw_path
        te = self.headers.get("transfer-encoding") if self.http11 else None
        self.chunked = False
        if te:
            if len(te) != 1 or te[0].strip().lower() != "chunked":
                raise _Reply(501, "unsupported transfer encoding")
            self.chunked = True
        self.length: int | None = None
        lengths = {v.strip() for v in self.headers.get("content-length", [])}
        if lengths and not self.chunked:
            value = lengths.pop()
            if lengths or not re.fullmatch(r"[0-9]+", value):
                raise _Reply(400, "bad Content-Length")
            self.length = int(value)
        expect = (self.header("expect") or "").lower()
        self.expect_continue = self.http11 and expect == "100-continue"
        if expect and not self.expect_continue and self.http11:
            raise _Reply(417)
        tokens = {
            t.strip().lower() for v in self.headers.get("connection", []) for t in v.split(",")
        }
        self.keep = ("close" not in tokens) and (self.http11 or "keep-alive" in tokens)
        self.continued = False
        self.unread = self.chunked or bool(self.length)

    def header(self, name: str) -> str | None:
        """The first value of header `name` (Go's `Header.Get`)."""
        values = self.headers.get(name)
        return values[0] if values else None


def clean_path(p: str) -> str:
    """Go's `cleanPath` of net/http's ServeMux (path.Clean, keeping a trailing slash)."""
    if not p:
        return "/"
    if p[0] != "/":
        p = "/" + p
    parts: list[str] = []
    for seg in p.split("/"):
        if seg in ("", "."):
            continue
        if seg == "..":
            if parts:
                parts.pop()
            continue
        parts.append(seg)
    out = "/" + "/".join(parts)
    if p.endswith("/") and out != "/":
        out += "/"
    return out


def _response(
    code: int,
    body: bytes,
    content_type: str | None,
    keep: bool,
    head_only: bool = False,
    extra: tuple[tuple[str, str], ...] = (),
) -> bytes:
    from email.utils import formatdate

    lines = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Status')}"]
    if content_type:
        lines.append(f"Content-Type: {content_type}")
    lines.extend(f"{k}: {v}" for k, v in extra)
    lines.append(f"Date: {formatdate(usegmt=True)}")
    lines.append(f"Content-Length: {len(body)}")
    if not keep:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    return head if head_only else head + body


class _Conn:
    """One accepted connection: its task, transport, and whether it is mid-answer."""

    __slots__ = ("busy", "linger", "sock", "task", "transport")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.busy = False
        self.linger = False
        self.task: Any = None
        self.transport: Any = None

    def kill(self) -> None:
        """Close it now (no TLS goodbye): eviction, timeout or shutdown."""
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.abort()
        if self.task is not None:
            self.task.cancel()


class _Server:
    """The asyncio side of a StatusEndpoint (runs in its thread)."""

    def __init__(self, endpoint: StatusEndpoint) -> None:
        import asyncio

        self.asyncio = asyncio
        self.ep = endpoint
        self.loop = asyncio.new_event_loop()
        # Every error of a connection is that connection's: nothing is logged to the job's files.
        self.loop.set_exception_handler(lambda loop, context: None)
        self.ssl: Any = None
        if endpoint.tls is not None:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*endpoint.tls)
            ctx.set_alpn_protocols(["http/1.1"])
            self.ssl = ctx
        self.stop = asyncio.Event()
        self.conns: dict[int, _Conn] = {}  # in the order they were accepted
        self.endpoint_sock = endpoint.sock
        self.endpoint_sock.setblocking(False)

    def run(self) -> None:
        """Serve until `stop` is set."""
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        asyncio = self.asyncio
        accept = asyncio.ensure_future(self._accept_loop())
        try:
            await self.stop.wait()
        finally:
            accept.cancel()
            tasks = [c.task for c in self.conns.values() if c.task is not None]
            for c in list(self.conns.values()):
                c.kill()
            await asyncio.gather(accept, *tasks, return_exceptions=True)

    def _evict(self) -> bool:
        """Close the oldest connection that is not mid-answer; False if there is none."""
        for key, c in self.conns.items():
            if not c.busy:
                del self.conns[key]
                c.kill()
                self.ep.counts["evicted"] += 1
                return True
        return False

    async def _accept_loop(self) -> None:
        asyncio, loop = self.asyncio, self.loop
        while True:
            try:
                sock, _ = await loop.sock_accept(self.endpoint_sock)
            except asyncio.CancelledError:
                raise
            except OSError:  # EMFILE/ENFILE, ECONNABORTED...: make room, wait, go on
                self._evict()
                await asyncio.sleep(0.05)
                continue
            self.ep.counts["accepted"] += 1
            while len(self.conns) >= self.ep.max_connections and self._evict():
                pass
            if len(self.conns) >= self.ep.max_connections:
                sock.close()  # every one is mid-answer: this one goes
                continue
            conn = _Conn(sock)
            self.conns[id(conn)] = conn
            conn.task = loop.create_task(self._connection(conn))

    async def _connection(self, conn: _Conn) -> None:
        asyncio, loop = self.asyncio, self.loop
        writer: Any = None
        graceful = False
        try:
            reader = asyncio.StreamReader(limit=MAX_HEADER)
            protocol = asyncio.StreamReaderProtocol(reader)
            kwargs: dict[str, Any] = {}
            if self.ssl is not None:
                kwargs = {
                    "ssl": self.ssl,
                    "ssl_handshake_timeout": READ_TIMEOUT,
                    "ssl_shutdown_timeout": 2.0,
                }
            async with asyncio.timeout(READ_TIMEOUT + 1):
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, conn.sock, **kwargs
                )
            conn.transport = transport
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            wait = READ_TIMEOUT
            while True:
                conn.busy = False
                async with asyncio.timeout(wait):
                    first = await reader.read(1)
                if not first:
                    return
                deadline = loop.time() + READ_TIMEOUT
                async with asyncio.timeout_at(deadline):
                    lines = await self._read_head(reader, first)
                keep = await self._exchange(conn, reader, writer, lines, deadline)
                if not keep:
                    graceful = True
                    return
                wait = IDLE_TIMEOUT
        except BaseException:  # timeouts, resets, TLS errors, eviction: close it
            graceful = False
        finally:
            self.conns.pop(id(conn), None)
            if writer is not None and graceful and conn.linger:
                # net/http's closeWriteAndWait: the client may still be sending the body we
                # did not read; closing with it unread makes the kernel send a reset, and the
                # client sees "connection reset"/EOF instead of our answer. Read it out (a
                # bounded amount, for a bounded time) so the answer arrives.
                with contextlib.suppress(BaseException):
                    async with asyncio.timeout(LINGER_S):
                        drained = 0
                        while drained < LINGER_MAX:
                            chunk = await reader.read(65536)
                            if not chunk:
                                break
                            drained += len(chunk)
            if writer is not None and graceful:
                with contextlib.suppress(BaseException):
                    writer.close()
                    async with asyncio.timeout(2.0):
                        await writer.wait_closed()
            if conn.transport is not None:
                with contextlib.suppress(Exception):
                    conn.transport.abort()
            else:
                with contextlib.suppress(Exception):
                    conn.sock.close()

    async def _read_head(self, reader: Any, first: bytes) -> list[bytes]:
        lines: list[bytes] = []
        total = 0
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # one line over the limit
                raise _Reply(431) from None
            if first:
                line, first = first + line, b""
            if not line.endswith(b"\n"):
                raise ConnectionError("the request ended early")
            total += len(line)
            if total > MAX_HEADER:
                raise _Reply(431)
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
            if not line:
                if not lines:
                    raise _Reply(400, "malformed HTTP request")
                return lines
            if lines and line[:1] in (b" ", b"\t"):
                raise _Reply(400, "malformed MIME header line")
            lines.append(line)

    async def _send(self, conn: _Conn, writer: Any, data: bytes) -> None:
        conn.busy = True
        writer.write(data)
        async with self.asyncio.timeout(WRITE_TIMEOUT):
            await writer.drain()

    async def _read_body(
        self, reader: Any, writer: Any, req: _Request, limit: int
    ) -> tuple[bytes, bool]:
        """Up to `limit` bytes of the body, and whether it was read to its end without error."""
        if not req.unread:
            return b"", True
        if req.expect_continue and not req.continued:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            req.continued = True
        req.unread = False
        if not req.chunked:
            assert req.length is not None
            if req.length > limit:
                return await reader.readexactly(limit), False
            return await reader.readexactly(req.length), True
        data = bytearray()
        while True:
            line = await reader.readline()
            if not line.endswith(b"\n") or len(line) > 4096:
                return bytes(data), False
            size_text = line.split(b";")[0].strip()
            if not re.fullmatch(rb"[0-9a-fA-F]{1,16}", size_text):
                return bytes(data), False
            size = int(size_text, 16)
            if size == 0:
                trailer = 0
                while True:  # the trailer, up to its empty line
                    t = await reader.readline()
                    trailer += len(t)
                    if not t.endswith(b"\n") or trailer > MAX_HEADER:
                        return bytes(data), False
                    if t in (b"\r\n", b"\n"):
                        return bytes(data), True
            if len(data) + size > limit:
                data += await reader.readexactly(limit - len(data))
                return bytes(data), False
            data += await reader.readexactly(size)
            if await reader.readexactly(2) != b"\r\n":
                return bytes(data), False

    async def _settle(self, reader: Any, writer: Any, req: _Request, deadline: float) -> bool:
        """Before answering, as net/http does: read out a small unread body so the connection
        can be reused; False (close after the answer) when it cannot be."""
        if not req.keep:
            return False
        if not req.unread:
            return True
        if req.expect_continue and not req.continued:
            return False
        if req.length is not None and req.length > MAX_DISCARD:
            return False
        try:
            async with self.asyncio.timeout_at(deadline):
                _, whole = await self._read_body(reader, writer, req, MAX_DISCARD)
        except BaseException:
            return False
        return whole

    async def _exchange(
        self, conn: _Conn, reader: Any, writer: Any, lines: list[bytes], deadline: float
    ) -> bool:
        """Answer one request; whether the connection stays open."""
        self.ep.counts["requests"] += 1
        try:
            req = _Request(lines)
        except _Reply as r:
            text = f"{r.code} {_REASONS.get(r.code, '')}" + (f": {r.detail}" if r.detail else "")
            await self._send(
                conn, writer, _response(r.code, text.encode(), "text/plain; charset=utf-8", False)
            )
            return False
        head_only = req.method == "HEAD"

        async def answer(
            code: int,
            body: bytes,
            ctype: str | None = "application/json",
            extra: tuple[tuple[str, str], ...] = (),
        ) -> bool:
            keep = await self._settle(reader, writer, req, deadline)
            conn.linger = not keep and req.unread
            await self._send(conn, writer, _response(code, body, ctype, keep, head_only, extra))
            return keep

        def status(code: int, reason: str, message: str) -> bytes:
            return go_json(_status_body(code, reason, message))

        # The Trainer's body-size middleware wraps everything: a declared length over 64 KiB.
        if req.length is not None and req.length > MAX_BODY:
            return await answer(413, status(413, "RequestEntityTooLarge", "Payload too large"))
        from urllib.parse import unquote

        raw_segments = req.raw_path.split("/")
        path = unquote(req.raw_path)
        if req.method != "CONNECT" and clean_path(path) != path:
            where = clean_path(req.raw_path) + (f"?{req.query}" if req.query else "")
            html = req.method in ("GET", "HEAD")
            body = f'<a href="{where}">Moved Permanently</a>.\n\n'.encode() if html else b""
            ctype = "text/html; charset=utf-8" if html else None
            return await answer(301, body, ctype, (("Location", where),))
        segments = [unquote(s) for s in raw_segments]
        m = _ROUTE.fullmatch("/".join(segments)) if len(segments) == 9 else None
        if req.method != "POST" or m is None:
            return await answer(404, status(404, "NotFound", "Not found"))
        if not self.ep.authorized(req.header("authorization"), m.group(1), m.group(2)):
            return await answer(403, status(403, "Forbidden", "Forbidden"))
        async with self.asyncio.timeout_at(deadline):
            raw, _ = await self._read_body(reader, writer, req, MAX_BODY)
        try:
            ts = decode(raw)
            if ts is not None:
                errors = schema_errors(ts)
                if errors:
                    listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
                    raise Invalid(
                        f'TrainJob.trainer.kubeflow.org "{self.ep.name}" is invalid: {listed}'
                    )
        except Invalid as exc:
            return await answer(422, status(422, "Invalid", str(exc)))
        except Exception:  # the Trainer's recovery middleware
            return await answer(500, status(500, "InternalError", "Internal Server Error"))
        if ts is not None:
            try:
                self.ep.accept(ts)
            except Exception:  # a full disk: the Trainer's apply failing
                return await answer(500, status(500, "InternalError", "Internal error"))
        return await answer(200, go_json(encode(ts)))
