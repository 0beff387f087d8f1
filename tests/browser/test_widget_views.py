"""Real-browser tests of the kernel's own views, where the lab extension is absent (JupyterLab
with kf-jupyter-labextension disabled, as in a frontend without it), light and dark (issue 22):

- a `print()` while a tqdm-like bar is drawn shows as a clean line in the ipywidget monitor (it
  carried the bar's fragment, `...[00:19<00:11]rank 0 step 19`), the bar staying the rank's
  last line, and the static view has no fragment either;
- the monitor's header stays on one row, in a wide window and a narrow one;
- the widget monitor, the static view and the forms (`%kf_config`, a form showing an error)
  keep every text at 4.5:1 and axe-core finds no violation, in both themes;
- a job that ends while the page is away (saved, closed) comes back as its finished static
  view when the notebook is opened again (it was a dead monitor: the kernel had closed the
  widget's model).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.browser.conftest import (
    ARTIFACTS,
    THEMES,
    assert_readable,
    browser_page,
    fresh_page,
    held_widget_job,
    lab_theme,
    open_notebook,
    run_cells,
    theme_slug,
    write_notebook,
)
from tests.browser.test_lab_views import assert_one_row
from tests.waits import wait_until

pytestmark = pytest.mark.slow

#: Read by the `lab` fixture: start JupyterLab without our extension.
LAB_DISABLED = ["kf-jupyter-labextension"]

#: A fixed-width bar redrawn with `\r`, and a print while it is drawn (as tqdm and a training
#: loop's print do); the gap lets the log follower see each bar state first.
BARS = (
    "import os, sys, time\n"
    "n = 24\n"
    "for i in range(1, n + 1):\n"
    "    k = i * 10 // n\n"
    "    sys.stdout.write(f\"\\r{i * 100 // n:3d}%|{'#' * k}{' ' * (10 - k)}| {i:02d}/{n} \"\n"
    '                     f"[00:{i:02d}<00:{n - i:02d}]")\n'
    "    sys.stdout.flush()\n"
    "    time.sleep(0.8)\n"
    "    print(f\"rank {os.environ['RANK']} step {i} loss\", flush=True)\n"
)

FORM_WITH_ERROR = (
    "from kf_jupyter import RuntimeConfigForm\n"
    "form = RuntimeConfigForm()\n"
    "form.add_env('1BAD', 'x')\n"
    "form.validate()\n"
    "form"
)

WIDGETS = ".jp-Notebook .jp-OutputArea-output .jupyter-widgets.widget-vbox"


@pytest.mark.parametrize("theme", THEMES)
def test_widget_views_bar_lines_one_row_header_contrast_and_a_finished_job_comes_back(
    lab: dict, theme: str
) -> None:
    from playwright.sync_api import expect

    from kf_jupyter import LocalBackendConfig, TrainerClient

    slug = theme_slug(theme)
    name = f"bars-{slug}"
    cells = [
        "%load_ext kf_jupyter",
        "%kf_config",
        FORM_WITH_ERROR,
        f"%%torchtrain -n 1 -p 2 --name {name}\n{BARS}",
    ]
    nb = f"widgets-{slug}.ipynb"
    write_notebook(lab, nb, cells)
    client = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    with lab_theme(lab, theme), browser_page(f"widget-{slug}-failure.png") as page:
        open_notebook(page, lab, nb, theme)
        run_cells(page, len(cells))
        cell = page.locator(".jp-Notebook .jp-CodeCell").nth(3)
        widget = cell.locator(".jupyter-widgets.widget-vbox").first
        log = widget.locator(".kf-log-box")
        expect(log).to_contain_text("rank 1 step 4 loss", timeout=180_000)
        text = log.inner_text()
        assert "]rank" not in text, text  # no bar fragment before a printed line
        assert "rank 0 step 3 loss" in text and "rank 1 step 3 loss" in text, text
        # the bar is each rank's last line while it runs
        last = {ln.split("]", 1)[0]: ln for ln in text.splitlines() if ln.strip()}
        assert any("%|" in ln for ln in last.values()), text
        header = widget.locator(".widget-hbox").first
        assert_one_row(header, "wide window")
        page.set_viewport_size({"width": 760, "height": 1000})
        page.wait_for_timeout(500)
        assert_one_row(header, "narrow window")
        widget.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"widget-{slug}-narrow.png"))
        page.set_viewport_size({"width": 1400, "height": 1000})
        # the forms: %kf_config and one showing an error
        forms = page.locator(".jp-Notebook .jp-CodeCell").nth(2)
        expect(forms.locator(".kf-errors")).to_contain_text("1BAD", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / f"widget-{slug}-running.png"))
        assert_readable(page, WIDGETS, f"widgets and forms, {slug}")
        # the page goes away (saved, closed) while the job runs; the job ends meanwhile
        page.keyboard.press("Control+s")
        expect(page.locator(".jp-mod-dirty")).to_have_count(0, timeout=30_000)
        page.close()
        job = client.wait_for_job_status(name, timeout=300)
        assert job.status == "Complete", job
        time.sleep(3)  # the kernel's cell ends: its widget becomes the static view
        page = fresh_page(page)
        open_notebook(page, lab, nb)
        cell = page.locator(".jp-Notebook .jp-CodeCell").nth(3)
        static = cell.locator(".kf-monitor-static.kf-status-complete")
        expect(static).to_be_visible(timeout=60_000)
        expect(cell).not_to_contain_text("model not found")
        expect(static).to_contain_text("rank 1 step 24 loss")
        assert "]rank" not in static.inner_text()
        static.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"widget-{slug}-came-back.png"))
        assert_readable(page, ".kf-monitor-static", f"static view, {slug}")


#: A short job that prints a few lines; `--no-wait` ends its cell at once, so it ends later.
SHORT = (
    "import time\nfor i in range(6):\n    print(f'step {i} done', flush=True)\n    time.sleep(1)\n"
)


def _restart_kernel(page: Any) -> None:
    """Kernel > Restart Kernel… as a person does it (command mode `0 0`, then Restart)."""
    from playwright.sync_api import expect

    page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-editor").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("0")
    page.keyboard.press("0")
    page.locator(".jp-Dialog .jp-mod-accept").click(timeout=30_000)
    expect(page.locator(".jp-StatusBar-Widget", has_text="| Idle")).to_have_count(1, timeout=90_000)


def test_finished_jobs_stay_static_views_after_a_kernel_restart_and_a_reload(lab: dict) -> None:
    """Without the lab extension, after a kernel restart and a reload, every job's output shows
    the finished job (status, last lines), never "Error displaying widget: model not found":
    - a job that ended while its cell followed it (its cell replaced the monitor);
    - a job started with `--no-wait` that ended after its cell had ended (before the fix its
      saved output was the ipywidget monitor, whose model a restarted kernel does not have:
      "model not found"; now the monitor replaces its own output with the static view when
      the job ends), in JupyterLab and in Notebook 7 (same server)."""
    from playwright.sync_api import expect

    from kf_jupyter import LocalBackendConfig, TrainerClient

    cells = [
        "%load_ext kf_jupyter",
        f"%%torchtrain -n 1 -p 1 --name rs-later --no-wait\n{SHORT}",
        f"%%torchtrain -n 1 -p 1 --name rs-followed\n{SHORT}",
    ]
    nb = "restart.ipynb"
    write_notebook(lab, nb, cells)
    client = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    with browser_page("widget-after-restart-failure.png") as page:
        open_notebook(page, lab, nb)
        run_cells(page, len(cells))
        for name in ("rs-later", "rs-followed"):
            wait_until(
                lambda name=name: name in {j.name for j in client.list_jobs()},
                f"job {name} to be submitted",
                poll=0.5,
            )
            assert client.wait_for_job_status(name, timeout=300).status == "Complete"
        followed = page.locator(".jp-Notebook .jp-CodeCell").nth(2)
        expect(followed.locator(".kf-monitor-static.kf-status-complete")).to_be_visible(
            timeout=60_000
        )
        page.wait_for_timeout(5000)  # the --no-wait monitor's last poll and update
        page.keyboard.press("Control+s")
        expect(page.locator(".jp-mod-dirty")).to_have_count(0, timeout=30_000)
        _restart_kernel(page)
        page.close()
        pages = [("lab", f"/lab/tree/{nb}?reset"), ("notebook7", f"/notebooks/{nb}?")]
        for front, path in pages:
            page = fresh_page(page)
            page.goto(f"{lab['url']}{path}&token={lab['token']}")
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
            for i, name in ((1, "rs-later"), (2, "rs-followed")):
                cell = page.locator(".jp-Notebook .jp-CodeCell").nth(i)
                static = cell.locator(".kf-monitor-static.kf-status-complete")
                expect(static).to_be_visible(timeout=60_000)
                expect(static).to_contain_text(name)
                expect(static).to_contain_text("step 5 done")
                expect(cell).not_to_contain_text("model not found")
            page.wait_for_timeout(2000)  # the widget manager has restored by now
            expect(page.locator(".jp-Notebook")).not_to_contain_text("Error displaying")
            page.screenshot(path=str(ARTIFACTS / f"widget-after-restart-{front}.png"))
            page.close()
    saved = json.loads((lab["notebooks"] / nb).read_text())
    for cell in saved["cells"][1:]:
        kinds = {k for out in cell["outputs"] for k in out.get("data", {})}
        assert "application/vnd.jupyter.widget-view+json" not in kinds, kinds


#: Reports a few points of two metrics, then holds (the monitor's live chart stays) until the
#: test creates `gate`, and ends.
CHARTS = """%%torchtrain -n 1 -p 1 --name {name}
import os, time
from kf_jupyter import report
for i in range(6):
    report(step=i, progress=i / 10, loss=2 / (i + 1), acc=0.1 * i)
    time.sleep(0.2)
