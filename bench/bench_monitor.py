"""Job monitor cost, side by side with a naive `Output.append_stdout` per line.

In one process, with the widgets' comm replaced by one that counts what would be sent to the
frontend (messages and JSON bytes of each message), it feeds:

1. the same stream (4 ranks, paced at 10,000 lines/s) to JobMonitor and to a naive Output widget
   that calls append_stdout once per line (the naive one on a shorter prefix: its cost grows with
   the square of the line count);
2. 1,000,000 lines through JobMonitor as fast as they come, sampling the process RSS, to show
   memory stays flat.

Targets: monitor bytes ≤ 2 × raw log bytes, ≤ 10 messages/s per monitor, flat memory.

    .venv/bin/python bench/bench_monitor.py [--lines 1000000] [--rate 10000]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Iterator

import comm
import psutil

from kf_jupyter.types import LogRecord, TrainJob


class CountingComm(comm.base_comm.BaseComm):
    """Counts comm messages and their JSON bytes instead of sending them."""

    messages = 0
    nbytes = 0

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        CountingComm.messages += 1
        CountingComm.nbytes += len(json.dumps(data or {}, default=str))
        CountingComm.nbytes += sum(len(b) for b in buffers or [])


def reset() -> None:
    """Zero the counters."""
    CountingComm.messages = 0
    CountingComm.nbytes = 0


class FakeClient:
    """The monitor only calls get_job (status polls are off here) and delete_job."""

    backend_name = "local"

    def get_job(self, name: str) -> TrainJob:
        return TrainJob(name=name, status="Running", backend="local")


def stream(n: int, rate: float | None, ranks: int = 4, probe=None) -> Iterator[LogRecord]:
    """n lines from `ranks` ranks, paced at `rate` lines/s (None: as fast as possible)."""
    start = time.monotonic()
    for i in range(n):
        if rate and i % 200 == 0:
            ahead = i / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        if probe and i % 100_000 == 0:
            probe(i)
        yield LogRecord(f"rank-{i % ranks}", f"epoch 3 step {i} loss {1 / (i + 1):.6f} lr 0.001")


def raw_bytes(n: int) -> int:
    """Bytes of the log as written to disk (one line each, newline included)."""
    return sum(len(r.line) + len(f"[{r.source}] ") + 1 for r in stream(n, None))


def run_monitor(n: int, rate: float | None, probe=None) -> dict[str, float]:
    """Feed n lines to a JobMonitor; return its message figures."""
    from kf_jupyter.widgets.monitor import JobMonitor

    reset()
    mon = JobMonitor(FakeClient(), "bench", records=stream(n, rate, probe=probe), poll_status=False)
    setup = CountingComm.messages
    reset()
    t0 = time.monotonic()
    mon.start()
    mon.join()
    elapsed = time.monotonic() - t0
    return {
        "lines": mon.state.lines,
        "seconds": elapsed,
        "messages": CountingComm.messages,
        "bytes": CountingComm.nbytes,
        "setup_messages": setup,
    }


def run_naive(n: int, rate: float | None) -> dict[str, float]:
    """Feed n lines to an Output widget, append_stdout per line."""
    import ipywidgets as w

    reset()
    out = w.Output()
    reset()
    t0 = time.monotonic()
    for rec in stream(n, rate):
        out.append_stdout(f"[{rec.source}] {rec.line}\n")
    elapsed = time.monotonic() - t0
    return {
        "lines": n,
        "seconds": elapsed,
        "messages": CountingComm.messages,
        "bytes": CountingComm.nbytes,
    }


def main() -> None:
    """Run both parts and print the figures."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=10_000)
    ap.add_argument("--paced-lines", type=int, default=30_000)
    ap.add_argument("--naive-lines", type=int, default=2_000)
    a = ap.parse_args()
    comm.create_comm = lambda *args, **kw: CountingComm(*args, **kw)

    print(f"== side by side: 4 ranks at {a.rate:,.0f} lines/s ==")
    raw_naive = raw_bytes(a.naive_lines)
    naive = run_naive(a.naive_lines, a.rate)
    raw_m = raw_bytes(a.paced_lines)
    mon = run_monitor(a.paced_lines, a.rate)
    for label, r, raw in (
        ("naive Output.append_stdout", naive, raw_naive),
        ("JobMonitor", mon, raw_m),
    ):
        print(
            f"{label:28s} lines {r['lines']:>8,}  {r['seconds']:6.2f} s  "
            f"messages {r['messages']:>7,} ({r['messages'] / r['seconds']:8.1f}/s)  "
            f"bytes {r['bytes']:>13,}  raw {raw:>11,}  ratio {r['bytes'] / raw:9.3f}x"
        )
    ratio_gain = (naive["bytes"] / raw_naive) / (mon["bytes"] / raw_m)
    print(f"bytes per raw byte: naive / monitor = {ratio_gain:,.0f}x")

    print(f"\n== memory: {a.lines:,} lines through JobMonitor (unpaced) ==")
    proc = psutil.Process()
    samples: list[tuple[int, float]] = []

    def probe(i: int) -> None:
        gc.collect()
        samples.append((i, proc.memory_info().rss / 2**20))

    big = run_monitor(a.lines, None, probe=probe)
    probe(a.lines)
    print("RSS MiB at lines: " + ", ".join(f"{i:,}: {m:.1f}" for i, m in samples))
    growth = samples[-1][1] - samples[1][1] if len(samples) > 2 else 0.0
    print(
        f"{big['lines']:,} lines in {big['seconds']:.1f} s ({big['lines'] / big['seconds']:,.0f} "
        f"lines/s); messages {big['messages']:,} ({big['messages'] / big['seconds']:.1f}/s); "
        f"RSS growth after the first 100,000 lines: {growth:+.1f} MiB"
    )
    mps = mon["messages"] / mon["seconds"]
    ok = (
        mon["bytes"] <= 2 * raw_m
        and mps <= 10
        and growth < 20
        and big["messages"] / big["seconds"] <= 10
    )
    print(
        "RESULT:",
        "PASS" if ok else "FAIL",
        f"(bytes ratio {mon['bytes'] / raw_m:.3f} <= 2, {mps:.1f} msg/s <= 10, "
        f"memory growth {growth:+.1f} MiB)",
    )


if __name__ == "__main__":
    main()
