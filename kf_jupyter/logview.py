"""Log lines as a person reads them (pure): protocol lines hidden, banners folded, `\r` bars.

`iter_log_records` stays raw (the monitor, the server and the lab panel read progress, metrics,
results and errors from it). Every user-facing text view passes lines through here:

- kf-jupyter's own lines (`##kf-jupyter:report ...`, `result`, `error`) are hidden;
- torchrun's `OMP_NUM_THREADS` banner (four lines per torchrun) is folded away;
- a carriage-return progress bar (tqdm writing `\r` and no newline to a file) is one line: what a
  terminal would show. A record whose line starts with `\r` is an update of the line still being
  written (the local backend emits these while following); it replaces that source's previous
  update, and the completed line replaces it in turn.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator

from .constants import PROTOCOL_PREFIX
from .types import LogRecord

#: The prefix of a record that updates the line a source is still writing (a progress bar).
UPDATE = "\r"

_OMP_BANNER = re.compile(
    r"^[WI]\d{4} [\d:.]+ +\d+ \S*torch/distributed/run\.py:\d+\] "
    r"(\**|Setting OMP_NUM_THREADS environment variable .*)\s*$"
)


def is_protocol(line: str) -> bool:
    """A line kf-jupyter's runner printed for kf-jupyter (report, result, error)."""
    return PROTOCOL_PREFIX in line


def is_banner(line: str) -> bool:
    """A line of torchrun's `Setting OMP_NUM_THREADS ... to be 1` banner."""
    return "torch/distributed/run.py" in line and bool(_OMP_BANNER.match(line))


def collapse_cr(line: str) -> str:
    """What a terminal shows for a line with carriage returns: its last non-empty segment."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""


def is_update(line: str) -> bool:
    """The record updates a line still being written (see the module docstring)."""
    return line.startswith(UPDATE)


def shown(line: str) -> bool:
    """The line belongs in a text view (not protocol, not the banner, not an update)."""
    return not (is_update(line) or is_protocol(line) or is_banner(line))


def readable(records: Iterable[LogRecord]) -> Iterator[LogRecord]:
    """The records a text view prints: hidden ones dropped, `\r` lines collapsed.

    Text before a protocol record on the same line (a progress bar drawn when `report()`
    printed) is a bar the record's newline interrupted: it is held and replaced by the next
    such line of its source, and shown once when the bar's line ends.
    """
    held: dict[str, LogRecord] = {}
    for rec in records:
        line = rec.line
        if is_update(line) or is_banner(line):
            continue
        idx = line.find(PROTOCOL_PREFIX)
        if idx >= 0:
            head = collapse_cr(line[:idx])
            if head.strip():
                held[rec.source] = LogRecord(rec.source, head)
            continue
        text = collapse_cr(line)
        bar = held.pop(rec.source, None)
        if bar is not None:
            yield bar
            if not text.strip():
                continue  # the newline that ended the bar's line
        yield LogRecord(rec.source, text)
    yield from held.values()


#: Extra raw lines read for `tail_lines`, so that hidden lines do not shorten the tail.
TAIL_SLACK = 32


def last_readable(records: Iterable[LogRecord], n: int) -> list[LogRecord]:
    """The last `n` readable records of each source, sources in the order they came."""
    tails: dict[str, deque[LogRecord]] = {}
    for rec in readable(records):
        tails.setdefault(rec.source, deque(maxlen=max(0, n))).append(rec)
    return [rec for tail in tails.values() for rec in tail]
