"""Real-browser test of the ipywidget monitor (lab extension disabled) before its first line and
while it waits, light and dark (issue 22):

- a `%%torchtrain --no-wait` job whose rank 1 holds back from `init_process_group` shows
  "Waiting for all 2 ranks at rendezvous (1/2 there). No output yet." above its log — the
  backend's own phase at that moment — and nothing once the ranks print;
- suspended, its waiting reason sits on the header's one row (it took a second row); at 760 px
  with the file browser open it gets a line of its own, whole, and Resume / Cancel become icon
  buttons that keep their accessible names and tooltips (they were cut to "R…" and "C…");
- every text at 4.5:1, and axe-core finds no violation, in both states and both themes.
"""

from __future__ import annotations

import time

import pytest

from tests.browser.conftest import (
    ARTIFACTS,
    THEMES,
    assert_readable,
    browser_page,
    expect_theme,
    held_widget_job,
    lab_theme,
    open_notebook,
    run_cells,
    theme_slug,
)
from tests.browser.test_lab_startup_phase import HELD
from tests.browser.test_lab_views import assert_one_row

pytestmark = pytest.mark.slow

#: Read by the `lab` fixture: start JupyterLab without our extension.
LAB_DISABLED = ["kf-jupyter-labextension"]

WIDGET = ".jp-Notebook .jp-OutputArea-output .jupyter-widgets.widget-vbox"

CELL = """%%torchtrain -n 1 -p 2 --no-wait --name {name}
import os, time
import torch.distributed as dist
if os.environ["RANK"] == "1":
    while not os.path.exists({gate!r}):
        time.sleep(0.05)
dist.init_process_group("gloo")
for i in range(2000):
    print(f"rank {{dist.get_rank()}} tick {{i}}", flush=True)
    time.sleep(0.5)
"""


def _attached(locator, js: str, timeout: float = 10.0):
    """`js` evaluated on the element, again while it returns null: the widget's HTML is
    re-rendered every second (the elapsed time), so the element found can be detached by the
    time it is evaluated, and `closest()` finds no box around it."""
    end = time.monotonic() + timeout
    while (value := locator.evaluate(js)) is None and time.monotonic() < end:
        time.sleep(0.1)
    assert value is not None, f"{locator} stayed detached from its widget for {timeout} s"
    return value


@pytest.mark.parametrize("theme", THEMES)
def test_widget_phase_then_log_and_a_one_row_waiting_reason(lab: dict, theme: str) -> None:
    from playwright.sync_api import expect

    slug = theme_slug(theme)
    name = f"phase-{slug}"
    nb = f"widget-phase-{slug}.ipynb"
    with (
        held_widget_job(lab, nb, name, CELL) as (client, gate),
        lab_theme(lab, theme),
        browser_page(f"widget-phase-{slug}-failure.png") as page,
    ):
        open_notebook(page, lab, nb, theme)
        run_cells(page, 2)
        cell = page.locator(".jp-Notebook .jp-CodeCell").nth(1)
        widget = cell.locator(".jupyter-widgets.widget-vbox").first
        phase = widget.locator(".kf-phase")
        expect(phase).to_have_text(HELD, timeout=180_000)
        assert f"{client.get_job(name).phase}. No output yet." == HELD
        assert widget.locator(".kf-log-box").inner_text().strip() == ""
        widget.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"widget-phase-{slug}.png"))
        assert_readable(page, WIDGET, f"phase, {slug}", min_checked=3)

        gate.touch()  # rank 1 joins: the ranks print, the phase goes away
        expect(widget.locator(".kf-log-box")).to_contain_text("tick", timeout=120_000)
        expect(phase).to_have_count(0, timeout=10_000)

        client.suspend_job(name)
        header = widget.locator(".widget-hbox").first
        waiting = header.locator(".kf-waiting")
        expect(waiting).to_be_visible(timeout=60_000)
        full = waiting.get_attribute("title") or ""
        job = client.get_job(name)
        assert full == ": ".join(p for p in (job.reason, job.message) if p), full
        assert full in waiting.inner_text()  # its text is the whole reason too
        assert_one_row(header, "wide window, waiting reason")
        # in a wide window it shows, inside the header's box (not clipped away)
        shown = _attached(
            waiting,
            """e => { const w = e.closest('.widget-html');
                      if (!w) return null;
                      const r = e.getBoundingClientRect(), h = w.getBoundingClientRect();
                      return Math.min(r.right, h.right) - Math.max(r.left, h.left); }""",
        )
        assert shown >= 60, shown
        page.screenshot(path=str(ARTIFACTS / f"widget-waiting-{slug}-wide.png"))
        for label in ("Resume", "Cancel"):  # labelled buttons where there is room
            assert header.get_by_role("button", name=label).inner_text().strip() == label
        expect(widget.locator(".kf-waiting-line")).to_be_hidden()
        # 760 px with the file browser open (issue 22: the buttons were cut to "R…" and
        # "C…" and the waiting reason was clipped away)
        page.set_viewport_size({"width": 760, "height": 1000})
        browser_tab = page.locator(".jp-SideBar .lm-TabBar-tab[title^='File Browser']")
        if not page.locator("#filebrowser").is_visible():
            browser_tab.first.click()
        expect(page.locator("#filebrowser")).to_be_visible()
        page.wait_for_timeout(500)
        assert_one_row(header, "760 px, file browser open")
        for label in ("Resume", "Cancel"):
            button = header.get_by_role("button", name=label)  # its accessible name
            expect(button).to_be_visible()
            box = button.evaluate(
                """b => { const r = b.getBoundingClientRect(),
                                h = b.closest('.widget-hbox').getBoundingClientRect(),
                                i = b.querySelector('i').getBoundingClientRect();
                          return {cut: b.scrollWidth > b.clientWidth + 1,
                                  inside: r.left >= h.left - 1 && r.right <= h.right + 1,
                                  icon: i.width, title: b.title}; }"""
            )
            assert not box["cut"] and box["inside"], (label, box)
            assert box["icon"] >= 8, (label, box)  # an icon where the label has no room
            assert box["title"], (label, box)  # and a tooltip
        # the status and the elapsed time stay whole (the name gives way instead)
        for part in (".kf-status", ".kf-elapsed"):
            assert _attached(
                header.locator(part),
                """e => { const w = e.closest('.widget-html');
                          return w && e.getBoundingClientRect().right <=
                                      w.getBoundingClientRect().right + 1; }""",
            ), part
        # the reason on a line of its own, whole, instead of a clipped end of the row
        expect(waiting).to_be_hidden()
        own = widget.locator(".kf-waiting-line")
        expect(own).to_be_visible()
        assert own.inner_text().strip() == full
        assert own.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
        assert header.locator(".kf-status").get_attribute("title") == full
        widget.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"widget-waiting-{slug}-narrow.png"))
        assert_readable(page, WIDGET, f"waiting reason, 760 px, {slug}", min_checked=3)
        # resumed: no reason any more, one row, the Suspend button's icon and name
        client.resume_job(name)
        expect(own).to_be_hidden(timeout=60_000)
        expect(header.get_by_role("button", name="Suspend")).to_be_visible()
        assert_one_row(header, "760 px, running")
        page.screenshot(path=str(ARTIFACTS / f"widget-running-{slug}-narrow.png"))
        assert_readable(page, WIDGET, f"running, 760 px, {slug}", min_checked=3)


