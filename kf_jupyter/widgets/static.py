"""The output a job leaves in its cell: the live bundle while it runs, a static rendering after.

While a cell follows a job it displays `live_bundle(...)` with a `display_id`: the MIME type
`application/vnd.kf-jupyter.job+json` (which the lab extension renders as a live monitor that
talks to the server extension, so it works while the kernel is busy), the ipywidget monitor
(for frontends without the lab extension: JupyterLab without it, VS Code), and a `text/html` /
`text/plain` fallback. When the job ends, the kernel replaces that display (on the main thread,
before the cell ends; for a cell that did not wait, from the monitor's thread by display id, see
kf_jupyter.widgets.monitor) with `final_bundle(...)`: plain HTML with inline styles and an inline SVG
chart, no JavaScript and no widget, so a saved notebook shows what happened in JupyterLab, in
nbconvert's HTML, on GitHub/nbviewer and in nbval.

No ipywidgets or IPython imports here: tests render bundles directly.
"""

from __future__ import annotations

import base64
import html
import time
from datetime import UTC
from typing import Any

from ..types import FAILED
from .state import LogState, chart_figure, log_box_html, source_colour, source_colour_index

#: The MIME type of the live monitor (rendered by the lab extension's MIME renderer).
MIME_TYPE = "application/vnd.kf-jupyter.job+json"
#: Version of the MIME payload (the renderer refuses what it does not know).
MIME_VERSION = 1
#: Last lines of every rank kept in the static rendering.
STATIC_LINES_PER_SOURCE = 12

BADGE_COLOURS = {
    "Created": "#6c757d",
    "Running": "#0d6efd",
    "Complete": "#198754",
    "Failed": "#dc3545",
    "Cancelled": "#a84c00",
    "Suspended": "#7d5a00",
    "Detached": "#6f42c1",
    "Deleted": "#6c757d",
}
#: The `reason` the local backend gives a job stopped by cancel_job.
CANCELLED_REASON = "Cancelled"


def status_label(job: Any) -> str:
    """What the badge says for a job, from the backend's own record: `Cancelled` only when the
    backend recorded a cancel (status Failed, reason Cancelled), never because a button was hit."""
    status = str(getattr(job, "status", "") or "")
    if status == FAILED and getattr(job, "reason", "") == CANCELLED_REASON:
        return "Cancelled"
    return status


def fmt_duration(seconds: float | None) -> str:
    """`m:ss` or `h:mm:ss`."""
    if seconds is None:
        return ""
    s = int(max(0, seconds))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def badge_html(label: str) -> str:
    """The status badge (a coloured pill)."""
    colour = BADGE_COLOURS.get(label, "#6c757d")
    return (
        f"<span class='kf-status' style='background:{colour};color:white;padding:1px 6px;"
        f"border-radius:8px'>{html.escape(label)}</span>"
    )


def _target(backend: str, namespace: str | None) -> str:
    return f"{backend} / {namespace}" if namespace else backend


def job_payload(
    name: str,
    backend: str,
    namespace: str | None = None,
    runtime: str = "",
    waiting: bool = False,
) -> dict[str, Any]:
    """The JSON the lab extension's live monitor needs to find the job on the server."""
    return {
        "version": MIME_VERSION,
        "name": name,
        "backend": backend,
        "namespace": namespace or None,
        "runtime": runtime,
        "waiting": waiting,
        "api": "kf-jupyter/api",
    }


def live_bundle(
    name: str,
    backend: str,
    namespace: str | None = None,
    runtime: str = "",
    waiting: bool = False,
    widget_model_id: str | None = None,
) -> dict[str, Any]:
    """The display of a running job: live MIME payload, ipywidget view, HTML and text fallback."""
    where = html.escape(_target(backend, namespace))
    hint = (
        "While the cell runs the kernel is busy: to stop the job, interrupt the kernel, then "
        f"run <code>%kf_delete {html.escape(name)}</code>."
        if waiting
        else f"Follow it with <code>%kf_logs {html.escape(name)} -f</code>."
    )
    data: dict[str, Any] = {
        MIME_TYPE: job_payload(name, backend, namespace, runtime, waiting),
        "text/html": (
            f"<div class='kf-monitor-fallback'><b>{html.escape(name)}</b> · {where} · "
            f"{badge_html('Running')}<br><small>Job {html.escape(name)} was running when this "
            f"output was made; this copy does not update. {hint} Its final state shows here "
            "when the cell that follows it ends.</small></div>"
        ),
        "text/plain": f"Job {name} ({_target(backend, namespace)}): running",
    }
    if widget_model_id:
        data["application/vnd.jupyter.widget-view+json"] = {
            "version_major": 2,
            "version_minor": 0,
            "model_id": widget_model_id,
        }
    return data


