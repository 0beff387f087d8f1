"""Several jobs' metric curves overlaid: what `%kf_compare` shows, and the sweep view's charts.

A `Run` is one job's metric series, read from its log (the `report()` markers) and its record
(`trainerStatus`), exactly as the job monitor reads them (`LogState`), so a curve here is the
curve the job's own monitor drew. `compare_bundle` renders runs as static HTML (inline styles,
one SVG chart per metric as a data-URI image, one line per job) and text: like the monitor's
finished view, it shows in a saved notebook without a kernel, in nbconvert and on viewers.

No ipywidgets or IPython imports here: tests render bundles directly.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass, field
from typing import Any

from ..sweeps.metrics import katib_pairs
from .state import PALETTE, LogState
from .static import badge_html, fmt_duration, job_duration, status_label

#: Points kept per metric and job (older points thinned, as the monitor does).
MAX_POINTS = 500
CHART_W = 480
CHART_H = 200


@dataclass
class Run:
    """One job's metric curves: {metric: [(step, value), ...]}, its status and duration."""

    name: str
    status: str = ""
    metrics: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    label: str = ""
    duration: float | None = None

    @property
    def legend(self) -> str:
        """The text naming this run in a legend (its label, else the job's name)."""
        return self.label or self.name

    def last(self, metric: str) -> float | None:
        """The metric's last reported value (None when it reported none)."""
        series = self.metrics.get(metric)
        return series[-1][1] if series else None


def stdout_metric(line: str, metric: str) -> float | None:
    """The last value of `metric` in a `name=value` stdout line (None: not there); Katib's
    default metrics collector's filter, what SDK optimizer examples print (linear time)."""
    found = None
    for key, text in katib_pairs(line):
        if key == metric and text not in ("", "+", "-"):
            try:
                value = float(text)
            except ValueError:
                continue
            if math.isfinite(value):
                found = value
    return found


def read_run(client: Any, name: str, label: str = "", stdout_metrics: tuple[str, ...] = ()) -> Run:
    """A job's curves from its whole log and its record (a finished job, or one still running:
    the points so far). `report()` markers first; a metric of `stdout_metrics` no marker gave
    comes from Katib-style `name=value` lines; one only the record has (trainerStatus) is its
    latest value (the lab's views read the same). Raises JobNotFoundError for an unknown job."""
    job = client.get_job(name)
    state = LogState(buffer_lines=1, tail_lines=1, max_points=MAX_POINTS)
    printed: dict[str, list[tuple[float, float]]] = {}
    steps = 0
    for rec in client.iter_log_records(name, follow=False):
        state.add(rec.source, rec.line)
        found = False
        for metric in stdout_metrics:
            value = stdout_metric(rec.line, metric) if "=" in rec.line else None
            if value is not None:
                printed.setdefault(metric, []).append((float(steps), value))
                found = True
        steps += found
    for metric, points in printed.items():
        if metric not in state.metrics:
            state.metrics[metric] = points[-MAX_POINTS:]
    state.apply_trainer_status(getattr(job, "trainer_status", None))
    return Run(
        name=name,
        status=status_label(job),
        metrics={k: list(v) for k, v in state.metrics.items() if v},
        label=label,
        duration=job_duration(job),
    )


def metric_names(runs: list[Run]) -> list[str]:
    """Every metric any run reported, sorted."""
    return sorted({m for r in runs for m in r.metrics})


def fmt_value(value: float | None) -> str:
    """A metric value, short (4 significant digits); '' for none."""
    if value is None:
        return ""
    if math.isnan(value):
        return "nan"
    return f"{value:.4g}"


def run_colour(index: int) -> str:
    """The colour of the index-th run (the monitor's palette: 4.5:1 on the charts' white)."""
    return PALETTE[index % len(PALETTE)]


def _finite(metric: str, runs: list[Run]) -> list[tuple[int, Run, list[tuple[float, float]]]]:
    """Each run's finite points of `metric`, with the run's index (its colour)."""
    return [
        (i, r, [(x, y) for x, y in r.metrics.get(metric, []) if math.isfinite(y)])
        for i, r in enumerate(runs)
    ]