while not os.path.exists({gate!r}):
    time.sleep(0.1)
"""

#: The ipywidget HTML box that holds the monitor's live chart.
LIVE_CHART = ".kf-monitor .widget-html:has(svg.kf-chart)"


@pytest.mark.parametrize("theme", THEMES)
def test_chart_texts_follow_the_theme_live_finished_and_compared(lab: dict, theme: str) -> None:
    """The metric charts' titles and values (issue 22: drawn in a fixed #444, they vanished
    under a dark theme) are at 4.5:1, with no axe violation, light and dark: the widget
    monitor's live chart, the finished job's static view and `%kf_compare` of the job; the
    compare chart's title and axis values are page text (in its image, no theme reaches them)."""
    from playwright.sync_api import expect

    slug = theme_slug(theme)
    name = f"charts-{slug}"
    nb = f"charts-{slug}.ipynb"
    with (
        held_widget_job(lab, nb, name, CHARTS, "%kf_compare {name}") as (_client, gate),
        lab_theme(lab, theme),
        browser_page(f"charts-{slug}-failure.png") as page,
    ):
        open_notebook(page, lab, nb, theme)
        run_cells(page, 3)
        cell = page.locator(".jp-Notebook .jp-CodeCell").nth(1)
        live = cell.locator(LIVE_CHART)
        expect(live).to_contain_text("loss: 0.3333 (step 5)", timeout=180_000)
        expect(live).to_contain_text("acc: 0.5 (step 5)")
        live.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"charts-{slug}-live.png"))
        assert_readable(page, f".jp-Notebook {LIVE_CHART}", f"live chart, {slug}", 1)

        gate.touch()  # the job ends: its monitor becomes the static view
        static = cell.locator(".kf-monitor-static.kf-status-complete")
        expect(static).to_be_visible(timeout=120_000)
        expect(static).to_contain_text("loss: 0.3333 (step 5)")
        compared = page.locator(".jp-Notebook .jp-CodeCell").nth(2).locator(".kf-compare-static")
        expect(compared).to_be_visible(timeout=60_000)
        # each chart's title and values are page text (they were drawn in its image)
        figures = compared.locator("figure")
        expect(figures).to_have_count(2)
        for i, texts in enumerate((("acc", "0.5", "0"), ("loss", "2", "0.3333"))):
            for text in (*texts, "step 0", "step 5"):
                expect(figures.nth(i)).to_contain_text(text)
        compared.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"charts-{slug}-compared.png"))
        assert_readable(page, ".jp-Notebook .kf-monitor-static", f"finished view, {slug}")
        assert_readable(page, ".jp-Notebook .kf-compare-static", f"compare view, {slug}")
