"""Real-browser tests of the live monitor in a notebook cell (JupyterLab, Debian's Chromium).

While a `%%torchtrain` cell blocks the kernel, the monitor's rank filter and Cancel work (they
talk to the server extension, not to the busy kernel): the filter applies within 1 s, Cancel
stops the job within 2 s (the backend's own record says Cancelled, no rank process is left),
and the cell ends with a short "cancelled" message and a static rendering (no torch
SignalException). A `--no-wait` job's monitor re-attaches after the notebook is reopened, and
Cancel is disabled once a job has ended. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, open_notebook, write_notebook
from tests.test_local_support import job_processes

pytestmark = pytest.mark.slow

LOOP = (
    "import os, time\n"
    "rank = os.environ['RANK']\n"
    "for i in range(100000):\n"
    "    print(f'rank {rank} line {i}', flush=True)\n"
    "    time.sleep(0.1)\n"
)
CELLS = [
    "%load_ext kf_jupyter",
    "%%torchtrain -n 1 -p 2 --name live-cancel\n" + LOOP,
    "%%torchtrain -n 1 -p 2 --name live-reattach --no-wait\n" + LOOP,
    "%%torchtrain -n 1 -p 1 --name live-short --no-wait\nprint('short job done', flush=True)",
]


def _client(lab: dict) -> Any:
    from kf_jupyter import LocalBackendConfig, TrainerClient

    return TrainerClient(LocalBackendConfig(state_dir=lab["state"]))


def _wait(cond: Any, timeout: float, what: str) -> float:
    """Poll `cond` until true; return the seconds it took (fails after `timeout`)."""
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - start


def _run_cell(page: Any, index: int) -> None:
    """Run one cell (Ctrl+Enter in command mode); press again if the first key got lost."""
    from playwright.sync_api import expect

    cell = page.locator(".jp-Notebook .jp-CodeCell").nth(index)
    prompt = cell.locator(".jp-InputPrompt")
    for attempt in range(3):
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Escape")
        page.keyboard.press("Control+Enter")
        try:
            expect(prompt).not_to_have_text("[ ]:", timeout=10_000)
            return
        except AssertionError:
            if attempt == 2:
                raise


def test_monitor_filter_and_cancel_work_while_the_cell_blocks(lab: dict) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    client = _client(lab)
    write_notebook(lab, "live.ipynb", CELLS)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            open_notebook(page, lab, "live.ipynb")
            _run_cell(page, 0)
            cells = page.locator(".jp-Notebook .jp-CodeCell")
            expect(cells.nth(0).locator(".jp-InputPrompt")).to_have_text("[1]:", timeout=60_000)
            _run_cell(page, 1)
            cell = cells.nth(1)
            monitor = cell.locator(".kf-LiveMonitor")
            expect(monitor).to_be_visible(timeout=60_000)
            log = monitor.locator(".kf-live-log")
            for rank in ("0", "1"):
                expect(log.locator(".kf-log-line", has_text=f"rank {rank} line")).not_to_have_count(
                    0, timeout=120_000
                )
            # the cell is still running: the kernel is busy with it
            expect(cell.locator(".jp-InputPrompt")).to_have_text("[*]:")
            assert client.get_job("live-cancel").status == "Running"
            # ranks keep their colours (one palette shared with the static output and panel)
            colours = {
                src: log.locator(
                    f".kf-log-line[data-source='{src}'] .kf-log-source"
                ).first.evaluate("e => e.style.color")
                for src in ("rank-0", "rank-1")
            }
            assert colours["rank-0"] != colours["rank-1"], colours

            # rank filter: only rank-1 lines within 1 s, while the cell blocks
            monitor.locator(".kf-live-filter").select_option("rank-1")
            start = time.monotonic()
            expect(log.locator(".kf-log-line[data-source='rank-0']")).to_have_count(0, timeout=1000)
            expect(log.locator(".kf-log-line[data-source='rank-1']")).not_to_have_count(
                0, timeout=1000
            )
            filter_s = time.monotonic() - start
            assert filter_s < 1.0, filter_s
            expect(cell.locator(".jp-InputPrompt")).to_have_text("[*]:")
            page.screenshot(path=str(ARTIFACTS / "live-monitor-filtered.png"))

            # Cancel: the job stops within 2 s, by the backend's own record
            cancel = monitor.locator(".kf-live-cancel")
            expect(cancel).to_be_enabled(timeout=10_000)
            assert job_processes("live-cancel"), "the job's processes should be running"
            cancel.click()
            start = time.monotonic()
            _wait(lambda: client.get_job("live-cancel").reason == "Cancelled", 2.0, "cancelled")
            cancel_s = time.monotonic() - start
            _wait(lambda: not job_processes("live-cancel"), 2.0 - cancel_s, "rank processes gone")
            gone_s = time.monotonic() - start
            job = client.get_job("live-cancel")
            assert (job.status, job.reason) == ("Failed", "Cancelled")

            # the cell ends, with a short message and the static rendering
            expect(cell.locator(".jp-InputPrompt")).to_have_text("[2]:", timeout=60_000)
            static = cell.locator(".kf-monitor-static")
            expect(static).to_have_attribute("data-status", "Cancelled", timeout=30_000)
            expect(cell.locator(".kf-LiveMonitor")).to_have_count(0)
            error = cell.locator(
                ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
            )
            expect(error).to_contain_text("live-cancel was cancelled")
            text = cell.locator(".jp-OutputArea").inner_text()
            assert "SignalException" not in text and "Traceback" not in text, text
            assert len(error.inner_text()) < 200, error.inner_text()
            page.screenshot(path=str(ARTIFACTS / "live-monitor-cancelled.png"))
            print(
                f"filter {filter_s:.3f} s, cancel {cancel_s:.3f} s, processes gone {gone_s:.3f} s"
            )
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "live-failure.png"))
            raise
        finally:
            browser.close()


def test_reopened_notebook_reattaches_and_ended_jobs_cannot_be_cancelled(lab: dict) -> None:
    from playwright.sync_api import expect, sync_playwright

    client = _client(lab)
    write_notebook(lab, "reattach.ipynb", CELLS)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            open_notebook(page, lab, "reattach.ipynb")
            cells = page.locator(".jp-Notebook .jp-CodeCell")
            _run_cell(page, 0)
            expect(cells.nth(0).locator(".jp-InputPrompt")).to_have_text("[1]:", timeout=60_000)
            _run_cell(page, 2)
            _run_cell(page, 3)
            reattach = cells.nth(2).locator(".kf-LiveMonitor")
            expect(reattach).to_be_visible(timeout=60_000)
            expect(reattach.locator(".kf-log-line", has_text="rank 1 line")).not_to_have_count(
                0, timeout=120_000
            )
            # a short job ends while its monitor shows: Complete, and Cancel is disabled
            short = cells.nth(3).locator(".kf-LiveMonitor")
            expect(short.locator(".kf-live-status")).to_have_text("Complete", timeout=120_000)
            expect(short.locator(".kf-live-cancel")).to_be_disabled()
            expect(short.locator(".kf-log-line", has_text="short job done")).to_have_count(1)
            # save, then reopen the notebook: the running job's monitor re-attaches by name
            page.keyboard.press("Control+s")
            expect(page.locator(".jp-mod-dirty")).to_have_count(0, timeout=30_000)
            page.reload()
            open_notebook(page, lab, "reattach.ipynb")
            reattach = page.locator(".jp-Notebook .jp-CodeCell").nth(2).locator(".kf-LiveMonitor")
            expect(reattach.locator(".kf-live-status")).to_have_text("Running", timeout=60_000)
            expect(reattach.locator(".kf-log-line", has_text="rank 0 line")).not_to_have_count(
                0, timeout=60_000
            )
            expect(reattach.locator(".kf-live-cancel")).to_be_enabled(timeout=10_000)
            reattach.locator(".kf-live-cancel").click()
            expect(reattach.locator(".kf-live-status")).to_have_text("Cancelled", timeout=10_000)
            expect(reattach.locator(".kf-live-cancel")).to_be_disabled()
            assert client.get_job("live-reattach").reason == "Cancelled"
            _wait(lambda: not job_processes("live-reattach"), 10.0, "rank processes gone")
            # the completed job still says Complete after the reload (never "Cancelled")
            short = page.locator(".jp-Notebook .jp-CodeCell").nth(3).locator(".kf-LiveMonitor")
            expect(short.locator(".kf-live-status")).to_have_text("Complete", timeout=30_000)
            expect(short.locator(".kf-live-cancel")).to_be_disabled()
            assert client.get_job("live-short").status == "Complete"
            page.screenshot(path=str(ARTIFACTS / "live-monitor-reattached.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "live-failure-reattach.png"))
            raise
        finally:
            browser.close()