def _extent(
    series: list[tuple[int, Run, list[tuple[float, float]]]],
) -> tuple[float, float, float, float] | None:
    """(x0, x1, y0, y1) over every run's points; None when there are none."""
    pts = [p for _, _, ps in series for p in ps]
    if not pts:
        return None
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    return min(xs), max(xs), min(ys), max(ys)


def overlay_svg(
    metric: str,
    runs: list[Run],
    highlight: str | None = None,
    width: int = CHART_W,
    height: int = CHART_H,
) -> str:
    """One standalone SVG chart of `metric`: one polyline per run that reported it, in the run's
    colour (its index in `runs`), the `highlight` run drawn thicker, on a white ground of its
    own (it is shown as an image: no theme colour reaches it). No text: the title and the axis
    values are page text around it (`overlay_figure`), in the theme's colours."""
    pad = 8
    series = _finite(metric, runs)
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"class='kf-compare-chart' data-metric='{html.escape(metric)}'>",
        "<rect width='100%' height='100%' fill='#fff' stroke='#ccc'/>",
    ]
    extent = _extent(series)
    if extent is None:
        return "".join(parts) + "</svg>"
    x0, x1, y0, y1 = extent
    # halves: the span of two finite floats near ±1.8e308 would overflow to inf
    dx = (x1 / 2 - x0 / 2) or 1.0
    dy = (y1 / 2 - y0 / 2) or 1.0
    inner_w, inner_h = width - 2 * pad, height - 2 * pad

    def px(x: float) -> float:
        return pad + (x / 2 - x0 / 2) / dx * inner_w

    def py(y: float) -> float:
        return pad + inner_h - (y / 2 - y0 / 2) / dy * inner_h

    axis = "#767676"  # 4.5:1 on the white ground
    parts += [
        f"<line x1='{pad}' y1='{pad}' x2='{pad}' y2='{pad + inner_h}' stroke='{axis}'/>",
        f"<line x1='{pad}' y1='{pad + inner_h}' x2='{pad + inner_w}' "
        f"y2='{pad + inner_h}' stroke='{axis}'/>",
    ]
    # the highlighted run last, so it is drawn on top
    order = sorted(series, key=lambda s: s[1].name == highlight)
    for i, run, pts in order:
        if not pts:
            continue
        colour = run_colour(i)
        wide = run.name == highlight
        attrs = f"data-run='{html.escape(run.name)}' stroke='{colour}'"
        if len(pts) == 1:
            x, y = pts[0]
            parts.append(
                f"<circle cx='{px(x):.1f}' cy='{py(y):.1f}' r='{4 if wide else 3}' "
                f"fill='{colour}' {attrs}/>"
            )
            continue
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(
            f"<polyline fill='none' stroke-width='{3 if wide else 1.5}' {attrs} points='{line}'/>"
        )
    parts.append("</svg>")
    return "".join(parts)


#: The width of the y-axis values' column left of a chart.
_Y_COLUMN = 56


def overlay_figure(metric: str, runs: list[Run], highlight: str | None = None) -> str:
    """`metric`'s overlay chart as static HTML: its title above, the highest and lowest value
    to its left and the first and last step below, all page text (they inherit the theme's
    text colour: light or dark, a saved notebook's viewer too), around the lines drawn as a
    data-URI image (it survives the HTML sanitizers of untrusted notebooks and of viewers)."""
    svg = overlay_svg(metric, runs, highlight)
    shown = [r for r in runs if r.metrics.get(metric)]
    alt = f"{metric} of " + ", ".join(
        f"{r.legend} (last {fmt_value(r.last(metric))})" for r in shown
    )
    data = base64.b64encode(svg.encode()).decode()
    img = (
        f"<img class='kf-compare-img' data-metric='{html.escape(metric)}' "
        f"alt='{html.escape(alt)}' title='{html.escape(alt)}' width='{CHART_W}' "
        f"height='{CHART_H}' src='data:image/svg+xml;base64,{data}'>"
    )
    extent = _extent(_finite(metric, runs))
    small = "font-size:11px;line-height:1.2"
    if extent is None:
        y_top, y_bottom, x_row = "", "", "<span>no points</span>"
    else:
        x0, x1, y0, y1 = extent
        y_top, y_bottom = fmt_value(y1), fmt_value(y0)
        x_row = f"<span>step {fmt_value(x0)}</span><span>step {fmt_value(x1)}</span>"
    return (
        f"<figure class='kf-compare-figure' style='margin:0'>"
        f"<figcaption class='kf-chart-label' style='font-size:12px;font-weight:bold;"
        f"margin:0 0 2px {_Y_COLUMN}px'>{html.escape(metric)}</figcaption>"
        "<div style='display:flex'>"
        f"<div class='kf-chart-y' aria-hidden='true' style='display:flex;flex-direction:column;"
        f"justify-content:space-between;text-align:right;width:{_Y_COLUMN - 4}px;"
        f"padding-right:4px;{small}'><span>{y_top}</span><span>{y_bottom}</span></div>"
        f"{img}</div>"
        f"<div class='kf-chart-x' aria-hidden='true' style='display:flex;"
        f"justify-content:space-between;width:{CHART_W}px;margin-left:{_Y_COLUMN}px;{small}'>"
        f"{x_row}</div></figure>"
    )


