"""The Jupyter server extension against a real Jupyter server and the real local backend.

pytest-jupyter's fixtures are imported into this module only (not registered in
tests/conftest.py) because its autouse fixtures create and close an event loop and a ServerApp
around every test of the whole suite; here they apply to these tests alone.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (fixtures, scoped to this module)
from tornado.httpclient import HTTPResponse
from tornado.routing import PathMatches, Router, RuleRouter

from kf_jupyter import MPITrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.client import TrainerClient

API = "kf-jupyter/api"


def hello(greeting: str = "hi") -> None:
    """Prints one line per rank."""
    import os

    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "?"))
    print(f"{greeting} from rank {rank}", flush=True)


def ticker(n: int = 8, delay: float = 0.25) -> None:
    """Prints a numbered line every `delay` seconds."""
    import time

    for i in range(n):
        print(f"tick {i}", flush=True)
        time.sleep(delay)


def sleeper() -> None:
    """Stays silent for a long time (a job the test deletes)."""
    import time

    time.sleep(120)


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One job store for the module: a finished job is made once and read by many tests."""
    return tmp_path_factory.mktemp("kf-state")


@pytest.fixture(scope="module")
def kernel_client(state_dir: Path) -> TrainerClient:
    """A TrainerClient as a notebook kernel would have it, on the same job store."""
    return TrainerClient(LocalBackendConfig(state_dir=state_dir))


@pytest.fixture(scope="module")
def done_job(kernel_client: TrainerClient) -> str:
    """A finished 2-rank MPI job started from 'a kernel' (this test process)."""
    name = kernel_client.train(MPITrainer(func=hello, num_proc_per_node=2))
    kernel_client.wait_for_job_status(name, timeout=120)
    return name


@pytest.fixture
def jp_server_config(state_dir: Path, tmp_path: Path) -> dict[str, Any]:
    """Enable the extension, pointed at the module's job store."""
    return {
        "ServerApp": {"jpserver_extensions": {"kf_jupyter": True}},
        "KFJupyterServer": {"state_dir": str(state_dir), "keepalive_seconds": 1.0},
    }


@pytest.fixture(autouse=True)
def _no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture
def fetch(jp_fetch: Any, jp_asyncio_loop: Any) -> Callable[..., HTTPResponse]:
    """Authenticated request (token header), returning the response whatever its status."""

    def _fetch(*parts: str, **kwargs: Any) -> HTTPResponse:
        kwargs.setdefault("raise_error", False)
        return jp_asyncio_loop.run_until_complete(jp_fetch(*parts, **kwargs))

    return _fetch


@pytest.fixture
def raw(http_server_client: Any, jp_asyncio_loop: Any, jp_base_url: str) -> Callable[..., Any]:
    """Request a raw path under base_url with no credentials unless given."""

    def _raw(path: str, **kwargs: Any) -> HTTPResponse:
        kwargs.setdefault("raise_error", False)
        kwargs.setdefault("follow_redirects", False)
        return jp_asyncio_loop.run_until_complete(
            http_server_client.fetch(jp_base_url + path, **kwargs)
        )

    return _raw


def body(resp: HTTPResponse) -> Any:
    """The JSON body."""
    return json.loads(resp.body)


def assert_error(resp: HTTPResponse, status: int, kind: str) -> str:
    """The contract's error shape: JSON {error, kind}, the right status, no traceback."""
    assert resp.code == status, (resp.code, resp.body)
    assert resp.headers["Content-Type"].startswith("application/json")
    data = body(resp)
    assert set(data) == {"error", "kind"}, data
    assert data["kind"] == kind, data
    assert "Traceback" not in data["error"] and len(data["error"]) > 20
    return data["error"]


def kf_patterns(router: Router) -> Iterator[str]:
    """Every path pattern registered in the app that belongs to kf-jupyter."""
    for rule in getattr(router, "rules", []):
        if isinstance(rule.target, RuleRouter):
            yield from kf_patterns(rule.target)
        elif isinstance(rule.matcher, PathMatches):
            pattern = rule.matcher.regex.pattern
            if "kf-jupyter" in pattern:
                yield pattern


# -- auth ---------------------------------------------------------------------------------------


