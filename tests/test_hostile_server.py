"""The server extension under hostile requests and load: traversal in job names (plain and
encoded), oversized requests, wrong methods, missing XSRF — all refused, nothing outside the job
store read or deleted; and 50 log streams plus 50 job-list requests in flight while a trivial
route still answers quickly (the event loop never blocks). bench/bench_server.py keeps figures.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest_jupyter.jupyter_server import *  # noqa: F403  (fixtures, scoped to this module)
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPResponse

from kf_jupyter import MPITrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.client import TrainerClient

API = "kf-jupyter/api"


def ticker(n: int = 600, delay: float = 0.05) -> None:
    """Prints a numbered line every `delay` seconds."""
    import time

    for i in range(n):
        print(f"tick {i}", flush=True)
        time.sleep(delay)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kf-state")


@pytest.fixture
def jp_server_config(state_dir: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"kf_jupyter": True}},
        "KFJupyterServer": {
            "state_dir": str(state_dir),
            "keepalive_seconds": 1.0,
            "max_log_streams": 64,
        },
    }


@pytest.fixture(autouse=True)
def _no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture
def raw(http_server_client: Any, jp_asyncio_loop: Any, jp_base_url: str) -> Callable[..., Any]:
    def _raw(path: str, **kwargs: Any) -> HTTPResponse:
        kwargs.setdefault("raise_error", False)
        kwargs.setdefault("follow_redirects", False)
        return jp_asyncio_loop.run_until_complete(
            http_server_client.fetch(jp_base_url + path, **kwargs)
        )

    return _raw


@pytest.fixture
def auth(jp_serverapp: Any) -> dict[str, str]:
    return {"Authorization": f"token {jp_serverapp.identity_provider.token}"}


def _victims(state_dir: Path) -> list[Path]:
    """Files outside the job store (and one job-looking folder beside it) that must survive."""
    out = []
    for d in (state_dir.parent / "victim", state_dir.parent / "jobs", state_dir / ".." / "x"):
        d.mkdir(parents=True, exist_ok=True)
        (d / "keep").write_text("secret-outside")
        out.append(d / "keep")
    return out


segments = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["..", "../", "..%2F", "%2E%2E", "%2e%2e%2fvictim", "..%252F", "%2F",
                     "....//", "..\\", "%5C..", "victim/../..", ".", "%00", "jobs", "~root"]),
    st.lists(st.sampled_from(["..", "%2E%2E", "victim", "keep", "%2F", "/", "jobs"]),
             max_size=6).map("".join),
)  # fmt: skip


@pytest.mark.reliability(
    scenario="server routes with hostile job names (../, encoded, NUL, unicode) on GET/DELETE "
    "jobs/<name>, /logs, /events: refused or 404; nothing outside the job store read or deleted",
    area="hostile",
)
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(segment=segments)
def test_traversal_in_job_names_never_escapes_the_store(
    raw: Callable[..., HTTPResponse], auth: dict[str, str], state_dir: Path, segment: str
) -> None:
    victims = _victims(state_dir)
    quoted = urllib.parse.quote(segment, safe="%/.~")
    for suffix, method in (("", "GET"), ("", "DELETE"), ("/logs", "GET"), ("/events", "GET")):
        resp = raw(f"{API}/jobs/{quoted}{suffix}", method=method, headers=auth)
        if resp.code in (301, 302):  # path normalisation ('//'): a redirect on this server
            loc = resp.headers.get("Location", "")
            assert loc.startswith("/") and not loc.startswith("//"), (segment, loc)
        elif resp.code == 200:  # the path normalised to the job list itself ('jobs/')
            assert set(json.loads(resp.body)) == {"jobs"}, (segment, suffix, resp.body[:200])
        else:
            assert resp.code in (400, 403, 404, 405), (segment, suffix, resp.code, resp.body[:200])
        assert b"Traceback" not in resp.body and b"secret-outside" not in resp.body
    assert all(v.read_text() == "secret-outside" for v in victims)


@pytest.mark.reliability(
    scenario="wrong methods (POST/PUT/PATCH on every route), a DELETE without XSRF from a "
    "cookie session, an oversized request: all refused, the job still there",
    area="hostile",
    tries=1,
)
def test_wrong_methods_missing_xsrf_and_oversized_requests(
    raw: Callable[..., HTTPResponse], auth: dict[str, str], jp_serverapp: Any, state_dir: Path
) -> None:
    client = TrainerClient(LocalBackendConfig(state_dir=state_dir))
    name = client.train(
        MPITrainer(func=ticker, func_args={"n": 1, "delay": 0}, num_proc_per_node=1)
    )
    client.wait_for_job_status(name, timeout=120)
    routes = ["backends", "runtimes", "jobs", f"jobs/{name}", f"jobs/{name}/logs",
              f"jobs/{name}/events"]  # fmt: skip
    for route in routes:
        for method in ("POST", "PUT", "PATCH"):
            resp = raw(f"{API}/{route}", method=method, body=b"{}", headers=auth)
            assert resp.code in (403, 405), (method, route, resp.code)
            assert b"Traceback" not in resp.body
        if route != f"jobs/{name}":
            assert raw(f"{API}/{route}", method="DELETE", headers=auth).code in (403, 405)
    # a browser session without the XSRF header may not delete
    token = jp_serverapp.identity_provider.token
    login = raw(f"api/status?token={token}")
    cookie = "; ".join(c.split(";")[0] for c in login.headers.get_list("Set-Cookie"))
    assert raw(f"{API}/jobs/{name}", method="DELETE", headers={"Cookie": cookie}).code == 403

    # oversized: a 64 MiB body, a 100 KB query string and a 100 KB job name
    def refused(path: str, **kwargs: Any) -> int:
        try:
            return raw(path, headers=auth, **kwargs).code
        except (
            OSError,
            HTTPClientError,
        ):  # the server closed the connection (tornado's size limits)
            return 0

    assert refused(f"{API}/jobs", method="POST", body=b"x" * (64 << 20)) in (0, 400, 403, 405, 413)
    assert refused(f"{API}/jobs?backend={'a' * 100_000}") in (0, 400, 414, 431)
    assert refused(f"{API}/jobs/{'a' * 100_000}") in (0, 400, 414, 431)
    assert name in {j.name for j in client.list_jobs()}
    assert raw(f"{API}/backends", headers=auth).code == 200  # still serving
    client.delete_job(name)


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="50 concurrent log streams + 50 job-list requests in flight: the trivial route "
    "(GET backends) still answers, p95 under 1 s (event loop not blocked)",
    area="server",
)
def test_event_loop_stays_responsive_under_50_streams_and_50_lists(
    jp_serverapp: Any,
    jp_base_url: str,
    http_server_port: Any,
    http_server_client: Any,  # starts the server listening on http_server_port
    jp_asyncio_loop: Any,
    auth: dict[str, str],
    state_dir: Path,
    record_property: Any,
) -> None:
    client = TrainerClient(LocalBackendConfig(state_dir=state_dir))
    name = client.train(MPITrainer(func=ticker, num_proc_per_node=1))
    port = http_server_port[-1]
    base = f"http://127.0.0.1:{port}{jp_base_url}"
    token = auth["Authorization"]

    async def scenario() -> dict[str, Any]:
        http = AsyncHTTPClient(force_instance=True, max_clients=200)
        counts = [0] * 50
        started = [asyncio.Event() for _ in range(50)]
        writers: list[asyncio.StreamWriter] = []
        path = f"{jp_base_url}{API}/jobs/{name}/logs?backend=local&follow=1&tail=5"
        req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: {token}\r\n"
               "Accept: text/event-stream\r\n\r\n").encode()  # fmt: skip

        async def stream(i: int) -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writers.append(writer)
            writer.write(req)
            await writer.drain()
            while chunk := await reader.read(65536):
                counts[i] += chunk.count(b"data: ")
                if counts[i]:
                    started[i].set()

        tasks = [asyncio.ensure_future(stream(i)) for i in range(50)]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 90)
        lists_done: list[int] = []

        async def job_list() -> None:
            r = await http.fetch(f"{base}{API}/jobs?backend=local", headers=auth,
                                 raise_error=False, request_timeout=120)  # fmt: skip
            lists_done.append(r.code)

        before = sum(counts)
        lists = [asyncio.ensure_future(job_list()) for _ in range(50)]
        lat = []
        for _ in range(60):
            t0 = time.perf_counter()
            r = await http.fetch(f"{base}{API}/backends", headers=auth, request_timeout=30)
            lat.append(time.perf_counter() - t0)
            assert r.code == 200
            await asyncio.sleep(0.02)
        await asyncio.gather(*lists)
        delivered = sum(counts) - before
        for w in writers:
            w.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        http.close()
        return {"lat": lat, "lists": lists_done, "delivered": delivered}

    try:
        out = jp_asyncio_loop.run_until_complete(scenario())
    finally:
        client.delete_job(name)
    lat = sorted(out["lat"])
    p95 = lat[int(0.95 * (len(lat) - 1))]
    assert out["lists"] == [200] * 50
    assert out["delivered"] > 0, "the streams stalled"
    assert p95 < 1.0, f"p95 {p95:.3f} s"
    record_property("backends_p95_ms", round(p95 * 1000, 1))
    record_property("backends_median_ms", round(statistics.median(lat) * 1000, 1))
    record_property("log_events_delivered_meanwhile", out["delivered"])
    assert json.dumps(out["lists"])  # every list request answered
