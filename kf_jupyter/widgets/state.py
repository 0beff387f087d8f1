"""What the job monitor knows, apart from any widget: bounded buffers, progress, metrics.

Pure Python (no ipywidgets): the monitor widget and the terminal fallback both feed it, and tests
drive it directly. Memory stays bounded however many lines pass: a ring buffer of the last
`buffer_lines` lines, the last `tail_lines` lines per source, and at most `max_points` points
per metric (older points are thinned, every other one dropped, when the series is full).
"""

from __future__ import annotations

import html
import re
from collections import deque
from typing import Any

from ..constants import REPORT_PREFIX, RESULT_PREFIX
from ..logview import DumpFolder, after_bar, collapse_cr, is_banner, is_update
from ..report import parse_report

#: Rank prefix colours, each at least 4.5:1 against a light theme's backgrounds (white, #eee).
#: The lab extension has the same list and the same `source_colour_index`
#: (labextension/src/palette.ts; a test keeps them equal), so a rank has one colour in the
#: monitor, the static output and the lab panel; its stylesheet swaps in PALETTE_DARK (each at
#: least 4.5:1 against #111 and #212121) under a dark theme, by the `kf-src-N` class.
PALETTE = ("#1d6ea7", "#c92526", "#217821", "#824eb2", "#a74e00", "#0e727c", "#8c564b", "#b9268c")
PALETTE_DARK = (
    "#3d9cde",
    "#e67374",
    "#2fac2f",
    "#ab87cb",
    "#ff7f0e",
    "#17becf",
    "#bc8b81",
    "#e377c2",
)
_ANSI = (34, 31, 32, 35, 33, 36, 90, 95)
#: Lines of kf-jupyter's own protocol (reports, results, ...): they drive the monitor, never shown.
PROTOCOL_PREFIX = "##kf-jupyter:"
_TRAILING_NUMBER = re.compile(r"(\d+)$")


def source_colour_index(source: str) -> int:
    """The palette slot of a source: its trailing number (`rank-3` -> 3), else a char-code sum.

    Depends on the name only (not on the order lines arrive in), so every view agrees.
    """
    m = _TRAILING_NUMBER.search(source)
    n = int(m.group(1)) if m else sum(ord(c) for c in source)
    return n % len(PALETTE)


def source_colour(source: str) -> str:
    """The colour of a source's `[rank-N]` prefix."""
    return PALETTE[source_colour_index(source)]


_ERROR_HINT = re.compile(r"Traceback|Error|Exception|exited with|FAILED|Killed")


def _source_key(source: str) -> tuple[int, str]:
    m = re.search(r"(\d+)$", source)
    return (int(m.group(1)) if m else -1, source)


#: The dark palette for a dark JupyterLab theme, carried by the log itself: the lab extension's
#: stylesheet does the same, but the kernel's views also show where the extension is absent
#: (its ipywidget monitor, its static output), and the light colours fall to 3.4:1 there.
DARK_STYLE = (
    "<style>"
    + "".join(
        f"body[data-jp-theme-light='false'] .kf-src-{i}{{color:{c}!important}}"
        for i, c in enumerate(PALETTE_DARK)
    )
    + "</style>"
)


#: The live charts' lines in the dark palette under a dark JupyterLab theme (an inline <svg>'s
#: presentation attributes give way to a stylesheet): the light colours are under 4.5:1 there.
CHART_DARK_STYLE = (
    "<style>"
    + "".join(
        f"body[data-jp-theme-light='false'] .kf-chart-line-{i}{{stroke:{c}}}"
        for i, c in enumerate(PALETTE_DARK)
    )
    + "</style>"
)


def chart_figure(label: str, picture: str, hidden_label: bool = False) -> str:
    """A chart (an inline <svg> or an <img>) under its label, the label page text in the
    theme's text colour (it inherits it; no fixed colour that one theme would hide).
    `hidden_label`: the picture names itself already (an image's alt), so assistive
    technology reads the label once."""
    hidden = " aria-hidden='true'" if hidden_label else ""
    return (
        "<figure class='kf-chart-figure' style='margin:0'>"
        f"<figcaption class='kf-chart-label' style='font-size:12px;margin:0 0 2px'{hidden}>"
        f"{html.escape(label)}</figcaption>{picture}</figure>"
    )


