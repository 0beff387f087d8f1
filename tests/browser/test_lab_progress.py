"""Real-browser test of issue 14 in the lab extension: a job's progress and ETA (posted with the
official SDK's `update_trainjob_status` to the job's local status endpoint) in the sidebar and
the job panel, and the panel's Suspend / Resume button stopping and restarting the job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS  # `lab`: a fixture there

pytestmark = pytest.mark.slow


def progress_then_wait(gate):
    import os
    import time

    from kubeflow.trainer import update_trainjob_status

    update_trainjob_status(
        progress_percent=40, estimated_remaining_seconds=185, metrics={"loss": "0.5"}
    )
    while not os.path.exists(gate):
        time.sleep(0.1)


def test_progress_in_the_sidebar_and_panel_and_suspend_resume(
    lab: dict,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect, sync_playwright

    from kf_jupyter import JAXTrainer, LocalBackendConfig, TrainerClient
    from kf_jupyter.types import SUSPENDED

    client: Any = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    gate = tmp_path / "gate"
    trainer = JAXTrainer(
        func=progress_then_wait, func_args={"gate": str(gate)}, initialize_distributed=False
    )
    name = client.train(trainer)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{lab['url']}/lab?token={lab['token']}")
            page.locator(".jp-SideBar [data-id='kf-jupyter-sidebar']").click(timeout=90_000)
            sidebar = page.locator("#kf-jupyter-sidebar")
            row = sidebar.locator("li.kf-job", has_text=name)
            expect(row.locator(".kf-job-progress")).to_have_text(
                "40% \u00b7 ETA 3m 05s", timeout=60_000
            )
            row.locator(".kf-job-name").click()
            panel = page.locator(".kf-JobPanel-header")
            expect(panel.locator("dd", has_text="40% \u00b7 ETA 3m 05s")).to_have_count(
                1, timeout=30_000
            )
            button = panel.locator("button.kf-suspend")
            expect(button).to_have_text("Suspend", timeout=30_000)
            expect(button).to_be_enabled()
            button.click()
            expect(panel.locator(".kf-badge")).to_have_text("Suspended", timeout=60_000)
            assert client.get_job(name).status == SUSPENDED
            expect(button).to_have_text("Resume", timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "panel-suspended.png"))
            button.click()
            expect(panel.locator(".kf-badge")).not_to_have_text("Suspended", timeout=60_000)
            gate.write_text("")
            expect(panel.locator(".kf-badge")).to_have_text("Complete", timeout=120_000)
            expect(button).to_be_disabled()
            page.screenshot(path=str(ARTIFACTS / "panel-progress.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure-progress.png"))
            raise
        finally:
            browser.close()
