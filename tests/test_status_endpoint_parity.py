"""The local status endpoint accepts and refuses what the Trainer's status server does (issue 19
item 12, issue 20): kubeflow/trainer v2.3.0 pkg/statusserver is a Go net/http server
(server.go:86-105 its mux, middleware and timeouts; middleware.go:64-79 the 64 KiB limit;
auth.go:120-128 the bearer credential) that decodes the body with encoding/json into
UpdateTrainJobStatusRequest (trainjob_types.go:563-621) and applies it against the TrainJob CRD.

Requests are written byte for byte over TLS, as any client (or attacker) could send them.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter.backends.local.status_endpoint import StatusEndpoint, parse_rfc3339

NOW = "2026-12-01T10:00:00Z"


@pytest.fixture
def endpoint(tmp_path: Path) -> Any:
    ep = StatusEndpoint(str(tmp_path), "job-x")
    yield ep
    ep.close()


def connect(ep: Any) -> socket.socket:
    port = int(ep.url.split("://127.0.0.1:")[1].split("/")[0])
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    if ep.ca_cert:
        ctx = ssl.create_default_context(cafile=ep.ca_cert)
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    return sock


def read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    code = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    want = int(headers.get("content-length", "0"))
    while len(body) < want:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return code, headers, body


def exchange(ep: Any, data: bytes) -> tuple[int, dict[str, str], Any]:
    with connect(ep) as sock:
        sock.sendall(data)
        code, headers, body = read_answer(sock)
    try:
        return code, headers, json.loads(body)
    except ValueError:
        return code, headers, body


def request(ep: Any, body: bytes, *, token: str | None = "", path: str | None = None,
            method: str = "POST", extra: str = "", length: bool = True) -> bytes:  # fmt: skip
    lines = [f"{method} {path or ep.path} HTTP/1.1", "Host: 127.0.0.1"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token or ep.token}")
    if length:
        lines.append(f"Content-Length: {len(body)}")
    head = "\r\n".join(lines) + "\r\n" + extra + "\r\n"
    return head.encode() + body


def chunked(body: bytes, size: int = 1000) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def stored(ep: Any) -> Any:
    path = Path(ep.job_dir) / "trainer-status.json"
    return json.loads(path.read_text()) if path.exists() else None


def status(body: dict[str, Any]) -> bytes:
    return json.dumps({"trainerStatus": body}).encode()


@pytest.mark.reliability(
    scenario="a status endpoint body nested 20,000 levels deep (and 12,000 in an ignored field)",
    area="hostile",
)
def test_a_deeply_nested_body_is_invalid_not_an_internal_error(endpoint: Any) -> None:
    """Issue 20 (Low): json.loads' RecursionError answered 500; Go's decoder says 422."""
    deep = b'{"trainerStatus": ' + b"[" * 20000 + b"]" * 20000 + b"}"
    code, _, answer = exchange(endpoint, request(endpoint, deep[:65000]))
    assert (code, answer["reason"], answer["message"]) == (422, "Invalid", "Invalid payload")
    # the same in an ignored field, past Go's 10,000 levels
    deep = b'{"x": ' + b"[" * 12000 + b"]" * 12000 + b', "trainerStatus": null}'
    assert exchange(endpoint, request(endpoint, deep))[0] == 422
    assert stored(endpoint) is None


def test_a_chunked_body_is_read_as_the_trainer_reads_it(endpoint: Any) -> None:
    body = status({"progressPercentage": 12, "lastUpdatedTime": NOW})
    code, _, answer = exchange(
        endpoint,
        request(endpoint, chunked(body, 7), length=False, extra="Transfer-Encoding: chunked\r\n"),
    )
    assert code == 200, answer
    assert stored(endpoint) == {"trainerStatus": {"progressPercentage": 12, "lastUpdatedTime": NOW}}
    # chunked past 64 KiB: http.MaxBytesReader stops the decoder: 422, not 413 (no length)
    big = status({"progressPercentage": 13, "lastUpdatedTime": NOW, "pad": "x" * 70000})
    code, _, answer = exchange(
        endpoint,
        request(endpoint, chunked(big, 8000), length=False, extra="Transfer-Encoding: chunked\r\n"),
    )
    assert (code, answer["message"]) == (422, "Invalid payload")
    assert stored(endpoint)["trainerStatus"]["progressPercentage"] == 12


@pytest.mark.parametrize(
    ("when", "accepted"),
    [
        ("2026-12-01T10:00:00Z", "2026-12-01T10:00:00Z"),
        ("2026-12-01T10:00:00.123456789+02:00", "2026-12-01T08:00:00Z"),
        ("2026-12-01T10:00:00,5-01:30", "2026-12-01T11:30:00Z"),
        ("2026-12-01", None),
        ("2026-12-01T10:00:00", None),
        ("2026-12-01 10:00:00Z", None),
        ("2026-12-01t10:00:00z", None),
        ("20261201T100000Z", None),
        ("2026-02-30T10:00:00Z", None),
        ("2026-12-01T10:00:00+0200", None),
        ("yesterday", None),
    ],
)
def test_last_updated_time_is_rfc3339_only(endpoint: Any, when: str, accepted: str | None) -> None:
    """metav1.Time: time.Parse(time.RFC3339, ...), echoed in UTC whole seconds. Python's
    fromisoformat took dates, spaces and zone-less times the Trainer refuses."""
    code, _, answer = exchange(endpoint, request(endpoint, status({"lastUpdatedTime": when})))
    if accepted is None:
        assert (code, answer["message"]) == (422, "Invalid payload"), answer
        assert stored(endpoint) is None
    else:
        assert code == 200, answer
        assert answer == {"trainerStatus": {"lastUpdatedTime": accepted}}
        assert stored(endpoint) == answer


def test_go_json_decoding_rules(endpoint: Any) -> None:
    # only the first JSON value is decoded; keys match case-insensitively; unknown keys ignored
    body = b'{"TRAINERSTATUS": {"ProgressPercentage": 7, "lastupdatedtime": "' + NOW.encode()
    body += b'", "other": [1]}, "x": {}} and then anything'
    code, _, answer = exchange(endpoint, request(endpoint, body))
    assert (code, answer) == (200, {"trainerStatus": {"progressPercentage": 7, "lastUpdatedTime": NOW}})  # fmt: skip
    # a top-level null is an empty request; a float, NaN or an int32 overflow is a decode error
    assert exchange(endpoint, request(endpoint, b"null"))[:1] == (200,)
    for bad in (b'{"trainerStatus": {"progressPercentage": 7.0, "lastUpdatedTime": "%s"}}',
                b'{"x": NaN, "trainerStatus": {"lastUpdatedTime": "%s"}}',
                b'{"trainerStatus": {"estimatedRemainingSeconds": 2147483648, "lastUpdatedTime": "%s"}}',
                b"", b"  "):  # fmt: skip
        code, _, answer = exchange(endpoint, request(endpoint, bad.replace(b"%s", NOW.encode())))
        assert (code, answer["message"]) == (422, "Invalid payload"), bad
    # no Content-Length and no chunks: an empty body (EOF), not 411
    code, _, answer = exchange(endpoint, request(endpoint, b"", length=False))
    assert (code, answer["message"]) == (422, "Invalid payload")
    # what the CRD refuses: 422 with the API server's message
    code, _, answer = exchange(
        endpoint, request(endpoint, status({"progressPercentage": 101, "lastUpdatedTime": NOW}))
    )
    assert code == 422 and answer["reason"] == "Invalid"
    assert answer["message"] == (
        'TrainJob.trainer.kubeflow.org "job-x" is invalid: status.trainerStatus.progressPercentage: '
        "Invalid value: 101: status.trainerStatus.progressPercentage in body should be less than "
        "or equal to 100"
    )
    code, _, answer = exchange(endpoint, request(endpoint, status({"progressPercentage": 5})))
    assert code == 422 and "lastUpdatedTime is required when trainerStatus is present" in answer["message"]  # fmt: skip


def test_status_codes_and_their_order(endpoint: Any) -> None:
    ok = status({"lastUpdatedTime": NOW})
    # 413 on the declared length comes first, before the path and the token (the middleware)
    head = f"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 20}\r\n\r\n".encode()
    code, headers, answer = exchange(endpoint, head)
    assert (code, answer["reason"]) == (413, "RequestEntityTooLarge")
    assert headers.get("connection") == "close"
    # every other method or path: the not-found handler (no 405)
    assert exchange(endpoint, request(endpoint, b"", method="GET", length=False))[0] == 404
    assert exchange(endpoint, request(endpoint, ok, method="PUT"))[0] == 404
    assert exchange(endpoint, request(endpoint, ok, path=endpoint.path + "/"))[0] == 404
    # an unclean path is redirected by the mux
    unclean = endpoint.path.replace("/status", "/../job-x/status")
    code, headers, _ = exchange(endpoint, request(endpoint, ok, path=unclean))
    assert (code, headers["location"]) == (301, endpoint.path)
    # exactly one Bearer credential (auth.go:120-128), case-insensitive scheme
    assert exchange(endpoint, request(endpoint, ok, token=endpoint.token + " extra"))[0] == 403
    lower = request(endpoint, ok, token=None, extra=f"Authorization: bearer   {endpoint.token}\r\n")
    assert exchange(endpoint, lower)[0] == 200
    # what net/http refuses before any handler
    assert exchange(endpoint, b"POST / HTTP/1.1\r\n\r\n")[0] == 400  # no Host
    assert exchange(endpoint, b"POST / HTTP/2.0\r\nHost: x\r\n\r\n")[0] == 505
    gzip = request(endpoint, ok, length=False, extra="Transfer-Encoding: gzip\r\n")
    assert exchange(endpoint, gzip)[0] == 501
    # the metav1.Status body is the Trainer's: no kind, no apiVersion
    code, _, answer = exchange(endpoint, request(endpoint, ok, token="nope"))
    assert answer == {"metadata": {}, "status": "Failure", "message": "Forbidden",
                      "reason": "Forbidden", "code": 403}  # fmt: skip


def test_keep_alive_and_expect_continue(endpoint: Any) -> None:
    body = status({"progressPercentage": 3, "lastUpdatedTime": NOW})
    with connect(endpoint) as sock:
        for _ in range(3):  # one connection, three requests
            sock.sendall(request(endpoint, body))
            assert read_answer(sock)[0] == 200
        sock.sendall(request(endpoint, body, extra="Expect: 100-continue\r\n")[: -len(body)])
        assert read_answer(sock)[0] == 100
        sock.sendall(body)
        assert read_answer(sock)[0] == 200


def test_rfc3339_parser_matches_go_on_edges() -> None:
    assert parse_rfc3339("2026-12-01T5:04:05Z").hour == 5  # Go's general parser takes 1 digit
    for bad in ("2026-12-01T24:00:00Z", "2026-12-01T10:60:00Z", "2026-13-01T10:00:00Z",
                "2026-12-01T10:00:00+24:00", " 2026-12-01T10:00:00Z"):  # fmt: skip
        with pytest.raises(ValueError):
            parse_rfc3339(bad)


def test_idle_and_slow_connections_are_bounded_and_timed_out(endpoint: Any) -> None:
    """Connections over the cap close the oldest idle ones; the job's own request still lands."""
    held = [connect_raw(endpoint) for _ in range(endpoint.max_connections + 40)]
    try:
        body = status({"progressPercentage": 9, "lastUpdatedTime": NOW})
        assert exchange(endpoint, request(endpoint, body))[0] == 200
        deadline = time.monotonic() + 10
        while endpoint.counts["evicted"] < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert endpoint.counts["evicted"] >= 40
    finally:
        for s in held:
            s.close()


def connect_raw(ep: Any) -> socket.socket:
    port = int(ep.url.split("://127.0.0.1:")[1].split("/")[0])
    return socket.create_connection(("127.0.0.1", port), timeout=15)