def log_box_html(body: str, max_height: str | None = "24em") -> str:
    """A log box that opens at its end without JavaScript (a scroll box in column-reverse when
    `max_height` is set), wrapping long lines at word boundaries (a word longer than the line is
    broken only then)."""
    box = (
        f"display:flex;flex-direction:column-reverse;max-height:{max_height};overflow:auto"
        if max_height
        else ""
    )
    # a scroll box is reachable from the keyboard (axe: scrollable-region-focusable)
    focus = " tabindex='0' role='log' aria-label='Job log'" if max_height else ""
    return (
        f"{DARK_STYLE}<div class='kf-log-box'{focus} style='{box}'><pre class='kf-log-text' style='flex-shrink:0;"
        "margin:0;font-family:monospace;font-size:12px;line-height:1.3;white-space:pre-wrap;"
        f"overflow-wrap:break-word;word-break:normal'>{body}</pre></div>"
    )


class LogState:
    """Bounded view of a job's logs and reports."""

    def __init__(self, buffer_lines: int = 400, tail_lines: int = 20, max_points: int = 200):
        self.buffer: deque[tuple[str, str]] = deque(maxlen=max(1, buffer_lines))
        self.tail_lines = tail_lines
        self.tails: dict[str, deque[str]] = {}
        self.colours: dict[str, int] = {}
        self.lines = 0
        self.bytes = 0
        self.progress: float | None = None
        self.step: int | None = None
        self.metrics: dict[str, list[tuple[float, float]]] = {}
        self._stride: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        self.max_points = max(4, max_points)
        self.eta_seconds: int | None = None
        self._marker_metrics: set[str] = set()
        self._marker_progress = False
        self._record_progress = False  # the job's record (trainerStatus) gave a progress
        self._trainer_status: Any = None  # the last status taken (a new one differs from it)
        self.result_line: str | None = None
        self.last_error_source: str | None = None
        self.log_dirty = False
        self.stats_dirty = False
        self.printable = ""  # what a text view prints for the line _add_line() just took
        self.printed: list[str] = []  # what it prints for the line add() just took
        self._dump = DumpFolder()  # torchrun's traceback and box are folded away
        self._open: dict[str, bool] = {}  # sources whose `\r` progress line is being written

    @property
    def sources(self) -> list[str]:
        """Sources seen so far, in rank order."""
        return sorted(self.colours, key=_source_key)

    def colour_index(self, source: str) -> int:
        """A stable colour slot for a source."""
        if source not in self.colours:
            self.colours[source] = len(self.colours)
            self.tails[source] = deque(maxlen=self.tail_lines)
        return self.colours[source]

    def add(self, source: str, line: str) -> bool:
        """Take one line; return True when a text view prints the lines in `self.printed`.

        Reports and results feed progress, metrics and the result, and are never shown; nor is
        torchrun's OMP banner. A `\r` progress bar stays one line per source, updated in place.
        """
        self.colour_index(source)
        self.lines += 1
        self.bytes += len(line) + 1
        self.printed = []
        for text in self._dump.push(source, line):
            if self._add_line(source, text):
                self.printed.append(self.printable)
        return bool(self.printed)

    def flush_held(self) -> list[tuple[str, str]]:
        """At the end of the log: lines still held (a traceback cut short) into the view."""
        out = []
        for source, text in self._dump.finish():
            if self._add_line(source, text):
                out.append((source, self.printable))
        return out

    def _add_line(self, source: str, line: str) -> bool:
        idx = line.find(PROTOCOL_PREFIX)
        if idx >= 0:
            record = line[idx:]
            rec = parse_report(record) if record.startswith(REPORT_PREFIX) else None
            if rec is not None:
                self._report(rec)
            elif record.startswith(RESULT_PREFIX):
                self.result_line = record[len(RESULT_PREFIX) :]
            head = line[:idx]
            if not collapse_cr(head).strip():
                return False
            # Text before the record: a progress bar whose line the record's newline ended
            # (report() called while a bar is drawn). The bar goes on: keep its line open.
            return bool(self._put_progress(source, head, keep_open=True))
        if is_banner(line):
            return False
        progress = self._put_progress(source, line)
        if progress is not None:
            return progress
        self.buffer.append((source, line))
        self.tails[source].append(line)
        self.printable = line
        if _ERROR_HINT.search(line):
            self.last_error_source = source
        self.log_dirty = True
        return True

    def _put_progress(self, source: str, line: str, keep_open: bool = False) -> bool | None:
        """A `\r` progress line: keep one line per source and update it in place.

        None for an ordinary line. Otherwise the buffer already holds the line, and the value
        says whether a text view prints it: False for an update of a line still being written,
        True for the completed line (printed once, as a terminal would leave it). See
        `kf_jupyter.logview`.
        """
        update = is_update(line) or keep_open
        if not update and "\r" not in line and source not in self._open:
            return None
        text = collapse_cr(line)
        self.log_dirty = True
        if source in self._open and not update and self.tails[source]:
            printed = after_bar(self.tails[source][-1], text)
            if printed is not None:
                # a print while the bar is drawn, on the bar's terminal line (`...[00:19<00:11]
                # rank 0 step 19 loss`): the printed text becomes a clean line, and the bar
                # (its state in this line) stays the source's live last line, as in the lab
                self._drop_last(source)
                self._append(source, printed)
                self._append(source, text[: len(text) - len(printed)])
                self.printable = printed
                return True
        if source in self._open:
            if text.strip() or update:
                self._replace_last(source, text)
            if not update:
                del self._open[source]
                self.printable = self.tails[source][-1] if self.tails[source] else text
            return not update
        self.buffer.append((source, text))
        self.tails[source].append(text)
        self.printable = text
        if update:
            self._open[source] = True
        return not update

    def _append(self, source: str, text: str) -> None:
        self.buffer.append((source, text))
        self.tails[source].append(text)

    def _drop_last(self, source: str) -> None:
        for i in range(len(self.buffer) - 1, -1, -1):
            if self.buffer[i][0] == source:
                del self.buffer[i]
                break
        tail = self.tails[source]
        if tail:
            tail.pop()

    def _replace_last(self, source: str, text: str) -> None:
        for i in range(len(self.buffer) - 1, -1, -1):
            if self.buffer[i][0] == source:
                self.buffer[i] = (source, text)
                break
        tail = self.tails[source]
        if tail:
            tail[-1] = text

    def _report(self, rec: dict[str, Any]) -> None:
        prog = rec.get("progress")
        if isinstance(prog, int | float) and not self._record_progress:
            self.progress = min(1.0, max(0.0, float(prog)))
            self._marker_progress = True
        step = rec.get("step")
        if isinstance(step, int | float):
            self.step = int(step)
        self._marker_metrics.update(rec["metrics"])
        self._add_points(step, rec["metrics"])

    def apply_trainer_status(self, status: Any) -> None:
        """Take a job's `trainer_status` (KEP-2779; posted by the SDK, Transformers, report()).

        Progress and ETA come from it whenever it has them: the job's record is the one source
        the sidebar, the job panel and `%kf_jobs` read too, so every view shows the same number
        (issue 22); log markers give progress only to a job without a recorded one. Metric
        points come from it only where no log marker gave them (markers are sent for every
        report, the status at most once per 5 s), one point per new status. A status is new
        when anything in it differs, not only its time: `lastUpdatedTime` keeps whole seconds,
        so a job's last report (sent at its exit) often carries the same time as the one before.
        """
        if status is None or status == self._trainer_status:
            return
        self._trainer_status = status
        from ..progress import numeric_metrics

        if status.progress_percentage is not None:
            self.progress = min(1.0, max(0.0, status.progress_percentage / 100))
            self._record_progress = True
        self.eta_seconds = status.estimated_remaining_seconds
        metrics = numeric_metrics(status)
        step = metrics.pop("current_step", metrics.pop("step", None))
        metrics.pop("total_steps", None)  # Transformers' callback: a constant, not a curve
        fresh = {k: v for k, v in metrics.items() if k not in self._marker_metrics}
        if fresh:
            self._add_points(step, fresh)
        self.stats_dirty = True

    def _add_points(self, step: Any, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            n = self._seen.get(name, 0)
            self._seen[name] = n + 1
            stride = self._stride.get(name, 1)
            if n % stride:
                continue
            series = self.metrics.setdefault(name, [])
            x = float(step) if isinstance(step, int | float) else float(n)
            series.append((x, value))
            if len(series) > self.max_points:
                series[:] = series[::2]
                self._stride[name] = stride * 2
        self.stats_dirty = True

    # -- renderings ----------------------------------------------------------------------------

    def text_prefix(self, source: str, colour: bool = False) -> str:
        """`[rank-1] ` (ANSI-coloured when `colour`)."""
        if not colour:
            return f"[{source}] "
        self.colour_index(source)
        code = _ANSI[source_colour_index(source) % len(_ANSI)]
        return f"\x1b[{code}m[{source}]\x1b[0m "

    def render_log_html(self, only: str | None = None, limit: int | None = None) -> str:
        """The buffered lines as escaped HTML with coloured prefixes (one source, or all)."""
        rows = [(s, ln) for s, ln in self.buffer if only is None or s == only]
        if limit is not None:
            rows = rows[-limit:]
        parts = []
        for s, ln in rows:
            colour = source_colour(s)
            prefix = html.escape(f"[{s}]")  # a source is a log file's name: anything at all
            # the class lets a dark theme swap in PALETTE_DARK (the lab extension's stylesheet)
            parts.append(
                f"<span class='kf-src-{source_colour_index(s)}' style='color:{colour}'>{prefix}"
                f"</span> {html.escape(ln)}"
            )
        return log_box_html("\n".join(parts))

    def failure_tail(self, job: Any = None) -> tuple[str, list[str]]:
        """The failing source and its last lines (from the job's failed step when known)."""
        candidates: list[str] = []
        for step in getattr(job, "steps", None) or []:
            failed = step.status == "Failed" or (step.exit_code not in (None, 0))
            if failed and step.name in self.tails:
                candidates.append(step.name)
        if candidates:
            source = sorted(candidates, key=_source_key)[0]
        elif self.last_error_source:
            source = self.last_error_source
        elif self.buffer:
            source = self.buffer[-1][0]
        else:
            return "", []
        return source, list(self.tails.get(source, []))

    def chart_svgs(
        self, width: int = 320, height: int = 120, inline: bool = False
    ) -> list[tuple[str, str, str]]:
        """One small standalone SVG line chart per metric: (name, label, svg). The svg has no
        text (the label goes beside it as page text: see `chart_figure`, so it takes the
        theme's text colour). `inline` (an <svg> in the page: the live monitor): no ground of
        its own, its frame in the text colour and its line in the dark palette under a dark
        theme (`CHART_DARK_STYLE`); else (an <img>, which no theme colour reaches) a white
        ground the light palette is 4.5:1 on."""
        charts = []
        for i, (name, series) in enumerate(sorted(self.metrics.items())):
            if not series:
                continue
            xs = [p[0] for p in series]
            ys = [p[1] for p in series]
            x0, x1 = min(xs), max(xs)
            y0, y1 = min(ys), max(ys)
            # halves: the span of two finite floats near ±1.8e308 would overflow to inf
            dx = (x1 / 2 - x0 / 2) or 1.0
            dy = (y1 / 2 - y0 / 2) or 1.0
            pad = 6
            pts = " ".join(
                f"{pad + (x / 2 - x0 / 2) / dx * (width - 2 * pad):.1f},"
                f"{height - pad - (y / 2 - y0 / 2) / dy * (height - 2 * pad):.1f}"
                for x, y in series
            )
            slot = i % len(PALETTE)
            label = f"{name}: {ys[-1]:.4g} (step {int(xs[-1])})"
            if inline:
                ground = (
                    "<rect width='100%' height='100%' fill='none' stroke='currentColor' "
                    "stroke-opacity='0.35'/>"
                )
                a11y = f" role='img' aria-label='{html.escape(label)}'"
            else:
                ground = "<rect width='100%' height='100%' fill='#fff' stroke='#ccc'/>"
                a11y = ""
            charts.append(
                (
                    name,
                    label,
                    f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
                    f"class='kf-chart' data-metric='{html.escape(name)}'{a11y}>{ground}"
                    f"<polyline class='kf-chart-line-{slot}' fill='none' "
                    f"stroke='{PALETTE[slot]}' stroke-width='1.5' points='{pts}'/></svg>",
                )
            )
        return charts

    def chart_svg(self, width: int = 320, height: int = 120) -> str:
        """The live monitor's charts: an inline SVG line chart per metric under its label, in
        the theme's colours ('' when there are none)."""
        charts = [
            chart_figure(label, svg, True) for _, label, svg in self.chart_svgs(width, height, True)
        ]
        if not charts:
            return ""
        return (
            f"{CHART_DARK_STYLE}<div style='display:flex;flex-wrap:wrap;gap:6px'>"
            + "".join(charts)
            + "</div>"
        )
