"""The sweep view (issue 25): the best trial is recomputed as trials finish, never a running or
failed one; failed trials show as failed; the static view carries every trial's curve."""

from __future__ import annotations

import re

from kf_jupyter.widgets.compare import Run
from kf_jupyter.widgets.sweep import (
    SWEEP_MIME_TYPE,
    TrialRow,
    best_trial,
    objective_of,
    sweep_bundle,
    sweep_live_bundle,
)
from tests.test_compare import _svgs


def _row(name: str, status: str, losses: list[float], lr: str) -> TrialRow:
    run = Run(f"job-{name}", status, {"loss": [(float(i), v) for i, v in enumerate(losses)]})
    return TrialRow(
        name=name,
        job=f"job-{name}",
        parameters={"lr": lr},
        status=status,
        objective=objective_of(run, "loss", "minimize"),
        run=run,
    )


def _best_row(html_text: str) -> list[str]:
    return re.findall(r"<tr class='kf-trial kf-best' data-trial='([^']+)'", html_text)


def test_best_is_recomputed_as_trials_finish_and_never_a_running_or_failed_one():
    rows = [
        _row("t1", "Running", [0.9, 0.1], "0.1"),  # lowest so far, but still running
        _row("t2", "Complete", [0.8, 0.5], "0.01"),
        _row("t3", "Failed", [0.05], "0.5"),  # lowest of all, but failed
    ]
    assert best_trial(rows, "minimize").name == "t2"
    first = sweep_bundle("s", rows, "loss", "minimize", "Running", "local")
    assert _best_row(first["text/html"]) == ["t2"]
    assert "best t2: loss 0.5 (lr=0.01)" in first["text/plain"]
    # the failed trial says so, in its status and its objective cell
    t3 = re.search(r"<tr class='kf-trial' data-trial='t3'.*?</tr>", first["text/html"]).group(0)
    assert "Failed" in t3 and "0.05 (failed)" in t3
    # t1 completes: it is the best now, and the view says so
    rows[0].status = "Complete"
    again = sweep_bundle("s", rows, "loss", "minimize", "Complete", "local")
    assert _best_row(again["text/html"]) == ["t1"]
    assert "best t1: loss 0.1 (lr=0.1)" in again["text/plain"]
    # maximizing reads each curve's highest value and picks the highest
    for row in rows:
        row.objective = objective_of(row.run, "loss", "maximize")
    assert (rows[0].objective, rows[1].objective) == (0.9, 0.8)
    assert best_trial(rows, "maximize").name == "t1"


def test_no_best_until_a_trial_completes_with_a_value():
    rows = [_row("t1", "Running", [0.3], "1"), _row("t2", "Complete", [], "2")]
    assert best_trial(rows, "minimize") is None
    text = sweep_bundle("s", rows, "loss", "minimize", "Running", "local")["text/plain"]
    assert "no trial has completed with a value yet" in text


def test_static_view_overlays_every_trial_and_the_best_is_drawn_thicker():
    rows = [_row("t1", "Complete", [0.9, 0.4], "0.1"), _row("t2", "Complete", [0.7, 0.2], "1")]
    html_text = sweep_bundle("sweep-1", rows, "loss", "minimize", "Complete", "local")["text/html"]
    svg = _svgs(html_text)["loss"]
    found = re.findall(r"stroke-width='([\d.]+)' data-run='([^']+)'", svg)
    widths = {run: width for width, run in found}
    assert widths == {"job-t1": "1.5", "job-t2": "3"}
    assert "<script" not in html_text and "kf-sweep-static" in html_text


def test_live_bundle_lists_the_trials_jobs_for_the_lab_and_a_table_for_others():
    rows = [_row("t1", "Running", [0.9], "0.1")]
    bundle = sweep_live_bundle("sweep-1", rows, "loss", "minimize", "Running", "kubernetes", "ns")
    payload = bundle[SWEEP_MIME_TYPE]
    assert payload["trials"] == [
        {
            "name": "t1",
            "job": "job-t1",
            "parameters": {"lr": "0.1"},
            "status": "Running",
            "objective": 0.9,
        }
    ]
    assert payload["objective"] == {"metric": "loss", "direction": "minimize"}
    assert payload["namespace"] == "ns" and payload["version"] == 1
    assert "kf-sweep-table" in bundle["text/html"] and "<img" not in bundle["text/html"]
