"""Real-browser test: JupyterLab + the kf-jupyter lab extension in Debian's Chromium (Playwright).

Starts `jupyter lab` (tests/browser/conftest.py), runs a notebook cell `%%torchtrain -n 1 -p 2`
on the local backend, and checks what a user sees: the job in the "Kubeflow Trainer" sidebar
reaching Complete, and its log panel showing lines from both ranks.
Screenshots go to tests/artifacts/ (gitignored).
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, open_notebook, write_notebook

pytestmark = pytest.mark.slow

CELLS = [
    "%load_ext kf_jupyter",
    "%%torchtrain -n 1 -p 2\nimport os\nprint(f\"hello from rank {os.environ['RANK']}\", flush=True)",
]


def test_torchtrain_cell_shows_up_in_sidebar_and_log_panel(lab: dict) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            write_notebook(lab, "train.ipynb", CELLS)
            open_notebook(page, lab, "train.ipynb")
            # run both cells: %load_ext, then the %%torchtrain cell
            page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click()
            page.keyboard.press("Escape")
            page.keyboard.press("Shift+Enter")
            page.keyboard.press("Shift+Enter")
            prompts = page.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt")
            expect(prompts.nth(1)).not_to_have_text("[ ]:", timeout=30_000)
            # open the "Kubeflow Trainer" sidebar
            page.locator(".jp-SideBar [data-id='kf-jupyter-sidebar']").click()
            sidebar = page.locator("#kf-jupyter-sidebar")
            expect(sidebar).to_be_visible()
            row = sidebar.locator("li.kf-job").first
            expect(row).to_be_visible(timeout=45_000)
            expect(row.locator(".kf-badge")).to_have_text("Complete", timeout=180_000)
            expect(row.locator(".kf-job-framework")).to_have_text("torch")
            page.screenshot(path=str(ARTIFACTS / "sidebar-complete.png"))
            job_name = row.locator(".kf-job-name").inner_text().strip()
            from kf_jupyter import LocalBackendConfig, TrainerClient

            kernel_jobs = TrainerClient(LocalBackendConfig(state_dir=lab["state"])).list_jobs()
            assert [j.name for j in kernel_jobs] == [job_name]  # the kernel's job, from the store
            # the log panel: lines from both ranks
            row.locator(".kf-job-name").click()
            log = page.locator(".kf-log")
            expect(log.locator(".kf-log-line", has_text="hello from rank 0")).to_have_count(
                1, timeout=60_000
            )
            expect(log.locator(".kf-log-line", has_text="hello from rank 1")).to_have_count(
                1, timeout=60_000
            )
            sources = set(log.locator(".kf-log-source").all_inner_texts())
            assert {"[rank-0]", "[rank-1]"} <= {s.strip() for s in sources}, sources
            page.screenshot(path=str(ARTIFACTS / "log-panel.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure.png"))
            raise
        finally:
            browser.close()
