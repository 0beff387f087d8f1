"""Latency of a trivial kf-jupyter route with 0 and then 50 open log streams, side by side.

Starts a real Jupyter server (subprocess) with the extension on a temp job store, starts one
real local job that prints 20 lines a second, measures `GET backends` and
`GET jobs/<name>` round trips with no stream open, then again with N follow streams (SSE) open on that job, and
prints median / p95 latency, the ratio, events received and the server's threads and RSS.

    .venv/bin/python bench/bench_server.py [--streams 50] [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kf_jupyter.backends.local.ports import free_port


def ticker(n: int = 1200, delay: float = 0.05) -> None:
    """Prints a numbered line every `delay` seconds."""
    import time

    for i in range(n):
        print(f"tick {i}", flush=True)
        time.sleep(delay)


def proc_status(pid: int) -> tuple[int, float]:
    """(threads, RSS MiB) of a process."""
    threads, rss = 0, 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            threads = int(line.split()[1])
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    return threads, rss


async def latencies(client, url: str, headers: dict[str, str], n: int) -> list[float]:
    """Round-trip times (ms) of n sequential GETs."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        resp = await client.fetch(url, headers=headers)
        out.append((time.perf_counter() - t0) * 1000)
        assert resp.code == 200
    return out


def summary(xs: list[float]) -> str:
    """median / p95 / max in ms."""
    q = statistics.quantiles(xs, n=20)
    return f"median {statistics.median(xs):6.2f} ms  p95 {q[18]:6.2f} ms  max {max(xs):6.2f} ms"


async def run(base: str, token: str, job: str, streams: int, requests: int, pid: int) -> None:
    """The measurement."""
    from tornado.httpclient import AsyncHTTPClient

    client = AsyncHTTPClient(force_instance=True, max_clients=streams + 10)
    headers = {"Authorization": f"token {token}"}
    routes = {
        "GET backends (event loop only)": f"{base}kf-jupyter/api/backends",
        "GET jobs/<name> (worker thread, disk)": f"{base}kf-jupyter/api/jobs/{job}?backend=local",
    }
    idle = {}
    for label, route in routes.items():
        await latencies(client, route, headers, 20)  # warm up
        idle[label] = await latencies(client, route, headers, requests)
    th0, rss0 = proc_status(pid)

    counts = [0] * streams
    started = [asyncio.Event() for _ in range(streams)]
    host, port = base.split("//", 1)[1].rstrip("/").split(":")
    path = f"/kf-jupyter/api/jobs/{job}/logs?backend=local&follow=1&tail=10"
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: token {token}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()
    writers: list[asyncio.StreamWriter] = []

    async def stream(i: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        writers.append(writer)
        writer.write(request)
        await writer.drain()
        while chunk := await reader.read(65536):
            counts[i] += chunk.count(b"data: ")
            if counts[i]:
                started[i].set()

    tasks = [asyncio.ensure_future(stream(i)) for i in range(streams)]
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 60)
    before = sum(counts)
    t0 = time.perf_counter()
    busy = {}
    for label, route in routes.items():
        busy[label] = await latencies(client, route, headers, requests)
    elapsed = time.perf_counter() - t0
    during = sum(counts) - before
    th1, rss1 = proc_status(pid)
    for w in writers:  # the clients go away: close every stream's socket
        w.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    client.close()
    await asyncio.sleep(3)
    th2, rss2 = proc_status(pid)

    for label in routes:
        print(f"{label}, {requests} sequential requests")
        print(f"  0 streams open : {summary(idle[label])}")
        print(f"  {streams} streams open: {summary(busy[label])}")
        ratio = statistics.median(busy[label]) / statistics.median(idle[label])
        print(f"  ratio of medians ({streams} streams / 0): {ratio:.2f}")
    print(
        f"  log events delivered to the {streams} streams meanwhile: {during} "
        f"in {elapsed:.1f} s ({during / elapsed:.0f}/s)"
    )
    print(
        f"  server threads / RSS: idle {th0} / {rss0:.0f} MiB; with streams {th1} / "
        f"{rss1:.0f} MiB; 3 s after the clients left {th2} / {rss2:.0f} MiB"
    )


def main() -> None:
    """Start the server and a job, measure, clean up."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()

    from kf_jupyter import MPITrainer, TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig

    tmp = Path(tempfile.mkdtemp(prefix="kf-bench-server-"))
    state, conf = tmp / "state", tmp / "config"
    conf.mkdir()
    (conf / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"kf_jupyter": True}}})
    )
    port, token = free_port(), secrets.token_hex(16)
    env = dict(os.environ, KF_JUPYTER_STATE_DIR=str(state), JUPYTER_CONFIG_DIR=str(conf))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "server",
            "--no-browser",
            f"--port={port}",
            f"--ServerApp.token={token}",
            "--ServerApp.allow_root=True",
            f"--ServerApp.root_dir={tmp}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = TrainerClient(LocalBackendConfig(state_dir=state))
    job = None
    try:
        base = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("jupyter server did not start") from None
                time.sleep(0.2)
        job = client.train(MPITrainer(func=ticker, num_proc_per_node=1))
        asyncio.run(run(base, token, job, args.streams, args.requests, server.pid))
    finally:
        if job:
            client.delete_job(job)
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
