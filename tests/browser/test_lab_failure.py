"""The lab job panel of a failed job: the root cause first, only readable log lines (Chromium)."""

from __future__ import annotations

import pytest

from .conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.slow


def rank_one_fails_after_a_bar():
    import sys
    import time

    import torch.distributed as dist

    import kf_jupyter

    dist.init_process_group("gloo")
    for i in range(4):
        sys.stderr.write(f"\r{i * 33:3d}%|{'#' * i}{' ' * (3 - i)}| {i}/3")
        sys.stderr.flush()
        kf_jupyter.report(step=i, progress=i / 3, loss=1.0 / (i + 1))
        time.sleep(0.1)
    sys.stderr.write("\n")
    if dist.get_rank() == 1:
        print(undefined_name)  # noqa: F821
    dist.barrier()


def test_failed_job_panel_shows_the_cause_and_readable_logs(lab: dict) -> None:
    from playwright.sync_api import expect, sync_playwright

    from kf_jupyter import LocalBackendConfig, TorchTrainer, TrainerClient
    from kf_jupyter.errors import JobFailedError

    client = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    name = client.train(
        TorchTrainer(func=rank_one_fails_after_a_bar, num_nodes=1, num_proc_per_node=2)
    )
    with pytest.raises(JobFailedError):
        client.wait_for_job_status(name, timeout=240)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{lab['url']}/lab?token={lab['token']}")
            page.locator(".jp-SideBar [data-id='kf-jupyter-sidebar']").click(timeout=90_000)
            sidebar = page.locator("#kf-jupyter-sidebar")
            row = sidebar.locator("li.kf-job", has_text=name)
            expect(row.locator(".kf-badge")).to_have_text("Failed", timeout=60_000)
            row.locator(".kf-job-name").click()
            message = page.locator(".kf-job-message")
            expect(message).to_contain_text(
                "Rank 1 failed: NameError: name 'undefined_name' is not defined", timeout=30_000
            )
            text = message.inner_text()
            assert text.startswith("Rank 1 failed: NameError"), text
            assert "print(undefined_name)" in text and "kf_entry" not in text, text
            log = page.locator(".kf-log")
            expect(
                log.locator(".kf-log-line", has_text="NameError: name 'undefined_name'")
            ).to_have_count(1, timeout=60_000)
            lines = log.locator(".kf-log-line").all_inner_texts()
            for noise in ("##kf-jupyter", "OMP_NUM_THREADS", "ChildFailedError", "FAILED"):
                assert not any(noise in ln for ln in lines), (noise, lines)
            for rank in (0, 1):
                bars = [ln for ln in lines if ln.startswith(f"[rank-{rank}]") and "|" in ln]
                assert len(bars) == 1 and bars[0].endswith(" 99%|###| 3/3"), lines
            # the reports still drive the panel's chart
            expect(page.locator("svg.kf-chart-svg").first).to_be_visible()
            page.screenshot(path=str(ARTIFACTS / "failed-job-panel.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure-failed-job.png"))
            raise
        finally:
            browser.close()