def test_every_route_rejects_unauthenticated_requests(
    jp_serverapp: Any, raw: Callable[..., HTTPResponse], jp_base_url: str
) -> None:
    app = jp_serverapp.web_app
    patterns = sorted(set(kf_patterns(app.wildcard_router)) | set(kf_patterns(app.default_router)))
    expected = {
        "backends",
        "runtimes",
        "jobs",
        "jobs/x",
        "jobs/x/logs",
        "jobs/x/events",
        "jobs/x/cancel",
        "stream",  # the update WebSocket (socket.py)
    }
    expected |= {"jobs/x/suspend", "jobs/x/resume"}
    paths = set()
    for pattern in patterns:
        rel = pattern.split("kf-jupyter/api/", 1)[1]
        rel = rel.replace("(?P<name>[^/]+)", "x").replace("/?$", "").rstrip("$")
        if "(?P<action>suspend|resume)" in rel:
            paths |= {rel.replace("(?P<action>suspend|resume)", a) for a in ("suspend", "resume")}
            continue
        paths.add(rel)
    assert paths == expected, patterns
    for rel in sorted(paths):
        methods = {
            "jobs/x": ("GET", "DELETE"),
            "jobs/x/cancel": ("POST",),
            "jobs/x/suspend": ("POST",),
            "jobs/x/resume": ("POST",),
        }.get(rel, ("GET",))
        for method in methods:
            extra = {"body": b""} if method == "POST" else {}
            resp = raw(f"{API}/{rel}?backend=local", method=method, **extra)
            assert resp.code == 403, (method, rel, resp.code, resp.body)
            assert b"Traceback" not in resp.body
            # a wrong token is no better than none
            resp = raw(
                f"{API}/{rel}", method=method, headers={"Authorization": "token nope"}, **extra
            )
            assert resp.code == 403, (method, rel, resp.code)


def test_delete_needs_xsrf_when_authenticated_by_cookie(
    jp_serverapp: Any, raw: Callable[..., HTTPResponse], kernel_client: TrainerClient
) -> None:
    name = kernel_client.train(MPITrainer(func=hello, num_proc_per_node=1))
    token = jp_serverapp.identity_provider.token
    # a browser session: the login cookie and the _xsrf cookie the pages set
    login = raw(f"api/status?token={token}")
    page = raw("no-such-page")
    cookies = [c.split(";")[0] for r in (login, page) for c in r.headers.get_list("Set-Cookie")]
    xsrf = next(c.split("=", 1)[1] for c in cookies if c.startswith("_xsrf="))
    cookie = "; ".join(cookies)
    assert raw(f"{API}/jobs", headers={"Cookie": cookie}).code == 200
    refused = raw(f"{API}/jobs/{name}", method="DELETE", headers={"Cookie": cookie})
    assert refused.code == 403 and b"_xsrf" in refused.body
    assert name in {j.name for j in kernel_client.list_jobs()}  # still there
    ok = raw(f"{API}/jobs/{name}", method="DELETE", headers={"Cookie": cookie, "X-XSRFToken": xsrf})
    assert ok.code == 204, ok.body
    assert name not in {j.name for j in kernel_client.list_jobs()}


def test_cancel_needs_xsrf_when_authenticated_by_cookie(
    jp_serverapp: Any, raw: Callable[..., HTTPResponse], kernel_client: TrainerClient
) -> None:
    name = kernel_client.train(MPITrainer(func=sleeper, num_proc_per_node=1))
    token = jp_serverapp.identity_provider.token
    login = raw(f"api/status?token={token}")
    page = raw("no-such-page")
    cookies = [c.split(";")[0] for r in (login, page) for c in r.headers.get_list("Set-Cookie")]
    xsrf = next(c.split("=", 1)[1] for c in cookies if c.startswith("_xsrf="))
    cookie = "; ".join(cookies)
    url = f"{API}/jobs/{name}/cancel"
    refused = raw(url, method="POST", body=b"", headers={"Cookie": cookie})
    assert refused.code == 403 and b"_xsrf" in refused.body
    assert kernel_client.get_job(name).status in ("Created", "Running")  # untouched
    ok = raw(url, method="POST", body=b"", headers={"Cookie": cookie, "X-XSRFToken": xsrf})
    assert ok.code == 200, ok.body
    kernel_client.delete_job(name)


# -- happy paths --------------------------------------------------------------------------------


