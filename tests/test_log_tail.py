"""Reading the end of a local log: the last N lines exactly, and following on from there.

`tail_lines_of` and the follower's tail are checked against a naive reference (the whole file
split in memory) with hypothesis, at block sizes small enough that lines straddle blocks; a
writer thread that appends lines in pieces while the follower starts checks that following
with a tail delivers every later line exactly once and whole. Timings are in
bench/bench_log_tail.py, not here.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kf_jupyter.backends.local import logs

# Bytes that matter to a line splitter, plus some that do not.
_BYTES = st.lists(
    st.sampled_from([b"\n", b"\r", b"a", b"bc", b"\xff", "é".encode(), b"\r\n", b"x" * 40]),
    max_size=60,
).map(b"".join)


def naive_tail(data: bytes, n: int) -> list[str]:
    """The last n lines of `data`, from the whole content in memory (the reference)."""
    if n <= 0:
        return []
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [logs._decode(x) for x in lines[-n:]]


def complete_lines(data: bytes) -> list[str]:
    """Every newline-terminated line of `data`."""
    return [logs._decode(x) for x in data.split(b"\n")[:-1]]


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of a few bytes, so tails cross many block boundaries."""
    monkeypatch.setattr(logs, "BLOCK", 5)


@pytest.mark.reliability(scenario="tail of a log equals the naive last N lines", area="local")
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=_BYTES, n=st.integers(0, 12))
def test_tail_equals_the_naive_reference(
    data: bytes, n: int, tmp_path: Path, small_blocks: None
) -> None:
    path = tmp_path / "rank-0.log"
    path.write_bytes(data)
    assert logs.tail_lines_of(str(path), n) == naive_tail(data, n)


@pytest.mark.reliability(
    scenario="follow with tail: last N whole lines, then the rest once", area="local"
)
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=_BYTES, after=_BYTES, n=st.integers(0, 12))
def test_follow_tail_then_the_rest_exactly_once_and_whole(
    before: bytes, after: bytes, n: int, tmp_path: Path, small_blocks: None
) -> None:
    """Tail taken while a line is half-written, then the writer goes on: no loss, no split."""
    path = tmp_path / "rank-0.log"
    path.write_bytes(before)
    cur = logs._Cursor(str(path))
    try:
        got = cur.tail(n)
        with open(path, "ab") as fh:
            fh.write(after)
        got += cur.read_lines()
        got += cur.read_lines(final=True)
    finally:
        cur.close()
    whole = before + after
    done = complete_lines(before)
    expected = done[-n:] if n else []
    rest = whole[sum(len(x) + 1 for x in before.split(b"\n")[:-1]) :]
    expected += naive_tail(rest, 10**9)
    assert got == expected


def test_very_long_lines_and_lines_without_newline(tmp_path: Path) -> None:
    """A progress bar redrawn with \\r into one 3 MiB line, read in 1 MiB chunks, stays whole."""
    bar = b"".join(b"\r%6d%%" % i for i in range(400_000))  # ~2.8 MB, no newline
    path = tmp_path / "rank-0.log"
    path.write_bytes(b"start\n" + bar + b"\nend\n" + bar)
    assert logs.tail_lines_of(str(path), 2) == ["end", logs._decode(bar)]
    assert logs.tail_lines_of(str(path), 3)[0] == logs._decode(bar)
    cur = logs._Cursor(str(path))
    try:
        assert cur.read_lines() == ["start", logs._decode(bar), "end"]
        assert cur.read_lines(final=True) == [logs._decode(bar)]
    finally:
        cur.close()
    records = list(logs.iter_records(str(tmp_path), follow=True, tail_lines=1))
    assert [r.line for r in records] == ["end", logs._decode(bar)]


_LINE = re.compile(r"line (\d+) (x+)\Z")


def _writer(path: Path, total: int, started: threading.Event, done: threading.Event) -> None:
    """Appends `total` numbered lines, each in two writes (a half line is on disk in between)."""
    with open(path, "ab", buffering=0) as fh:
        for i in range(total):
            line = f"line {i} {'x' * (20 + i % 50)}\n".encode()
            half = len(line) // 2
            fh.write(line[:half])
            if i == 200:
                started.set()
            fh.write(line[half:])
            if i % 64 == 0:
                time.sleep(0.0005)  # let the reader in now and then
    done.set()


@pytest.mark.reliability(
    scenario="follow with tail while a writer appends: every line once, whole",
    area="local",
    tries=40,
)
def test_follow_with_tail_while_a_writer_appends(tmp_path: Path) -> None:
    failures = []
    for run in range(40):
        log_dir = tmp_path / f"run-{run}"
        log_dir.mkdir()
        path = log_dir / "rank-0.log"
        path.write_bytes(b"")
        started, done = threading.Event(), threading.Event()
        total = 3000
        w = threading.Thread(target=_writer, args=(path, total, started, done), daemon=True)
        w.start()
        assert started.wait(60), f"run {run}: the writer never got to line 200"
        records = list(
            logs.iter_records(str(log_dir), follow=True, tail_lines=50, is_done=done.is_set)
        )
        w.join(60)
        numbers = []
        for rec in records:
            m = _LINE.match(rec.line)
            if m is None or len(m.group(2)) != 20 + int(m.group(1)) % 50:
                failures.append(f"run {run}: split or broken line {rec.line!r}")
                break
            numbers.append(int(m.group(1)))
        else:
            if not numbers or numbers != list(range(numbers[0], total)):
                gaps = [b for a, b in itertools.pairwise(numbers) if b != a + 1]
                failures.append(
                    f"run {run}: lines not each exactly once from {numbers[:1]} to {total - 1} "
                    f"(first jumps at {gaps[:5]})"
                )
            elif len(numbers) < 50:
                failures.append(f"run {run}: only {len(numbers)} lines, the tail asked for 50")
    assert not failures, "\n".join(failures)


def test_stop_ends_a_silent_follow_at_once(tmp_path: Path) -> None:
    """A consumer on another thread sets `stop`: the generator ends though no line comes."""
    (tmp_path / "rank-0.log").write_bytes(b"one\n")
    stop = threading.Event()
    got: list[str] = []
    ended = threading.Event()

    def consume() -> None:
        for rec in logs.iter_records(str(tmp_path), follow=True, is_done=lambda: False, stop=stop):
            got.append(rec.line)
        ended.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == ["one"], "the follower never delivered the first line"
    assert not ended.is_set()
    stop.set()
    assert ended.wait(30), "a silent follow did not end after stop was set"
    assert os.path.exists(tmp_path / "rank-0.log")
