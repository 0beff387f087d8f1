"""Log lines as a person reads them (pure): protocol lines hidden, banners folded, `\r` bars.

`iter_log_records` stays raw (the monitor, the server and the lab panel read progress, metrics,
results and errors from it). Every user-facing text view passes lines through here:

- kf-jupyter's own lines (`##kf-jupyter:report ...`, `result`, `error`) are hidden;
- torchrun's `OMP_NUM_THREADS` banner (four lines per torchrun) is folded away;
- torchrun's own traceback and "ChildFailedError" box, printed after a rank failed, are
  folded away (the rank's own traceback, and the job's failure, say what happened);
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
#: How much of the end of a line still being written an update record looks at (both backends).
UPDATE_BYTES = 65536

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


def terminal_line(line: str) -> str:
    """One log line (without its newline) as a terminal shows it: a CRLF's `\r` dropped, a
    `\r` bar collapsed to its last state; a print made while the bar was drawn
    (`\r<bar>\r<bar>rank 0 step 24 loss`) is the printed text alone, without the bar's state
    in front of it (`printed_after_bar`); the bar shows again at its next update."""
    return followed_line(line)[0]


def followed_line(line: str) -> list[str]:
    """The records a follower sends for one completed raw line: its `terminal_line`, and, when
    that line was a print made while a bar was drawn (`printed_after_bar`), an update record
    of the bar's state after it. A terminal leaves the bar's state before the printed text and
    draws the bar again at its next update; a live view keeps it as the source's live line
    instead, so the bar does not blink out at every print until its next redraw."""
    line = line[:-1] if line.endswith("\r") else line
    found = printed_after_bar(None, line) if "\r" in line else None
    if found is None:
        return [collapse_cr(line)]
    state, printed = found
    return [printed, UPDATE + state] if state.strip() else [printed]


def log_lines(text: str) -> list[str]:
    """A log's text as the lines a terminal shows (`terminal_line`), split at newlines only
    (not at `\r` or the other separators `str.splitlines` knows)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ended the last line
    return [terminal_line(ln) for ln in lines]


def after_bar(bar: str, line: str) -> str | None:
    """The text printed after a progress bar on the bar's own line, or None when `line` is not
    a bar followed by text (the same rule as labextension/src/logparse.ts `afterBar`).

    When a program prints while a bar is drawn, the completed line is the bar's next state
    followed by what was printed: `...[00:19<00:11]rank 0 step 19 loss`. That state is as wide
    as `bar` (the last update shown) for a fixed-width bar; tqdm's ends with its `[...]` block,
    whose rate and times may grow or shrink by a few characters between two states (`9.87it/s`,
    `10.12it/s`), so there the bar ends at the `]` nearest to `bar`'s width. A bar without such
    a block may grow (`5/6 |######` then `6/6 |#######`): what follows its width counts as
    printed only when it holds a letter, never a bar's own `#`.
    """
    if "\r" in line or not _BARLIKE.search(bar):
        return None
    cut = len(bar)
    near = []
    if bar.endswith("]"):
        near = [
            j + 1
            for j in range(max(0, cut - 1 - _BAR_SLACK), min(len(line), cut + _BAR_SLACK))
            if line[j] == "]"
        ]
        if near:
            cut = min(near, key=lambda j: abs(j - len(bar)))
    head, tail = line[:cut], line[cut:]
    if not _BARLIKE.search(head) or not tail.strip():
        return None
    if not near and not _LETTER.search(tail):
        return None
    return tail


_LETTER = re.compile(r"[^\W\d_]")


#: How far a tqdm bar's next state may differ in width from the last one shown.
_BAR_SLACK = 16


def printed_after_bar(bar: str | None, line: str) -> tuple[str, str] | None:
    """(the bar's state, the text printed after it) when a completed `line` ends with a print
    made while a progress bar was drawn, else None. The bar is `bar` (the last update shown),
    or, for a raw line that carries its own `\r` updates, the update before its last segment."""
    last = line
    own = False
    if "\r" in line:
        parts = [p for p in line.split("\r") if p.strip()]
        if not parts:
            return None
        last = parts[-1]
        if len(parts) >= 2:
            bar = parts[-2]
            own = True
    if bar is None:
        return None
    printed = after_bar(bar, last)
    if printed is None:
        return None
    state = last[: len(last) - len(printed)]
    if own and not state.endswith("]"):
        return None  # split from its own line only at a tqdm-like bar's `[...]` block
    return state, printed