def test_cancel_stops_a_running_job_and_refuses_an_ended_one(
    fetch: Callable, kernel_client: TrainerClient, done_job: str
) -> None:
    name = kernel_client.train(MPITrainer(func=sleeper, num_proc_per_node=2))
    kernel_client.wait_for_job_status(name, frozenset({"Running"}), timeout=120)
    resp = fetch(API, "jobs", name, "cancel", method="POST", body=b"")
    assert resp.code == 200, resp.body
    job = body(resp)
    # the answer is the backend's record after the cancel, not a hope
    assert (job["status"], job["reason"]) == ("Failed", "Cancelled")
    assert kernel_client.get_job(name).reason == "Cancelled"
    # again, now that it ended: 409, nothing changes, the real status comes back
    again = fetch(API, "jobs", name, "cancel", method="POST", body=b"")
    assert again.code == 409 and body(again)["kind"] == "JobEnded"
    # a late Cancel on a Complete job never turns it into Cancelled
    late = fetch(API, "jobs", done_job, "cancel", method="POST", body=b"")
    assert late.code == 409, late.body
    assert body(late)["job"]["status"] == "Complete"
    assert "already ended (Complete)" in body(late)["error"]
    assert kernel_client.get_job(done_job).status == "Complete"
    kernel_client.delete_job(name)


def test_backends_lists_local_and_explains_missing_kubernetes(fetch: Callable) -> None:
    data = body(fetch(API, "backends"))
    assert data["default"] == "local"
    local, kube = data["backends"]
    assert local == {"name": "local", "available": True}
    assert kube["name"] == "kubernetes" and kube["available"] is False
    assert kube["namespace"] is None and len(kube["error"]) > 20


def test_runtimes_by_framework(fetch: Callable) -> None:
    everything = body(fetch(API, "runtimes", params={"backend": "local"}))["runtimes"]
    assert {"torch", "deepspeed", "jax", "xgboost"} <= {r["framework"] for r in everything}
    torch = body(fetch(API, "runtimes", params={"framework": "torch"}))["runtimes"]
    assert torch and all(r["framework"] == "torch" for r in torch)
    assert {"name", "image", "num_nodes", "num_proc_per_node"} <= set(torch[0])


def test_runtimes_list_an_installed_plugins_runtime(fetch: Callable, monkeypatch) -> None:
    """The lab sidebar's runtimes list comes from this route: a plugin's runtime is in it, under
    its framework, with the plugin's name (tests/test_plugins.py installs the real package)."""
    from kf_jupyter import plugins
    from tests.test_plugins import GOOD, _eps

    monkeypatch.syspath_prepend(str(GOOD))
    monkeypatch.setattr(plugins, "_entry_points", lambda: _eps(("ring", "kf_ring.plugin:plugin")))
    plugins.reload()
    try:
        ring = body(fetch(API, "runtimes", params={"backend": "local", "framework": "ring"}))
    finally:
        plugins.registry.cache_clear()
    assert [(r["name"], r["framework"], r["plugin"], r["runs_here"]) for r in ring["runtimes"]] == [
        ("ring-distributed", "ring", "ring", True)
    ]


def test_runtimes_say_which_cannot_run_locally_and_why(
    fetch: Callable, kernel_client: TrainerClient
) -> None:
    """torchtune runtimes are listed but marked, with the very reason `train` refuses them."""
    from kf_jupyter import TorchTrainer, ValidationError

    runtimes = body(fetch(API, "runtimes", params={"backend": "local"}))["runtimes"]
    by_name = {r["name"]: r for r in runtimes}
    assert by_name["torch-distributed"]["runs_here"] is True
    assert by_name["torch-distributed"]["unsupported_reason"] is None
    tunes = [r for r in runtimes if r["framework"] == "torchtune"]
    assert tunes, sorted(by_name)
    for r in tunes:
        assert r["runs_here"] is False
        with pytest.raises(ValidationError) as refused:
            kernel_client.train(TorchTrainer(func=hello), runtime=r["name"])
        assert r["unsupported_reason"] == str(refused.value)
        assert "cluster" in r["unsupported_reason"]
    assert all(r["runs_here"] for r in runtimes if r["framework"] != "torchtune")


