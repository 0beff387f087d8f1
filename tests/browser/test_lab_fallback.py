"""Real-browser test of the monitor where the lab extension is absent (JupyterLab with
kf-jupyter-labextension disabled, as in a frontend without it): the ipywidget monitor shows
the job live and says what works while the kernel is busy; when the job ends the cell holds
the static rendering. The widget monitor and the static output pass axe-core with no violation
and keep every text at 4.5:1 (issue 22)."""

from __future__ import annotations

import pytest

from tests.browser.conftest import (
    ARTIFACTS,
    assert_readable,
    browser_page,
    open_notebook,
    run_cells,
    write_notebook,
)

pytestmark = pytest.mark.slow

#: Read by the `lab` fixture: start JupyterLab without our extension.
LAB_DISABLED = ["kf-jupyter-labextension"]

CELLS = [
    "%load_ext kf_jupyter",
    "%%torchtrain -n 1 -p 2 --name fallback-job\nimport os, time\n"
    "for i in range(80):\n    print(f\"rank {os.environ['RANK']} line {i}\", flush=True)\n"
    "    time.sleep(0.25)\n",
]


def test_without_the_extension_the_widget_says_what_works_then_leaves_the_static_output(
    lab: dict,
) -> None:
    from playwright.sync_api import expect

    write_notebook(lab, "fallback.ipynb", CELLS)
    with browser_page("fallback-failure.png") as page:
        open_notebook(page, lab, "fallback.ipynb")
        assert page.locator("#kf-jupyter-sidebar").count() == 0  # the extension is off
        run_cells(page, len(CELLS))
        cell = page.locator(".jp-Notebook .jp-CodeCell").nth(1)
        widget = cell.locator(".jupyter-widgets.widget-vbox")
        expect(widget).to_be_visible(timeout=120_000)
        expect(widget.locator(".kf-busy-note")).to_contain_text(
            "interrupt the kernel", timeout=30_000
        )
        expect(widget.locator(".kf-log-box")).to_contain_text("rank 1 line", timeout=120_000)
        expect(cell.locator(".kf-LiveMonitor")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "fallback-widget.png"))
        views = ".jp-Notebook .jp-CodeCell .jupyter-widgets.widget-vbox"
        assert_readable(page, views, "widget monitor", min_checked=10)
        static = cell.locator(".kf-monitor-static.kf-status-complete")
        expect(static).to_be_visible(timeout=180_000)
        expect(cell.locator(".jupyter-widgets.widget-vbox")).to_have_count(0)
        expect(static).to_contain_text("rank 1 line 79")
        page.screenshot(path=str(ARTIFACTS / "fallback-static.png"))
        assert_readable(page, ".kf-monitor-static", "static view", min_checked=None)