def _failure_html(job: Any) -> str:
    failure = getattr(job, "failure", None)
    message = str(getattr(job, "message", "") or "")
    if status_label(job) == "Cancelled":  # not a failure: say what happened, plainly
        return (
            f"<div class='kf-note'><small>{html.escape(message)}</small></div>" if message else ""
        )
    if failure is None and not (getattr(job, "status", "") == FAILED and message):
        return ""
    parts = []
    if failure is not None:
        head = f"{failure.source} failed: {failure.exc_type}"
        if failure.message:
            head += f": {failure.message}"
        parts.append(f"<b>{html.escape(head)}</b>")
        tb = list(getattr(failure, "traceback", None) or [])
        if tb:
            body = "\n".join(html.escape(str(x).rstrip("\n")) for x in tb)
            parts.append(
                "<pre style='margin:2px 0;white-space:pre-wrap;overflow-wrap:break-word'>"
                f"{body}</pre>"
            )
    elif message:
        parts.append(f"<b>{html.escape(message)}</b>")
    return (
        "<div class='kf-failure' style='border-left:4px solid #dc3545;padding-left:6px;"
        f"margin:4px 0'>{''.join(parts)}</div>"
    )


def _css_key(label: str) -> str:
    return "".join(c for c in label.lower() if c.isalnum()) or "unknown"


def _charts_html(state: LogState) -> str:
    """The metric charts as SVG images (data: URIs): unlike inline <svg>, they survive the HTML
    sanitizers of untrusted notebooks (JupyterLab) and of notebook viewers. Each label is page
    text above its image, so it takes the theme's text colour."""
    if not state.metrics:
        return ""
    imgs = []
    for _name, label, svg in state.chart_svgs():
        data = base64.b64encode(svg.encode()).decode()
        img = (
            f"<img class='kf-chart' alt='{html.escape(label)}' title='{html.escape(label)}' "
            f"width='320' height='120' src='data:image/svg+xml;base64,{data}'>"
        )
        imgs.append(chart_figure(label, img, hidden_label=True))
    return "<div style='display:flex;flex-wrap:wrap;gap:6px'>" + "".join(imgs) + "</div>"


def _progress_html(progress: float | None) -> str:
    if progress is None:
        return ""
    pct = max(0.0, min(1.0, progress)) * 100
    return (
        "<div class='kf-progress' style='display:flex;align-items:center;gap:6px;margin:4px 0'>"
        "<div style='flex:1;max-width:420px;height:8px;background:#e9ecef;border-radius:4px'>"
        f"<div style='width:{pct:.0f}%;height:8px;background:#0d6efd;border-radius:4px'></div>"
        f"</div><small>{pct:.0f}%</small></div>"
    )


def shown_sources(state: LogState, label: str) -> list[str]:
    """The sources whose last lines the static rendering shows: all of them, except that a
    cancelled job's launcher agents (`node-N`, `launcher`: torchrun's SignalException dump when
    it is stopped) are left to the full log when there are rank lines to show."""
    sources = state.sources
    ranks = [s for s in sources if s.startswith("rank-")]
    if label == "Cancelled" and ranks:
        return ranks
    return sources