def test_jobs_from_a_kernel_appear(fetch: Callable, done_job: str) -> None:
    jobs = body(fetch(API, "jobs"))["jobs"]
    job = next(j for j in jobs if j["name"] == done_job)
    assert job["status"] == "Complete" and job["backend"] == "local"
    one = body(fetch(API, "jobs", done_job, params={"backend": "local"}))
    assert one["name"] == done_job and one["status"] == "Complete"
    assert one["creation_time"] and len(one["steps"]) >= 1


def test_job_events(fetch: Callable, done_job: str) -> None:
    events = body(fetch(API, "jobs", done_job, "events"))["events"]
    assert events and {"time", "type", "reason", "message"} <= set(events[0])


def test_full_log_is_plain_text_from_both_ranks(fetch: Callable, done_job: str) -> None:
    resp = fetch(API, "jobs", done_job, "logs")
    assert resp.code == 200 and resp.headers["Content-Type"].startswith("text/plain")
    lines = resp.body.decode().splitlines()
    assert "[rank-0] hi from rank 0" in lines and "[rank-1] hi from rank 1" in lines
    tail = fetch(API, "jobs", done_job, "logs", params={"tail": "1"}).body.decode().splitlines()
    assert 1 <= len(tail) < len(lines)


def test_follow_streams_events_while_the_job_runs(
    fetch: Callable, kernel_client: TrainerClient
) -> None:
    name = kernel_client.train(MPITrainer(func=ticker, num_proc_per_node=2))
    arrivals: list[float] = []
    chunks: list[bytes] = []

    def on_chunk(chunk: bytes) -> None:
        arrivals.append(time.monotonic())
        chunks.append(chunk)

    resp = fetch(
        API,
        "jobs",
        name,
        "logs",
        params={"follow": "1", "tail": "1000"},
        streaming_callback=on_chunk,
        request_timeout=120,
    )
    assert resp.code == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    text = b"".join(chunks).decode()
    events = [e for e in text.split("\n\n") if e.strip() and not e.startswith(":")]
    data = [json.loads(e.removeprefix("data: ")) for e in events if e.startswith("data: ")]
    assert {"source": "rank-0", "line": "tick 7"} in data
    assert {"source": "rank-1", "line": "tick 7"} in data
    assert events[-1].startswith("event: end")
    assert json.loads(events[-1].split("data: ", 1)[1]) == {"status": "Complete"}
    # streamed, not sent at the end: chunks arrived over the job's ~2 s of ticking
    assert arrivals[-1] - arrivals[0] > 1.0


def test_closing_a_stream_stops_its_pump_and_delete_stops_the_job(
    fetch: Callable, jp_serverapp: Any, kernel_client: TrainerClient, jp_asyncio_loop: Any
) -> None:
    name = kernel_client.train(MPITrainer(func=ticker, func_args={"n": 400}, num_proc_per_node=1))
    state = jp_serverapp.web_app.settings["kf_jupyter"]
    seen: list[bytes] = []

    def on_chunk(chunk: bytes) -> None:
        seen.append(chunk)
        if b"tick 2" in b"".join(seen):
            raise RuntimeError("client goes away")  # tornado closes the connection

    with pytest.raises(Exception):  # noqa: B017  (the client's own abort)
        fetch(
            API,
            "jobs",
            name,
            "logs",
            params={"follow": "1"},
            streaming_callback=on_chunk,
            raise_error=True,
            request_timeout=60,
        )
    deadline = time.monotonic() + 10
    while state.open_streams and time.monotonic() < deadline:
        jp_asyncio_loop.run_until_complete(asyncio.sleep(0.1))  # the server runs on this loop
    assert state.open_streams == 0
    pumps = [t for t in threading.enumerate() if t.name == "kf-jupyter-logs"]
    for t in pumps:
        t.join(5)  # the job still prints, so the pump sees the stop flag at its next line
    assert not any(t.is_alive() for t in pumps)
    assert fetch(API, "jobs", name, method="DELETE").code == 204
    assert_error(fetch(API, "jobs", name), 404, "JobNotFoundError")


