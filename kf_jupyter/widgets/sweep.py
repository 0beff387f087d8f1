"""The view of a hyperparameter sweep: a table of trials and every trial's curves overlaid.

One row per trial: its parameters, status, objective value and duration; the best trial is
marked (bold, "best", its curve drawn thicker). The best is recomputed from the trials each
time the view is drawn, and only among trials that completed with a finite objective value:
a running trial's value may still change, a failed trial's is not a result (it shows as
Failed, its objective cell says so). See docs/notebook.md, "Sweeps".

While a cell follows a sweep it displays `sweep_live_bundle(...)` (the MIME type
`application/vnd.kf-jupyter.sweep+json`, which the lab extension renders live, following every
trial's job over the page's one update socket; a static table for other frontends); when the
sweep ends the kernel replaces it with `sweep_bundle(...)`, plain HTML with inline styles and
the charts as images, no JavaScript, so a saved notebook shows it without a kernel.

No ipywidgets or IPython imports here: tests render bundles directly.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from .compare import Run, charts_html, fmt_value, swatch_html, text_table
from .static import badge_html, fmt_duration

#: The MIME type of the live sweep view (rendered by the lab extension).
SWEEP_MIME_TYPE = "application/vnd.kf-jupyter.sweep+json"
SWEEP_MIME_VERSION = 1
MINIMIZE = "minimize"
MAXIMIZE = "maximize"


@dataclass
class TrialRow:
    """One trial as the view shows it. `job` is its training job's name (its curves, logs)."""

    name: str
    job: str
    parameters: dict[str, str] = field(default_factory=dict)
    status: str = ""
    objective: float | None = None
    duration: float | None = None
    run: Run | None = None


def objective_of(run: Run | None, metric: str, direction: str) -> float | None:
    """A trial's objective value from its curve, as Katib's default metric strategy reads it:
    the lowest reported value when minimizing, the highest when maximizing (None: none)."""
    if run is None:
        return None
    values = [y for _, y in run.metrics.get(metric, []) if math.isfinite(y)]
    if not values:
        return None
    return min(values) if direction == MINIMIZE else max(values)


def best_trial(rows: list[TrialRow], direction: str) -> TrialRow | None:
    """The best of the trials that completed with a finite objective value (None: none yet).
    Ties go to the earlier trial."""
    done = [
        r
        for r in rows
        if r.status == "Complete" and r.objective is not None and math.isfinite(r.objective)
    ]
    if not done:
        return None
    pick = min if direction == MINIMIZE else max
    return pick(done, key=lambda r: r.objective if r.objective is not None else 0.0)


def parameter_names(rows: list[TrialRow]) -> list[str]:
    """Every parameter name, in first-seen order."""
    out: list[str] = []
    for r in rows:
        out += [p for p in r.parameters if p not in out]
    return out


def _objective_cell(row: TrialRow) -> str:
    if row.status == "Failed":
        return "failed" if row.objective is None else f"{fmt_value(row.objective)} (failed)"
    if row.objective is None:
        return "—" if row.status == "Complete" else ""
    return fmt_value(row.objective)


_CELL = "style='padding:2px 8px;text-align:left'"


def sweep_table_html(rows: list[TrialRow], metric: str, direction: str) -> str:
    """The trials table (the best row bold, marked "best" in words, not by colour alone)."""
    best = best_trial(rows, direction)
    params = parameter_names(rows)
    arrow = "↓" if direction == MINIMIZE else "↑"
    heads = ["trial", *params, "status", f"{metric} {arrow}", "took"]
    head = "".join(f"<th {_CELL}>{html.escape(h)}</th>" for h in heads)
    body = []
    for i, r in enumerate(rows):
        is_best = best is not None and r is best
        mark = " <b class='kf-best-mark'>★ best</b>" if is_best else ""
        cells = [
            f"<td {_CELL}>{swatch_html(i)}<code>{html.escape(r.name)}</code>{mark}</td>",
            *(f"<td {_CELL}>{html.escape(str(r.parameters.get(p, '')))}</td>" for p in params),
            f"<td {_CELL}>{badge_html(r.status or 'Created')}</td>",
            f"<td {_CELL} class='kf-objective'>{html.escape(_objective_cell(r))}</td>",
            f"<td {_CELL}>{fmt_duration(r.duration)}</td>",
        ]
        style = " style='font-weight:bold;border-left:4px solid #198754'" if is_best else ""
        cls = "kf-trial kf-best" if is_best else "kf-trial"
        body.append(
            f"<tr class='{cls}' data-trial='{html.escape(r.name)}' data-job='{html.escape(r.job)}' "
            f"data-status='{html.escape(r.status)}'{style}>{''.join(cells)}</tr>"
        )
    return (
        "<table class='kf-sweep-table' style='border-collapse:collapse;margin:4px 0'>"
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _counts(rows: list[TrialRow]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status or "Created"] = counts.get(r.status or "Created", 0) + 1
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))


