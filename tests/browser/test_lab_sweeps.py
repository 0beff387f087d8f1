"""Real-browser tests of the sweep view, the compare views and the lab's compare panel (issue
25), one JupyterLab for the module, Debian's Chromium, light and dark theme.

The trials are real local jobs in the lab's job store: two that complete (losses 1/(s+1) and
8/(s+1)), one that fails after reporting, and one that keeps running (lowest loss of all) until
the test lets it finish. What a user checks: the best trial is the best COMPLETED one, and
changes when the running one completes; the failed one says Failed; every trial's curve is on
the chart; the page follows all trials on one update socket; the finished (static) views show
in a notebook opened without running anything; the sidebar compares selected jobs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import (
    ARTIFACTS,
    THEMES,
    assert_readable,
    browser_page,
    lab_theme,
    open_notebook,
    theme_slug,
    write_notebook,
)
from tests.browser.test_lab_live import CELLS_CSS, DONE, _run_cell

pytestmark = pytest.mark.slow

VIEWS = ".kf-LiveSweep, .kf-sweep-static, .kf-compare-static, .kf-ComparePanel, #kf-jupyter-sidebar"


def reporting(scale: float, fail: bool) -> None:
    """Reports four losses scale/1 .. scale/4; raises at the end when `fail`."""
    import kf_jupyter

    for s in range(4):
        kf_jupyter.report(step=s, loss=scale / (s + 1))
    if fail:
        raise RuntimeError("trial diverged")


def waiting(flag: str) -> None:
    """Reports a falling loss (from 0.05) every half second until the file `flag` exists."""
    import os
    import time

    import kf_jupyter

    s = 0
    while not os.path.exists(flag) and s < 1200:
        kf_jupyter.report(step=s, loss=0.05 / (s + 1))
        s += 1
        time.sleep(0.5)


@pytest.fixture(scope="module")
def trials(lab: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Four real local jobs: t1 and t2 complete, t3 failed, t4 running until `flag` exists."""
    from kf_jupyter import LocalBackendConfig, TorchTrainer, TrainerClient

    client = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    flag = tmp_path_factory.mktemp("flag") / "finish"
    jobs = {
        "t1": client.train(TorchTrainer(func=reporting, func_args={"scale": 1.0, "fail": False})),
        "t2": client.train(TorchTrainer(func=reporting, func_args={"scale": 8.0, "fail": False})),
        "t3": client.train(TorchTrainer(func=reporting, func_args={"scale": 0.5, "fail": True})),
    }
    for name in jobs.values():
        client.wait_for_job_status(name, {"Complete", "Failed"}, timeout=300)
    assert [client.get_job(n).status for n in jobs.values()] == ["Complete", "Complete", "Failed"]
    jobs["t4"] = client.train(TorchTrainer(func=waiting, func_args={"flag": str(flag)}))
    yield {"client": client, "jobs": jobs, "flag": flag}
    flag.touch()
    for name in jobs.values():
        client.delete_job(name)


def _payload(jobs: dict[str, str]) -> dict[str, Any]:
    params = {"t1": "0.1", "t2": "0.01", "t3": "0.5", "t4": "0.05"}
    return {
        "version": 1,
        "name": "sweep-browser",
        "backend": "local",
        "namespace": None,
        "status": "Running",
        "objective": {"metric": "loss", "direction": "minimize"},
        "trials": [
            {"name": t, "job": job, "parameters": {"lr": params[t]}} for t, job in jobs.items()
        ],
    }


def _static_outputs(client: Any, jobs: dict[str, str]) -> list[dict]:
    """The kernel's finished views of the three ended trials, as saved notebook outputs."""
    from kf_jupyter.widgets.compare import compare_bundle, read_run
    from kf_jupyter.widgets.sweep import TrialRow, objective_of, sweep_bundle

    rows = []
    for t in ("t1", "t2", "t3"):
        run = read_run(client, jobs[t])
        rows.append(
            TrialRow(
                name=t,
                job=jobs[t],
                parameters={"lr": t},
                status=run.status,
                objective=objective_of(run, "loss", "minimize"),
                duration=run.duration,
                run=run,
            )
        )
    sweep = sweep_bundle("sweep-static", rows, "loss", "minimize", "Complete", "local")
    compare = compare_bundle([r.run for r in rows if r.run is not None])
    return [
        {"output_type": "display_data", "data": sweep, "metadata": {}},
        {"output_type": "display_data", "data": compare, "metadata": {}},
    ]


def _saved_notebook(lab: dict, name: str, outputs: list[dict]) -> None:
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "saved",
                "metadata": {},
                "outputs": outputs,
                "source": "%kf_compare ...",
            }
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    Path(lab["notebooks"] / name).write_text(json.dumps(nb))


def _check_views(page: Any, slug: str, what: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"sweeps-{slug}-{what}.png"))
    assert_readable(page, VIEWS, f"{what}, {slug}", min_checked=20)


