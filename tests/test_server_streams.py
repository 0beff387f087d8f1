"""Log streams of the server extension cannot leak: a real Jupyter server, a real silent job.

Hundreds of open-read-close cycles of `jobs/<name>/logs?follow=1` against a job that prints
nothing leave no pump thread, no file descriptor and no slot behind (counted with psutil in this
process, where pytest-jupyter runs the server); a slot is free the moment its client goes away;
over the limit is a 503 that says what to do.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (fixtures, scoped to this module)

from kf_jupyter import MPITrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.client import TrainerClient

API = "kf-jupyter/api"
PUMP = "kf-jupyter-logs"


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
    # a long keepalive: the old slot release waited for it, the new one must not
    return {
        "ServerApp": {"jpserver_extensions": {"kf_jupyter": True}},
        "KFJupyterServer": {"state_dir": str(state_dir), "keepalive_seconds": 30.0},
    }


@pytest.fixture(autouse=True)
def _no_kubeconfig(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@pytest.fixture
def silent_job(state_dir: Path) -> Any:
    """A running local job that has printed its one line."""
    client = TrainerClient(LocalBackendConfig(state_dir=state_dir))
    name = client.train(MPITrainer(func=silent, num_proc_per_node=1))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if any(r.line == "started" for r in client.iter_log_records(name)):
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"job {name} did not print 'started' within 180 s")
    yield name
    client.delete_job(name)


class Streams:
    """Raw HTTP/1.1 log streams against the test server (one connection each)."""

    def __init__(self, port: int, base_url: str, token: str, name: str) -> None:
        self.port = port
        path = f"{base_url}{API}/jobs/{name}/logs?backend=local&follow=1&tail=5"
        self.request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: token {token}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()

    async def open(self) -> tuple[bytes, asyncio.StreamWriter]:
        """Open a stream; (what arrived up to the first event or the error body, writer)."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(self.request)
        await writer.drain()
        got = b""
        while b"data: " not in got and b'"kind"' not in got:
            chunk = await asyncio.wait_for(reader.read(65536), 60)
            if not chunk:
                break
            got += chunk
        return got, writer

    async def cycle(self) -> bytes:
        """Open, read the first event, close."""
        got, writer = await self.open()
        writer.close()
        await writer.wait_closed()
        return got


def _status(head: bytes) -> int:
    return int(head.split(b" ", 2)[1])


def _pumps() -> int:
    return sum(1 for t in threading.enumerate() if t.name == PUMP)


def _wait(loop: Any, what: str, cond: Any, seconds: float = 60.0) -> None:
    """Run the server's loop until `cond()` holds; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"after {seconds:.0f} s still not true: {what}")
        loop.run_until_complete(asyncio.sleep(0.05))


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="300 open-read-close cycles of a silent job's log stream: threads, fds and slots "
    "back to baseline",
    area="server",
    tries=300,
)
def test_open_read_close_cycles_leave_nothing_behind(
    jp_serverapp: Any,
    jp_base_url: str,
    http_server_port: Any,
    http_server_client: Any,  # starts the server listening on http_server_port
    jp_asyncio_loop: Any,
    silent_job: str,
    record_property: Any,
) -> None:
    state = jp_serverapp.web_app.settings["kf_jupyter"]
    streams = Streams(
        http_server_port[-1], jp_base_url, jp_serverapp.identity_provider.token, silent_job
    )
    proc = psutil.Process()
    # warm up: the worker pool and the server's own threads start lazily
    for _ in range(10):
        assert b'"line": "started"' in jp_asyncio_loop.run_until_complete(streams.cycle())
    _wait(jp_asyncio_loop, "warm-up pumps ended", lambda: _pumps() == 0)
    threads0, fds0 = proc.num_threads(), proc.num_fds()
    for i in range(300):
        got = jp_asyncio_loop.run_until_complete(streams.cycle())
        assert b'"line": "started"' in got, f"cycle {i}: no first event, got {got[:300]!r}"
    _wait(jp_asyncio_loop, "every log-stream slot released", lambda: state.open_streams == 0)
    _wait(jp_asyncio_loop, f"no {PUMP} thread left (have {_pumps()})", lambda: _pumps() == 0)
    _wait(
        jp_asyncio_loop,
        f"threads back to baseline {threads0} + 4 (now {proc.num_threads()})",
        lambda: proc.num_threads() <= threads0 + 4,
    )
    _wait(
        jp_asyncio_loop,
        f"fds back to baseline {fds0} + 8 (now {proc.num_fds()})",
        lambda: proc.num_fds() <= fds0 + 8,
    )
    record_property("threads_after_minus_before", proc.num_threads() - threads0)
    record_property("fds_after_minus_before", proc.num_fds() - fds0)


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="log-stream limit: a closed stream's slot is free at once; over the limit is 503 "
    "with what to do",
    area="server",
)
def test_slots_free_at_once_and_over_limit_is_503(
    jp_serverapp: Any,
    jp_base_url: str,
    http_server_port: Any,
    http_server_client: Any,
    jp_asyncio_loop: Any,
    silent_job: str,
) -> None:
    state = jp_serverapp.web_app.settings["kf_jupyter"]
    state.max_log_streams = 2
    streams = Streams(
        http_server_port[-1], jp_base_url, jp_serverapp.identity_provider.token, silent_job
    )

    async def scenario() -> tuple[list[int], bytes]:
        codes = []
        # rapid reconnects with nothing left open: never refused (the keepalive is 30 s)
        for _ in range(20):
            codes.append(_status(await streams.cycle()))
        held = [await streams.open() for _ in range(2)]
        over, writer = await streams.open()
        writer.close()
        for _, w in held:
            w.close()
        return codes, over

    codes, over = jp_asyncio_loop.run_until_complete(scenario())
    assert codes == [200] * 20, codes
    assert _status(over) == 503, over[:500]
    body = json.loads(over.split(b"\r\n\r\n", 1)[1])
    assert body["kind"] == "TooManyStreamsError"
    assert "max_log_streams" in body["error"] and "Close" in body["error"]
    _wait(jp_asyncio_loop, "both held slots released", lambda: state.open_streams == 0)