def charts_html(runs: list[Run], highlight: str | None = None) -> str:
    """Every metric's overlay chart (`overlay_figure`): static HTML that survives the HTML
    sanitizers of untrusted notebooks and of viewers, as the monitor's charts do."""
    figures = [overlay_figure(metric, runs, highlight) for metric in metric_names(runs)]
    if not figures:
        return "<div><small>None of these jobs reported a metric (report() or trainerStatus).</small></div>"
    return (
        "<div style='display:flex;flex-wrap:wrap;gap:6px;margin:4px 0'>"
        + "".join(figures)
        + "</div>"
    )


def swatch_html(index: int) -> str:
    """The small coloured line that ties a legend row to its curve."""
    return (
        f"<span class='kf-swatch' aria-hidden='true' style='display:inline-block;width:16px;"
        f"height:4px;vertical-align:middle;margin-right:4px;background:{run_colour(index)}'></span>"
    )


_CELL = "style='padding:2px 8px;text-align:left'"


def compare_html(runs: list[Run], title: str = "") -> str:
    """The comparison of finished (or running) jobs: a legend table (colour, job, status,
    duration, each metric's last value) and one overlay chart per metric."""
    metrics = metric_names(runs)
    head = "".join(f"<th {_CELL}>{html.escape(h)}</th>" for h in ["job", "status", "took"])
    head += "".join(f"<th {_CELL}>{html.escape(m)} (last)</th>" for m in metrics)
    rows = []
    for i, r in enumerate(runs):
        cells = [
            f"<td {_CELL}>{swatch_html(i)}<code>{html.escape(r.legend)}</code></td>",
            f"<td {_CELL}>{badge_html(r.status or 'Unknown')}</td>",
            f"<td {_CELL}>{fmt_duration(r.duration)}</td>",
            *(f"<td {_CELL}>{fmt_value(r.last(m))}</td>" for m in metrics),
        ]
        rows.append(
            f"<tr class='kf-compare-row' data-job='{html.escape(r.name)}'>{''.join(cells)}</tr>"
        )
    title = title or f"Comparing {len(runs)} job{'s' if len(runs) != 1 else ''}"
    return (
        f"<div class='kf-compare-static'><div><b>{html.escape(title)}</b></div>"
        f"<table class='kf-compare-table' style='border-collapse:collapse;margin:4px 0'>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"{charts_html(runs)}</div>"
    )


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell (plain text)."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
        for r in [headers, *rows]
    ]
    return "\n".join(lines)


def compare_text(runs: list[Run], title: str = "") -> str:
    """The plain-text form: one row per job with each metric's last value."""
    metrics = metric_names(runs)
    rows = [
        [r.legend, r.status, fmt_duration(r.duration), *(fmt_value(r.last(m)) for m in metrics)]
        for r in runs
    ]
    title = title or f"Comparing {len(runs)} job{'s' if len(runs) != 1 else ''}"
    return title + "\n" + text_table(["job", "status", "took", *metrics], rows)


def compare_bundle(runs: list[Run], title: str = "") -> dict[str, str]:
    """The display of a comparison: static HTML and text, no widget, no JavaScript."""
    return {"text/html": compare_html(runs, title), "text/plain": compare_text(runs, title)}