@pytest.mark.parametrize("theme", THEMES)
def test_sweep_and_compare_views_in_the_browser(lab: dict, trials: dict, theme: str) -> None:
    from playwright.sync_api import expect

    jobs, client = trials["jobs"], trials["client"]
    slug = theme_slug(theme)
    light = slug == "light"
    write_notebook(
        lab,
        f"sweep-{slug}.ipynb",
        [
            "from IPython.display import display\n"
            f"display({{'application/vnd.kf-jupyter.sweep+json': {_payload(jobs)!r}}}, raw=True)"
        ],
    )
    _saved_notebook(lab, f"saved-{slug}.ipynb", _static_outputs(client, jobs))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with lab_theme(lab, theme), browser_page(f"sweeps-{slug}-failure.png", height=1100) as page:
            sockets: list[str] = []
            page.on("websocket", lambda ws: sockets.append(ws.url))
            # -- the finished views, from a saved notebook: nothing runs --------------------
            open_notebook(page, lab, f"saved-{slug}.ipynb", theme)
            static = page.locator(".kf-sweep-static")
            expect(static).to_have_count(1, timeout=30_000)
            # (an untrusted notebook's sanitizer drops data-* attributes: read the text)
            expect(static.locator("tr.kf-best td").first).to_have_text("t1 ★ best")
            failed = static.locator("tr.kf-trial", has_text="t3")
            expect(failed.locator(".kf-objective")).to_have_text("0.125 (failed)")
            expect(failed).to_contain_text("Failed")
            # the charts are images the sanitizer kept, and they decode
            for view in (".kf-sweep-static", ".kf-compare-static"):
                img = page.locator(f"{view} img.kf-compare-img")
                expect(img).to_have_count(1)
                assert img.evaluate("i => i.complete && i.naturalWidth") == 480
            rows = page.locator(".kf-compare-static tr.kf-compare-row")
            expect(rows).to_have_count(3)
            _check_views(page, slug, "static")

            # -- the live sweep view ---------------------------------------------------------
            open_notebook(page, lab, f"sweep-{slug}.ipynb")
            _run_cell(page, 0)
            cell = page.locator(CELLS_CSS).nth(0)
            expect(cell.locator(".jp-InputPrompt")).to_have_text(DONE, timeout=60_000)
            view = cell.locator(".kf-LiveSweep")
            expect(view.locator("tr.kf-trial")).to_have_count(4, timeout=30_000)
            t4 = view.locator("tr[data-trial='t4']")
            expect(t4).to_have_attribute("data-status", "Running", timeout=60_000)
            # t4 has the lowest loss but runs: the best is the best completed trial
            expect(view.locator("tr.kf-best")).to_have_attribute("data-trial", "t1")
            expect(view.locator(".kf-sweep-best")).to_contain_text("best t1: loss 0.25")
            t3 = view.locator("tr[data-trial='t3']")
            expect(t3).to_have_attribute("data-status", "Failed")
            expect(t3.locator(".kf-objective")).to_contain_text("(failed)")
            chart = view.locator(".kf-overlay-chart[data-metric='loss']")
            for job in jobs.values():
                expect(chart.locator(f"[data-run='{job}']")).to_have_count(1, timeout=30_000)
            expect(chart.locator(".kf-overlay-best")).to_have_attribute("data-run", jobs["t1"])
            page.wait_for_timeout(1000)
            _check_views(page, slug, "live")
            # t4 completes: the view says so and makes it the best
            trials["flag"].touch()
            expect(t4).to_have_attribute("data-status", "Complete", timeout=120_000)
            expect(view.locator("tr.kf-best")).to_have_attribute("data-trial", "t4")
            expect(chart.locator(".kf-overlay-best")).to_have_attribute("data-run", jobs["t4"])
            streams = [u for u in sockets if "/kf-jupyter/api/stream" in u]
            assert len(streams) == 1, sockets  # eight subscriptions, one connection

            # -- the sidebar's Compare -------------------------------------------------------
            page.locator(".jp-SideBar [data-id='kf-jupyter-sidebar']").click()
            sidebar = page.locator("#kf-jupyter-sidebar")
            button = sidebar.locator(".kf-compare-button")
            expect(button).to_be_disabled(timeout=30_000)
            for t in ("t1", "t2"):
                sidebar.get_by_label(f"Select job {jobs[t]} for comparison").check(timeout=60_000)
            expect(button).to_have_text("Compare (2)")
            button.click()
            panel = page.locator(".kf-ComparePanel")
            expect(panel.locator("tr.kf-compare-row")).to_have_count(2, timeout=30_000)
            pchart = panel.locator(".kf-overlay-chart[data-metric='loss']")
            for t in ("t1", "t2"):
                expect(pchart.locator(f"path[data-run='{jobs[t]}']")).to_have_count(
                    1, timeout=30_000
                )
            expect(panel.locator(f"tr[data-job='{jobs['t2']}'] td").nth(3)).to_have_text("2")
            page.wait_for_timeout(1000)
            _check_views(page, slug, "compare")
    finally:
        if light:  # the light run let t4 finish: the dark run starts it again for its live check
            _restart_t4(trials)


def _restart_t4(trials: dict) -> None:
    from kf_jupyter import TorchTrainer

    client, jobs = trials["client"], trials["jobs"]
    trials["flag"].unlink(missing_ok=True)
    client.delete_job(jobs["t4"])
    jobs["t4"] = client.train(TorchTrainer(func=waiting, func_args={"flag": str(trials["flag"])}))
    deadline = time.monotonic() + 60
    while client.get_job(jobs["t4"]).status != "Running" and time.monotonic() < deadline:
        time.sleep(0.5)
