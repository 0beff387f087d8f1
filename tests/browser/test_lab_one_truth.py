"""Real-browser walk through issue 22's "one truth in every view" claims in the views the light-only
tests do not open: JupyterLab in the dark theme and Jupyter Notebook 7 (same server), one test
per front end that reuses its jobs.

In each: while the job list loads the sidebar says so and its filter placeholder fits; a
cancelled job reads Cancelled (not a red Failed, no signal number, "1 node × 2 processes", no raw
ISO time) in the sidebar and the job panel, which offers no Suspend; a job that ended while no
page showed it comes back finished; the live monitor's header is one row; progress is the same
number in the monitor, the sidebar and the panel, without an ETA while suspended or once ended;
the live monitor's Suspend/Resume work; after Suspend then Resume (the program starts again and
its log is replayed) a ticked Follow means the view is at the end and new lines keep it there,
and a scroll up unticks it. Every text at 4.5:1 and no axe-core violation in the views opened.
Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import (
    ARTIFACTS,
    assert_readable,
    browser_page,
    lab_theme,
    open_notebook,
    run_cells,
    run_first_cell_in_notebook7,
    write_notebook,
)
from tests.browser.test_lab_views import (
    VIEWS,
    answer,
    assert_one_row,
    expect_cancelled_row,
    ticker,
)

pytestmark = pytest.mark.slow

#: the front ends walked through (JupyterLab Light has its own tests: test_lab_views,
#: test_lab_progress)
FRONT_ENDS = ["JupyterLab Dark", "notebook7"]
ETA = "40% \u00b7 ETA 3m 05s"
SHAPE = "1 node \u00d7 2 processes"
GAP = "e => e.scrollHeight - e.clientHeight - e.scrollTop"


def progress_then_tick(gate: str) -> None:
    """Reports 40% with an ETA (the official SDK's call), prints 300 lines (a log taller than
    the view), then a tick every 0.3 s until `gate` exists. Resumed, it starts from the top."""
    import os
    import time

    from kubeflow.trainer import update_trainjob_status

    # a log marker says otherwise: the views still show the record's 40% (one source)
    print('##kf-jupyter:report {"step": 14, "progress": 0.25, "metrics": {}}', flush=True)
    update_trainjob_status(
        progress_percent=40, estimated_remaining_seconds=185, metrics={"loss": "0.5"}
    )
    for i in range(300):
        print(f"line {i}", flush=True)
    i = 0
    while not os.path.exists(gate):
        print(f"follow tick {i}", flush=True)
        i += 1
        time.sleep(0.3)


@pytest.fixture(scope="module")
def ended(lab: dict) -> dict[str, str]:
    """Two jobs that ended before any page showed them: one cancelled while it ran (1 node × 2
    processes), one complete with a result."""
    from kf_jupyter import LocalBackendConfig, MPITrainer, TrainerClient
    from kf_jupyter.widgets.monitor import cancel_if_running

    client = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    cancelled = client.train(MPITrainer(func=ticker, num_proc_per_node=2))
    complete = client.train(MPITrainer(func=answer, num_proc_per_node=1))
    deadline = time.monotonic() + 180
    while not any(r.line.startswith("tick") for r in client.iter_log_records(cancelled)):
        assert time.monotonic() < deadline, f"job {cancelled} printed no tick within 180 s"
        time.sleep(0.2)
    done, job = cancel_if_running(client, cancelled)
    assert done and job is not None and (job.status, job.reason) == ("Failed", "Cancelled")
    assert client.wait_for_job_status(complete, timeout=300).status == "Complete"
    return {"cancelled": cancelled, "complete": complete}


def _open(page: Any, lab: dict, front: str, notebook: str) -> None:
    """Open `notebook` in the front end and its Kubeflow Trainer sidebar (Notebook 7: View >
    Left Sidebar)."""
    from playwright.sync_api import expect

    if front == "notebook7":
        page.goto(f"{lab['url']}/notebooks/{notebook}?token={lab['token']}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="View").click()
        page.locator(".lm-Menu-itemLabel", has_text="Left Sidebar").click()
        page.locator(".lm-Menu-itemLabel", has_text="Kubeflow Trainer").click()
    else:
        open_notebook(page, lab, notebook, front)
        page.locator(".jp-SideBar [data-id='kf-jupyter-sidebar']").click(timeout=90_000)
    expect(page.locator("#kf-jupyter-sidebar")).to_be_visible(timeout=30_000)


def _panel(page: Any, name: str) -> Any:
    """The job panel of local job `name` (the main area in JupyterLab, the right side panel in
    Notebook 7)."""
    return page.locator(f"#kf-jupyter-job-local--{name} .kf-JobPanel")


def _at_end(log: Any, what: str) -> None:
    """The log view is scrolled to its end (within 4 px), waiting up to 10 s for a scroll."""
    deadline = time.monotonic() + 10
    while log.evaluate(GAP) >= 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log.evaluate(GAP) < 4, f"{what}: Follow is ticked but the view is not at the end"


@pytest.mark.parametrize("front", FRONT_ENDS)
def test_one_truth_in_dark_lab_and_notebook7(
    lab: dict, ended: dict[str, str], front: str, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    from kf_jupyter import JAXTrainer, LocalBackendConfig, TrainerClient

    slug = "nb7" if front == "notebook7" else "dark"
    theme = "JupyterLab Light" if front == "notebook7" else front
    client: Any = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    gate = tmp_path / "gate"
    name = client.train(
        JAXTrainer(
            func=progress_then_tick, func_args={"gate": str(gate)}, initialize_distributed=False
        )
    )
    payloads = [
        {"version": 1, "name": job, "backend": "local", "runtime": ""}
        for job in (name, ended["complete"])
    ]
    notebook = f"truth-{slug}.ipynb"
    write_notebook(
        lab,
        notebook,
        [
            "from IPython.display import display\n"
            + "".join(
                f"display({{'application/vnd.kf-jupyter.job+json': {p!r}}}, raw=True)\n"
                for p in payloads
            )
        ],
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with lab_theme(lab, theme), browser_page(f"truth-{slug}-failure.png") as page:
            # 1. the sidebar while the job list loads: it says so; the placeholder fits
            held: list[Any] = []
            jobs_list = re.compile(r"/kf-jupyter/api/jobs\?")
            page.route(jobs_list, lambda route: held.append(route))
            _open(page, lab, front, notebook)
            sidebar = page.locator("#kf-jupyter-sidebar")
            expect(sidebar.locator(".kf-empty", has_text="jobs")).to_have_text(
                "Loading jobs…", timeout=30_000
            )
            expect(sidebar.locator("text=No jobs yet")).to_have_count(0)
            fits = sidebar.locator(".kf-filter").evaluate(
                "e => { const c = document.createElement('canvas').getContext('2d');"
                " c.font = getComputedStyle(e).font;"
                " return c.measureText(e.placeholder).width <= e.clientWidth; }"
            )
            assert fits, "the sidebar's filter placeholder is cut off"
            page.screenshot(path=str(ARTIFACTS / f"truth-{slug}-loading.png"))
            for route in held:
                route.continue_()
            page.unroute(jobs_list)

            # 2. the cancelled job in the sidebar: Cancelled in words, not red, shape in words
            row = expect_cancelled_row(page, sidebar, ended["cancelled"], SHAPE)

            # 3. the monitors: the job that ended while away comes back finished
            monitor = page.locator(f".kf-LiveMonitor[data-job='{name}']")
            if front == "notebook7":
                run_first_cell_in_notebook7(page, monitor)
            else:
                run_cells(page, 1)
            away = page.locator(f".kf-LiveMonitor[data-job='{ended['complete']}']")
            expect(away.locator(".kf-live-status")).to_have_text("Complete", timeout=30_000)
            expect(away.locator(".kf-log-line", has_text="done training")).to_have_count(2)
            expect(away.locator(".kf-live-result")).to_contain_text("0.25", timeout=30_000)
            expect(away.locator(".kf-log-state")).to_have_text("job ended; log complete")
            for control in (".kf-live-cancel", ".kf-live-suspend", ".kf-live-startup"):
                expect(away.locator(control)).to_be_hidden()

            # 4. progress: one number in the monitor and the sidebar; a one-row header
            label = monitor.locator(".kf-progress-label")
            expect(label).to_have_text(ETA, timeout=90_000)
            progress = sidebar.locator("li.kf-job", has_text=name).locator(".kf-job-progress")
            expect(progress).to_have_text(ETA, timeout=60_000)
            assert_one_row(monitor.locator(".kf-live-header"), f"{front}, running")
            page.screenshot(path=str(ARTIFACTS / f"truth-{slug}-running.png"))
            assert_readable(page, VIEWS, f"{front}: running", min_checked=50)

            # 5. the monitor's Suspend: no ETA anywhere while suspended; Resume
            log = monitor.locator(".kf-live-log")
            expect(log.locator(".kf-log-line", has_text="follow tick")).not_to_have_count(
                0, timeout=60_000
            )
            suspend = monitor.locator(".kf-live-suspend")
            expect(suspend).to_have_text("Suspend", timeout=30_000)
            suspend.click()
            expect(monitor.locator(".kf-live-status")).to_have_text("Suspended", timeout=60_000)
            expect(label).to_have_text("40%")
            expect(progress).to_have_text("40%", timeout=30_000)
            expect(suspend).to_have_text("Resume", timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / f"truth-{slug}-suspended.png"))
            assert_readable(page, VIEWS, f"{front}: suspended", min_checked=50)
            suspend.click()
            expect(monitor.locator(".kf-live-status")).to_have_text("Running", timeout=60_000)

            # 6. Follow after Suspend/Resume: the log is replayed from the restarted program;
            # ticked means at the end, and new lines keep the view there
            follow = monitor.locator(".kf-live-follow")
            # (the first run's lines stay, below them the resumed run's: each line twice)
            expect(log.locator(".kf-log-line", has_text="line 299")).to_have_count(
                2, timeout=120_000
            )
            expect(
                log.locator(".kf-log-line", has_text=re.compile(r"follow tick 3$"))
            ).to_have_count(2, timeout=60_000)
            assert log.evaluate("e => e.scrollHeight > e.clientHeight + 100")
            expect(follow).to_be_checked()
            _at_end(log, f"{front}, after resume")
            newest = log.locator(".kf-log-line").last.inner_text()
            expect(log.locator(".kf-log-line").last).not_to_have_text(newest, timeout=10_000)
            _at_end(log, f"{front}, a new line after resume")
            # a scroll up by the user unticks it; new lines leave the view where it is
            log.hover()
            page.mouse.wheel(0, -3000)
            expect(follow).not_to_be_checked(timeout=5_000)
            top = log.evaluate("e => e.scrollTop")
            newest = log.locator(".kf-log-line").last.inner_text()
            expect(log.locator(".kf-log-line").last).not_to_have_text(newest, timeout=10_000)
            assert log.evaluate(GAP) >= 4 and abs(log.evaluate("e => e.scrollTop") - top) < 4
            follow.check()
            _at_end(log, f"{front}, Follow ticked again")
            newest = log.locator(".kf-log-line").last.inner_text()
            expect(log.locator(".kf-log-line").last).not_to_have_text(newest, timeout=10_000)
            _at_end(log, f"{front}, a new line after Follow ticked again")
            expect(follow).to_be_checked()

            # 7. the job panel says the same number; once ended no ETA anywhere, no Suspend
            sidebar.locator("li.kf-job", has_text=name).locator(".kf-job-name").click()
            panel = _panel(page, name)
            expect(panel).to_be_visible(timeout=30_000)
            header = panel.locator(".kf-JobPanel-header")
            expect(header.locator("dd", has_text=ETA)).to_have_count(1, timeout=30_000)
            expect(panel.locator(".kf-progress-label")).to_have_text(ETA, timeout=30_000)
            expect(label).to_have_text(ETA)
            expect(progress).to_have_text(ETA)
            page.wait_for_timeout(1000)  # events rendered
            page.screenshot(path=str(ARTIFACTS / f"truth-{slug}-panel.png"))
            assert_readable(page, VIEWS, f"{front}: panel of a running job", min_checked=50)
            gate.write_text("")
            expect(header.locator(".kf-badge")).to_have_text("Complete", timeout=120_000)
            expect(monitor.locator(".kf-live-status")).to_have_text("Complete", timeout=30_000)
            expect(header.locator("button.kf-suspend")).to_be_hidden()
            expect(monitor.locator(".kf-live-suspend")).to_be_hidden()
            for where in (header.locator("dd", has_text="%"), panel.locator(".kf-progress-label")):
                expect(where).to_have_text("40%", timeout=30_000)
            expect(label).to_have_text("40%", timeout=30_000)
            expect(progress).to_have_text("40%", timeout=30_000)

            # 8. the cancelled job's panel: Cancelled in words, no Suspend
            row.locator(".kf-job-name").click()
            cpanel = _panel(page, ended["cancelled"])
            expect(cpanel).to_be_visible(timeout=30_000)
            cheader = cpanel.locator(".kf-JobPanel-header")
            expect(cheader.locator(".kf-badge")).to_have_text("Cancelled", timeout=30_000)
            text = cheader.inner_text()
            assert "signal" not in text and "Failed" not in text, text
            assert SHAPE in text, text
            assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:", text), text
            expect(cheader.locator("button.kf-suspend")).to_be_hidden()
            page.wait_for_timeout(1000)  # events rendered
            page.screenshot(path=str(ARTIFACTS / f"truth-{slug}-cancelled.png"))
            assert_readable(page, VIEWS, f"{front}: panel of a cancelled job", min_checked=20)
    finally:
        gate.write_text("")
        client.delete_job(name)