@pytest.mark.parametrize("theme", THEMES)
def test_notebook7_widget_phase_then_log_and_a_narrow_header(lab: dict, theme: str) -> None:
    """Jupyter Notebook 7 (same server, no lab extension), light and dark: the ipywidget
    monitor says what the held job does, in the backend's words, then its log; suspended at
    760 px its header keeps Resume and Cancel whole and the reason whole; 4.5:1, no axe
    violation."""
    from playwright.sync_api import expect

    slug = theme_slug(theme)
    name = f"nb7-phase-{slug}"
    nb = f"nb7-widget-phase-{slug}.ipynb"
    with (
        held_widget_job(lab, nb, name, CELL) as (client, gate),
        lab_theme(lab, theme),
        browser_page(f"nb7-widget-phase-{slug}-failure.png") as page,
    ):
        page.goto(f"{lab['url']}/notebooks/{nb}?token={lab['token']}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
        expect_theme(page, theme)
        code = page.locator(".jp-Notebook .jp-CodeCell")
        for _ in range(3):  # the kernel may still be starting: %load_ext again
            select = page.locator(".jp-Dialog .jp-mod-accept", has_text="Select")
            if select.count():
                select.click()
            code.nth(0).locator(".jp-InputArea-editor").click()
            page.keyboard.press("Escape")
            page.keyboard.press("Control+Enter")
            try:
                expect(code.nth(0).locator(".jp-InputPrompt")).to_have_text("[1]:", timeout=30_000)
                break
            except AssertionError:
                continue
        cell = code.nth(1)
        cell.locator(".jp-InputArea-editor").click()
        page.keyboard.press("Escape")
        page.keyboard.press("Control+Enter")  # once: the job has a fixed name
        widget = cell.locator(".jupyter-widgets.widget-vbox").first
        phase = widget.locator(".kf-phase")
        expect(phase).to_have_text(HELD, timeout=180_000)
        assert f"{client.get_job(name).phase}. No output yet." == HELD
        widget.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"nb7-widget-phase-{slug}.png"))
        assert_readable(page, WIDGET, f"Notebook 7 phase, {slug}", min_checked=3)
        gate.touch()
        expect(widget.locator(".kf-log-box")).to_contain_text("tick", timeout=120_000)
        expect(phase).to_have_count(0, timeout=10_000)
        client.suspend_job(name)
        header = widget.locator(".widget-hbox").first
        expect(header.locator(".kf-waiting")).to_be_visible(timeout=60_000)
        assert_one_row(header, "Notebook 7, wide")
        page.set_viewport_size({"width": 760, "height": 1000})
        page.wait_for_timeout(500)
        assert_one_row(header, "Notebook 7, 760 px")
        for label in ("Resume", "Cancel"):
            button = header.get_by_role("button", name=label)
            expect(button).to_be_visible()
            assert not button.evaluate("b => b.scrollWidth > b.clientWidth + 1"), label
        job = client.get_job(name)
        full = ": ".join(p for p in (job.reason, job.message) if p)
        # too little room left on the row: a line of its own, whole (on the row it
        # was cut to "Suspende…")
        own = widget.locator(".kf-waiting-line")
        expect(own).to_be_visible()
        assert own.inner_text().strip() == full
        expect(header.locator(".kf-waiting")).to_be_hidden()
        widget.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"nb7-widget-waiting-{slug}-narrow.png"))
        assert_readable(page, WIDGET, f"Notebook 7 waiting, 760 px, {slug}", min_checked=3)