def _best_text(rows: list[TrialRow], metric: str, direction: str) -> str:
    best = best_trial(rows, direction)
    if best is None:
        return "no trial has completed with a value yet"
    params = ", ".join(f"{k}={v}" for k, v in best.parameters.items())
    return f"best {best.name}: {metric} {fmt_value(best.objective)} ({params})"


def sweep_html(
    name: str,
    rows: list[TrialRow],
    metric: str,
    direction: str,
    status: str,
    backend: str = "local",
    charts: bool = True,
) -> str:
    """The static view of a sweep: header, trials table and the overlaid curves."""
    best = best_trial(rows, direction)
    runs = [r.run if r.run is not None else Run(name=r.job) for r in rows]
    for r, run in zip(rows, runs, strict=True):
        run.label = r.name
    curves = charts_html(runs, highlight=best.job if best else None) if charts else ""
    return (
        f"<div class='kf-sweep-static' data-sweep='{html.escape(name)}' "
        f"data-status='{html.escape(status)}'>"
        f"<div><b>{html.escape(name)}</b> · sweep · {html.escape(backend)} · "
        f"{badge_html(status)} · {len(rows)} trials ({html.escape(_counts(rows))})</div>"
        f"<div class='kf-sweep-best'><small>{html.escape(_best_text(rows, metric, direction))}"
        "</small></div>"
        f"{sweep_table_html(rows, metric, direction)}{curves}</div>"
    )


def sweep_text(name: str, rows: list[TrialRow], metric: str, direction: str, status: str) -> str:
    """The plain-text form of the sweep view."""
    best = best_trial(rows, direction)
    params = parameter_names(rows)
    table = text_table(
        ["trial", *params, "status", metric, "took", ""],
        [
            [
                r.name,
                *(str(r.parameters.get(p, "")) for p in params),
                r.status,
                _objective_cell(r),
                fmt_duration(r.duration),
                "best" if best is not None and r is best else "",
            ]
            for r in rows
        ],
    )
    return (
        f"Sweep {name}: {status}, {len(rows)} trials; {_best_text(rows, metric, direction)}\n"
        + table
    )


def sweep_bundle(
    name: str, rows: list[TrialRow], metric: str, direction: str, status: str, backend: str
) -> dict[str, str]:
    """The display of an ended sweep: static HTML and text only."""
    return {
        "text/html": sweep_html(name, rows, metric, direction, status, backend),
        "text/plain": sweep_text(name, rows, metric, direction, status),
    }


def sweep_payload(
    name: str,
    rows: list[TrialRow],
    metric: str,
    direction: str,
    status: str,
    backend: str,
    namespace: str | None = None,
) -> dict[str, Any]:
    """What the lab extension's live sweep view needs: the trials' jobs to follow (it reads
    their curves and statuses itself, over the page's one update socket)."""
    return {
        "version": SWEEP_MIME_VERSION,
        "name": name,
        "backend": backend,
        "namespace": namespace or None,
        "status": status,
        "objective": {"metric": metric, "direction": direction},
        "trials": [
            {
                "name": r.name,
                "job": r.job,
                "parameters": r.parameters,
                "status": r.status or None,
                "objective": r.objective
                if r.objective is not None and math.isfinite(r.objective)
                else None,
            }
            for r in rows
        ],
        "api": "kf-jupyter/api",
    }


def sweep_live_bundle(
    name: str,
    rows: list[TrialRow],
    metric: str,
    direction: str,
    status: str,
    backend: str,
    namespace: str | None = None,
) -> dict[str, Any]:
    """The display of a running sweep: the live MIME payload, and the table so far (no charts)
    for frontends without the lab extension."""
    note = (
        "<div><small>This copy does not update by itself; the final view replaces it when the "
        "cell that follows the sweep ends.</small></div>"
    )
    return {
        SWEEP_MIME_TYPE: sweep_payload(name, rows, metric, direction, status, backend, namespace),
        "text/html": sweep_html(name, rows, metric, direction, status, backend, charts=False)
        + note,
        "text/plain": sweep_text(name, rows, metric, direction, status),
    }
