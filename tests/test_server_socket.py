"""The one WebSocket per page (`kf-jupyter/api/stream`) that carries every monitor's and panel's
updates (issue 20: six held HTTP/1.1 log streams froze JupyterLab). A real Jupyter server and real
local jobs: many subscriptions over one socket each get their job's log and record, closing a
subscription (or the socket) frees its log-stream slot at once, bad messages get an error and
leave the socket open, and the socket refuses a client without the token or from another origin.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import tornado.httpclient
import tornado.websocket
from pytest_jupyter.jupyter_server import *  # noqa: F403  (fixtures, scoped to this module)

from kf_jupyter import MPITrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.client import TrainerClient

pytestmark = pytest.mark.slow


def chatty() -> None:
    """Prints 40 lines in 2 s, then ends."""
    import time

    for i in range(40):
        print(f"line {i}", flush=True)
        time.sleep(0.05)


def silent() -> None:
    """Prints one line, then nothing for a long time (the test deletes the job)."""
    import time

    print("started", flush=True)
    time.sleep(600)


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kf-state")


@pytest.fixture
def jp_server_config(state_dir: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"kf_jupyter": True}},
        "KFJupyterServer": {"state_dir": str(state_dir)},
    }


@pytest.fixture(autouse=True)
def _no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def _started(client: TrainerClient, name: str, line: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if any(line in r.line for r in client.iter_log_records(name)):
            return
        time.sleep(0.1)
    raise AssertionError(f"job {name} did not print {line!r} within 180 s")


@pytest.fixture
def jobs(state_dir: Path) -> Any:
    """Two local jobs: one silent and running, one that prints 40 lines and ends."""
    client = TrainerClient(LocalBackendConfig(state_dir=state_dir))
    quiet = client.train(MPITrainer(func=silent, num_proc_per_node=1))
    loud = client.train(MPITrainer(func=chatty, num_proc_per_node=1))
    _started(client, quiet, "started")
    yield quiet, loud
    for name in (quiet, loud):
        client.delete_job(name)


async def _until(ws: Any, cond: Any, seconds: float = 120.0) -> list[dict]:
    """Read messages until `cond(messages)` holds; all messages read."""
    got: list[dict] = []
    deadline = time.monotonic() + seconds
    while not cond(got):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"not within {seconds} s; got {got[-10:]}")
        msg = await asyncio.wait_for(ws.read_message(), left)
        assert msg is not None, f"socket closed; got {got[-10:]}"
        got.append(json.loads(msg))
    return got


def _of(got: list[dict], sid: str, kind: str) -> list[dict]:
    return [m for m in got if m["id"] == sid and m["type"] == kind]


@pytest.mark.reliability(
    scenario="13 log and 2 status subscriptions over one WebSocket: each gets its own job's "
    "lines; closing one (or the socket) frees its log slot at once; bad messages answer an "
    "error and leave the socket open",
    area="server",
)
def test_every_subscription_shares_one_socket_and_frees_its_slot(
    jp_serverapp: Any, jp_ws_fetch: Any, jp_asyncio_loop: Any, jobs: tuple[str, str]
) -> None:
    quiet, loud = jobs
    state = jp_serverapp.web_app.settings["kf_jupyter"]

    async def scenario() -> None:
        ws = await jp_ws_fetch("kf-jupyter", "api", "stream")
        # twelve monitors of the silent job and one of the chatty one, plus their records
        for i in range(12):
            ws.write_message(json.dumps({"op": "logs", "id": f"q{i}", "job": quiet, "tail": 5}))
        ws.write_message(json.dumps({"op": "logs", "id": "loud", "job": loud, "tail": 1000}))
        ws.write_message(json.dumps({"op": "job", "id": "j", "job": loud, "interval": 250}))
        got = await _until(
            ws,
            lambda g: (
                all(
                    any(
                        r["line"] == "started"
                        for m in _of(g, f"q{i}", "records")
                        for r in m["records"]
                    )
                    for i in range(12)
                )
                and _of(g, "loud", "end")
                and any(m["job"]["status"] == "Complete" for m in _of(g, "j", "job"))
            ),
        )
        # An MPI job on deepspeed-distributed runs two ranks (launcher as node plus one node
        # pod, as a cluster does): every rank's 40 lines, each rank's in order.
        by_source: dict[str, list[str]] = {}
        for m in _of(got, "loud", "records"):
            for r in m["records"]:
                if r["line"].startswith("line "):
                    by_source.setdefault(r["source"], []).append(r["line"])
        assert len(by_source) == 2, by_source.keys()
        for lines in by_source.values():
            assert lines == [f"line {i}" for i in range(40)]
        assert _of(got, "loud", "end")[0]["status"] == "Complete"
        assert state.open_streams == 12  # the ended log's slot is back
        # closing one subscription frees its slot at once; the others go on
        ws.write_message(json.dumps({"op": "close", "id": "q0"}))
        for _ in range(100):
            if state.open_streams == 11:
                break
            await asyncio.sleep(0.05)
        assert state.open_streams == 11
        # bad messages: an error naming what is wrong, and the socket stays open
        ws.write_message("not json")
        ws.write_message(json.dumps({"op": "logs", "id": "bad", "job": "../etc"}))
        ws.write_message(json.dumps({"op": "logs", "id": "gone", "job": "no-such-job"}))
        got = await _until(ws, lambda g: len([m for m in g if m["type"] == "error"]) >= 3)
        errors = {m["id"]: m for m in got if m["type"] == "error"}
        assert errors[""]["status"] == 400 and "JSON" in errors[""]["error"]
        assert errors["bad"]["status"] == 400
        assert errors["gone"]["status"] == 404
        ws.write_message(json.dumps({"op": "job", "id": "again", "job": quiet}))
        got = await _until(ws, lambda g: _of(g, "again", "job"))
        assert _of(got, "again", "job")[0]["job"]["status"] == "Running"
        # the page goes away: every slot is free at once
        ws.close()
        for _ in range(100):
            if state.open_streams == 0:
                break
            await asyncio.sleep(0.05)
        assert state.open_streams == 0

    jp_asyncio_loop.run_until_complete(scenario())


@pytest.mark.reliability(
    scenario="update WebSocket: refused without the token, with a wrong one, and from another "
    "site's page riding on the login cookie",
    area="server",
)
def test_socket_refuses_without_token_and_from_another_origin(
    jp_serverapp: Any,
    jp_ws_fetch: Any,
    jp_http_port: int,
    jp_base_url: str,
    http_server_client: Any,
    jp_asyncio_loop: Any,
) -> None:
    url = f"ws://localhost:{jp_http_port}{jp_base_url}kf-jupyter/api/stream"
    token = jp_serverapp.identity_provider.token

    async def code(headers: dict[str, str]) -> int:
        req = tornado.httpclient.HTTPRequest(url, headers=headers)
        try:
            ws = await tornado.websocket.websocket_connect(req)
        except tornado.httpclient.HTTPClientError as exc:
            return exc.code
        ws.close()
        return 101

    async def login_cookie() -> str:
        http = tornado.httpclient.AsyncHTTPClient()
        resp = await http.fetch(
            f"http://localhost:{jp_http_port}{jp_base_url}api/status?token={token}"
        )
        return "; ".join(c.split(";")[0] for c in resp.headers.get_list("Set-Cookie"))

    run = jp_asyncio_loop.run_until_complete
    assert run(code({})) == 403
    assert run(code({"Authorization": "token wrong"})) == 403
    cookie = run(login_cookie())
    host = f"http://localhost:{jp_http_port}"
    # a page of another site cannot ride on the browser's login cookie
    assert run(code({"Cookie": cookie, "Origin": "http://evil.example"})) == 403
    assert run(code({"Cookie": cookie, "Origin": host})) == 101
    assert run(code({"Authorization": f"token {token}"})) == 101