def lines_for(n_sources: int, lines_per_source: int) -> int:
    """Lines shown per source: `lines_per_source`, fewer when many sources (about 48 in all,
    at least 3 each)."""
    return max(3, min(lines_per_source, 48 // max(1, n_sources)))


def _tails_html(state: LogState, lines_per_source: int, label: str = "") -> str:
    rows = []
    sources = shown_sources(state, label)
    lines_per_source = lines_for(len(sources), lines_per_source)
    for source in sources:
        tail = list(state.tails.get(source, []))[-lines_per_source:]
        colour = source_colour(source)
        for line in tail:
            rows.append(
                f"<span class='kf-src-{source_colour_index(source)}' style='color:{colour}'>"
                f"[{html.escape(source)}]</span> {html.escape(line)}"
            )
    if not rows:
        return "<div><small>(no log lines)</small></div>"
    # No scroll box: sanitizers (JupyterLab's for untrusted notebooks, viewers') keep a
    # max-height but drop overflow, so the text would spill over what follows. The number of
    # lines is bounded instead (see lines_for), and the view ends with the last lines.
    return log_box_html("\n".join(rows), max_height=None)


def final_html(
    state: LogState,
    job: Any,
    name: str,
    backend: str,
    namespace: str | None = None,
    runtime: str = "",
    log_pointer: str = "",
    duration: float | None = None,
    label: str | None = None,
    lines_per_source: int = STATIC_LINES_PER_SOURCE,
) -> str:
    """The static rendering of an ended job: plain HTML, inline styles, inline SVG, no JS."""
    label = label or status_label(job)
    rt = f" · runtime {html.escape(runtime)}" if runtime else ""
    took = f" · took {fmt_duration(duration)}" if duration is not None else ""
    step = f" · step {state.step}" if state.step is not None else ""
    chart = _charts_html(state)
    pointer = log_pointer or f"<code>%kf_logs {html.escape(name)}</code>"
    shown = lines_for(len(shown_sources(state, label)), min(lines_per_source, state.tail_lines))
    return (
        f"<div class='kf-monitor-static kf-status-{_css_key(label)}' "
        f"data-job='{html.escape(name)}' data-status='{html.escape(label)}'>"
        f"<div><b>{html.escape(name)}</b> · {html.escape(_target(backend, namespace))}{rt} · "
        f"{badge_html(label)}{took}{step}</div>"
        f"{_progress_html(state.progress)}{chart}{_failure_html(job)}"
        f"<div style='margin-top:4px'><small>Last {shown} lines of every process:</small></div>"
        f"{_tails_html(state, lines_per_source, label)}"
        f"<div><small>full log: {pointer}</small></div></div>"
    )


def final_text(
    state: LogState,
    job: Any,
    name: str,
    backend: str,
    namespace: str | None = None,
    duration: float | None = None,
    label: str | None = None,
    lines_per_source: int = 3,
) -> str:
    """The plain-text form of the static rendering (for text-only frontends and nbval)."""
    label = label or status_label(job)
    took = f", took {fmt_duration(duration)}" if duration is not None else ""
    out = [f"Job {name} ({_target(backend, namespace)}): {label}{took}"]
    if state.progress is not None:
        out.append(f"progress {state.progress:.0%}")
    failure = getattr(job, "failure", None)
    if failure is not None:
        out.append(f"{failure.source} failed: {failure.exc_type}: {failure.message}")
    elif getattr(job, "status", "") == FAILED and getattr(job, "message", ""):
        out.append(str(job.message))
    for source in shown_sources(state, label):
        for line in list(state.tails.get(source, []))[-lines_per_source:]:
            out.append(f"[{source}] {line}")
    return "\n".join(out)


def _aware(when: Any) -> Any:
    if when is not None and when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    return when


def job_duration(job: Any, started: float | None = None) -> float | None:
    """Seconds from creation to completion (or to now), from the job record when it has them."""
    created = _aware(getattr(job, "creation_time", None))
    done = _aware(getattr(job, "completion_time", None))
    start = created.timestamp() if created is not None else started
    if start is None:
        return None
    end = done.timestamp() if done is not None else time.time()
    return max(0.0, end - start)


def final_bundle(
    state: LogState,
    job: Any,
    name: str,
    backend: str,
    namespace: str | None = None,
    runtime: str = "",
    log_pointer: str = "",
    label: str | None = None,
    started: float | None = None,
) -> dict[str, Any]:
    """The display of an ended job: static HTML and text only (no widget, no live MIME type)."""
    duration = job_duration(job, started)
    return {
        "text/html": final_html(
            state, job, name, backend, namespace, runtime, log_pointer, duration, label
        ),
        "text/plain": final_text(state, job, name, backend, namespace, duration, label),
    }