_BARLIKE = re.compile(r"[|%]")


def is_update(line: str) -> bool:
    """The record updates a line still being written (see the module docstring)."""
    return line.startswith(UPDATE)


def shown(line: str) -> bool:
    """The line belongs in a text view (not protocol, not the banner, not an update)."""
    return not (is_update(line) or is_protocol(line) or is_banner(line))


_TRACEBACK = "Traceback (most recent call last):"
_ELASTIC = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError"


class DumpFolder:
    """Folds torchrun's traceback and `ChildFailedError` box away, per source, as lines stream.

    A traceback is held until its exception line: torchrun's (`ChildFailedError`) is dropped with
    the `=====` box after it; any other is passed on whole. `push` returns the lines to pass on.
    """

    def __init__(self) -> None:
        self._held: dict[str, list[str]] = {}
        self._box: dict[str, int] = {}  # source -> `=====` lines still to skip

    def push(self, source: str, line: str) -> list[str]:
        """The lines of `source` to show now (none while a traceback is held)."""
        if PROTOCOL_PREFIX in line:
            return [line]  # reports, results and errors always reach their readers
        if source in self._box:
            if line.startswith("====="):
                self._box[source] -= 1
                if not self._box[source]:
                    del self._box[source]
            return []
        held = self._held.get(source)
        if held is None:
            if line.startswith(_ELASTIC):  # torchrun's box without a traceback before it
                self._box[source] = 2
                return []
            if line.strip() == _TRACEBACK:
                self._held[source] = [line]
                return []
            return [line]
        if line.startswith((" ", "\t")) or not line.strip():
            held.append(line)
            return []
        del self._held[source]
        if line.startswith(_ELASTIC):
            self._box[source] = 2
            return []
        return [*held, line]

    def finish(self) -> list[tuple[str, str]]:
        """Lines still held when the log ends (a traceback cut short)."""
        out = [(src, ln) for src, lines in self._held.items() for ln in lines]
        self._held.clear()
        return out


def readable(records: Iterable[LogRecord]) -> Iterator[LogRecord]:
    """The records a text view prints: hidden ones dropped, `\r` lines collapsed.

    Text before a protocol record on the same line (a progress bar drawn when `report()`
    printed) is a bar the record's newline interrupted: it is held and replaced by the next
    such line of its source, and shown once when the bar's line ends. A line printed while a
    bar is drawn (an update record before it) is shown without the bar's fragment
    (`after_bar`).
    """
    held: dict[str, LogRecord] = {}
    live: dict[str, str] = {}  # the bar each source is drawing (its last update)
    dump = DumpFolder()

    def lines() -> Iterator[tuple[str, str]]:
        for rec in records:
            for line in dump.push(rec.source, rec.line):
                yield rec.source, line
        yield from dump.finish()

    for source, line in lines():
        if is_update(line):
            text = collapse_cr(line)
            if text.strip():
                live[source] = text
            continue
        if is_banner(line):
            continue
        if PROTOCOL_PREFIX not in line and source in live:
            printed = after_bar(live[source], line)
            if printed is None:
                del live[source]  # the line the bar was on has ended
            else:
                live[source] = line[: len(line) - len(printed)]
                line = printed
        idx = line.find(PROTOCOL_PREFIX)
        if idx >= 0:
            head = collapse_cr(line[:idx])
            if head.strip():
                held[source] = LogRecord(source, head)
            continue
        text = collapse_cr(line)
        bar = held.pop(source, None)
        if bar is not None:
            yield bar
            if not text.strip():
                continue  # the newline that ended the bar's line
        yield LogRecord(source, text)
    yield from held.values()


#: Extra raw lines read for `tail_lines`, so that hidden lines do not shorten the tail.
TAIL_SLACK = 32


def last_readable(records: Iterable[LogRecord], n: int) -> list[LogRecord]:
    """The last `n` readable records of each source, sources in the order they came."""
    tails: dict[str, deque[LogRecord]] = {}
    for rec in readable(records):
        tails.setdefault(rec.source, deque(maxlen=max(0, n))).append(rec)
    return [rec for tail in tails.values() for rec in tail]
