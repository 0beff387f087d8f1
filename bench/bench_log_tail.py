"""Cost of reading the end of a local log: the previous implementation and the current one.

Writes tqdm-style logs (a progress bar redrawn with `\\r` thousands of times per line, a newline
per epoch, so few but very long lines) of the given sizes and times, for each:

- `tail`: the last 100 lines (`tail_lines_of`, what `jobs/<name>/logs?tail=` reads first);
- `tail 10 short`: the last 10 lines of a log of short lines the same size;
- `follow`: reading the file from the start with the follower's cursor (the partial-line join
  of lines longer than the 1 MiB read chunk), for the tqdm log and for one that is a single
  unterminated bar of the whole size.

Both implementations run on the same files; the old one is kept here, verbatim in behaviour
(it prepended each block to a growing bytes object and recounted the newlines, and joined the
partial line to each chunk). Peak traced memory is shown for the current one.

    .venv/bin/python bench/bench_log_tail.py [--sizes 4,32,48] [--skip-old-above 48]
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from kf_jupyter.backends.local import logs

MIB = 1 << 20


def old_tail_lines_of(path: str, n: int) -> list[str]:
    """The tail before issue 13 (quadratic in the bytes read)."""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        pos = fh.tell()
        data = b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(65536, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [logs._decode(x) for x in lines[-n:]]


def old_follow(path: str) -> int:
    """The cursor before issue 13: the partial line re-joined to every chunk."""
    n = 0
    partial = b""
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(logs.CHUNK)
            if not chunk:
                break
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            n += len(lines)
    return n + (1 if partial else 0)


def new_follow(path: str) -> int:
    """The current cursor, reading the whole file."""
    cur = logs._Cursor(path)
    try:
        n = 0
        while True:
            got = cur.read_lines()
            if not got:
                break
            n += len(got)
        return n + len(cur.read_lines(final=True))
    finally:
        cur.close()


def write_tqdm_log(path: str, size: int) -> None:
    """A log of `size` bytes: epochs of a bar redrawn with \\r, one newline each (~4 MiB)."""
    bar = b"".join(b"\r%7d/1000000 [%s]" % (i, b"#" * (i % 40)) for i in range(80_000))
    with open(path, "wb") as fh:
        written = 0
        epoch = 0
        while written < size:
            line = b"epoch %d " % epoch + bar[: size - written] + b"\n"
            fh.write(line)
            written += len(line)
            epoch += 1


def write_short_log(path: str, size: int) -> None:
    """A log of `size` bytes of 80-byte lines."""
    line = b"step 000000 loss 0.123456 " + b"." * 53 + b"\n"
    with open(path, "wb") as fh:
        fh.write(line * (size // len(line)))


def write_one_line_log(path: str, size: int) -> None:
    """A log of `size` bytes that is one bar never ended by a newline (a job still running)."""
    step = b"\r 42%|####      | 420/1000 [00:42<00:58, 10.0it/s]"
    with open(path, "wb") as fh:
        fh.write(step * (size // len(step)))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds and result of one call."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def peak_mib(fn: Callable[[], Any]) -> float:
    """Peak traced Python memory of one call, MiB."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / MIB
    finally:
        tracemalloc.stop()


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,32,48", help="log sizes in MiB, comma-separated")
    ap.add_argument(
        "--skip-old-above", type=int, default=48, help="do not time the old code above this MiB"
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'case':<16}{'MiB':>5}{'old s':>10}{'new s':>10}{'speed-up':>10}{'new peak MiB':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            tqdm = os.path.join(tmp, f"tqdm-{size}.log")
            short = os.path.join(tmp, f"short-{size}.log")
            write_tqdm_log(tqdm, size * MIB)
            write_short_log(short, size * MIB)
            one = os.path.join(tmp, f"one-{size}.log")
            write_one_line_log(one, size * MIB)
            cases: list[tuple[str, Callable[..., Any], Callable[..., Any], tuple[Any, ...]]] = [
                ("tail 100 tqdm", old_tail_lines_of, logs.tail_lines_of, (tqdm, 100)),
                ("tail 10 short", old_tail_lines_of, logs.tail_lines_of, (short, 10)),
                ("follow tqdm", old_follow, new_follow, (tqdm,)),
                ("follow 1 line", old_follow, new_follow, (one,)),
            ]
            for label, old_fn, new_fn, fn_args in cases:
                old = functools.partial(old_fn, *fn_args)
                new = functools.partial(new_fn, *fn_args)
                t_new, r_new = timed(new)
                if size <= args.skip_old_above:
                    t_old, r_old = timed(old)
                    assert r_old == r_new, f"{label} {size} MiB: old and new disagree"
                    old_s, ratio = f"{t_old:.3f}", f"{t_old / max(t_new, 1e-9):.0f}x"
                else:
                    old_s, ratio = "-", "-"
                peak = peak_mib(new)
                print(f"{label:<16}{size:>5}{old_s:>10}{t_new:>10.3f}{ratio:>10}{peak:>14.1f}")


if __name__ == "__main__":
    main()