def test_suspend_and_resume_a_job_through_the_server(
    fetch: Callable, kernel_client: TrainerClient
) -> None:
    name = kernel_client.train(MPITrainer(func=ticker, func_args={"n": 400}, num_proc_per_node=1))
    post = {"method": "POST", "body": b"", "params": {"backend": "local"}}
    assert fetch(API, "jobs", name, "suspend", **post).code == 204
    assert body(fetch(API, "jobs", name))["status"] == "Suspended"
    assert fetch(API, "jobs", name, "resume", **post).code == 204
    assert body(fetch(API, "jobs", name))["status"] in ("Running", "Created")
    assert fetch(API, "jobs", name, method="DELETE").code == 204
    assert_error(fetch(API, "jobs", name, "suspend", **post), 404, "JobNotFoundError")


def test_suspending_a_finished_job_is_409(fetch: Callable, done_job: str) -> None:
    post = {"method": "POST", "body": b"", "params": {"backend": "local"}}
    message = assert_error(fetch(API, "jobs", done_job, "suspend", **post), 409, "JobStateError")
    assert "cannot be suspended" in message


# -- errors -------------------------------------------------------------------------------------


def test_unknown_job_is_404_json_on_every_job_route(fetch: Callable) -> None:
    for parts, method in (
        (("jobs", "no-such-job"), "GET"),
        (("jobs", "no-such-job"), "DELETE"),
        (("jobs", "no-such-job", "logs"), "GET"),
        (("jobs", "no-such-job", "events"), "GET"),
        (("jobs", "no-such-job", "cancel"), "POST"),
    ):
        extra = {"body": b""} if method == "POST" else {}
        message = assert_error(fetch(API, *parts, method=method, **extra), 404, "JobNotFoundError")
        assert "no-such-job" in message


@pytest.mark.parametrize(
    "segment",
    ["..%2F..%2Fetc", "..", "%2E%2E", "UPPER", "a_b", "x" * 64, "job%00", "-lead", "..%2Fvictim"],
)
def test_bad_job_names_are_refused_before_touching_the_store(
    raw: Callable[..., HTTPResponse], jp_serverapp: Any, state_dir: Path, segment: str
) -> None:
    victim = state_dir.parent / "victim"
    victim.mkdir(exist_ok=True)
    (victim / "keep").write_text("x")
    auth = {"Authorization": f"token {jp_serverapp.identity_provider.token}"}
    for suffix, method in (("", "GET"), ("", "DELETE"), ("/logs", "GET"), ("/events", "GET")):
        resp = raw(f"{API}/jobs/{segment}{suffix}", method=method, headers=auth)
        if resp.code == 404 and not resp.body.startswith(b"{"):
            continue  # tornado normalised the path to another (non-kf) route
        message = assert_error(resp, 400, "ValidationError")
        assert "RFC 1035" in message
    assert (victim / "keep").exists()


def test_bad_query_arguments_are_400(fetch: Callable, done_job: str) -> None:
    assert_error(fetch(API, "jobs", params={"backend": "slurm"}), 400, "ValidationError")
    assert_error(
        fetch(API, "jobs", params={"backend": "kubernetes", "namespace": "Bad_NS"}),
        400,
        "ValidationError",
    )
    assert_error(fetch(API, "runtimes", params={"framework": "$(x)"}), 400, "ValidationError")
    logs = (API, "jobs", done_job, "logs")
    assert_error(fetch(*logs, params={"tail": "-3"}), 400, "ValidationError")
    assert_error(fetch(*logs, params={"tail": "many"}), 400, "ValidationError")
    assert_error(fetch(*logs, params={"follow": "perhaps"}), 400, "ValidationError")


def test_kubernetes_without_kubeconfig_is_503_with_the_reason(fetch: Callable) -> None:
    resp = fetch(API, "jobs", params={"backend": "kubernetes"})
    assert resp.code == 503, resp.body
    data = body(resp)
    assert data["kind"] in {"ClusterUnreachableError", "BackendUnavailableError"}
    assert "Traceback" not in data["error"]


def test_unexpected_errors_are_500_without_details(
    fetch: Callable, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kf_jupyter.backends.local.backend import LocalBackend

    def broken(self: Any) -> list[Any]:
        raise RuntimeError("secret-ish internals /etc/shadow")

    monkeypatch.setattr(LocalBackend, "list_jobs", broken)
    monkeypatch.setattr(LocalBackend, "list_jobs_json", broken)  # what the jobs route reads
    message = assert_error(fetch(API, "jobs"), 500, "RuntimeError")
    assert "/etc/shadow" not in message and "server log" in message
