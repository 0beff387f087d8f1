"""Real-browser test: a tqdm progress bar shows while it runs, in the notebook's live monitor
and in the lab's job panel, as one line per rank updated in place (what a terminal shows), and
becomes an ordinary finished line when the bar ends; a line printed while the bar is drawn shows
clean, without the bar's fragment in front of it. Before, both views showed a `\\r` bar only
once its line had ended, so a long epoch looked like a silent job. Also: the job panel's relative
times ("Created ... (3s ago)", event ages) keep counting after the job ended; they used to
freeze when the panel stopped polling a finished job."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, open_notebook, write_notebook
from tests.browser.test_lab_live import _client, _load_extension, _run_cell

pytestmark = pytest.mark.slow

#: Plain tqdm over a loop, as users write it; it stops when the test creates the gate file.
BAR = (
    "import os, time\n"
    "from tqdm import tqdm\n"
    "for i in tqdm(range(100000), desc=f\"epoch 1 rank {os.environ['RANK']}\", mininterval=0.2):\n"
    "    if os.path.exists({gate!r}):\n"
    "        break\n"
    "    time.sleep(0.02)\n"
    "    if i % 25 == 24:\n"
    "        print(f\"rank {os.environ['RANK']} step {i} loss\", flush=True)\n"
    "print('after the bar', flush=True)\n"
)
#: A line the loop prints while its bar is drawn, as a terminal shows it: clean, no bar fragment.
PRINTED = re.compile(r"^(\[rank-\d\] )?rank \d step \d+ loss$")
COUNT = re.compile(r"epoch 1 rank (\d).*?(\d+)/100000")


def _counts(lines: Any) -> dict[str, int]:
    """rank -> the step count its live bar shows now."""
    out = {}
    for text in lines.all_inner_texts():
        m = COUNT.search(text)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def _bar_moves(view: Any, what: str) -> None:
    """Both ranks' live bars are shown, once each, stay on screen while the ranks print, and
    their counts go up."""
    from tests.waits import wait_until

    lines = view.locator(".kf-log-line-live")
    wait_until(lambda: len(_counts(lines)) == 2, f"{what}: a bar for each rank", poll=0.2)
    first = _counts(lines)
    _never_blinks(view, what)

    def moved() -> bool:
        now = _counts(lines)
        return len(now) == 2 and all(now[r] > first[r] for r in now)

    wait_until(moved, f"{what}: both bars count up from {first}", poll=0.2)


#: How long the bars are watched frame by frame: the ranks print every 0.5 s, together.
WATCH_MS = 3000


def _never_blinks(view: Any, what: str) -> None:
    """Every animation frame for WATCH_MS shows both ranks' bars. A print made while a bar is
    drawn used to take the rank's bar off the screen until tqdm's next redraw (up to its 0.2 s
    refresh, at every print of both ranks). One frame in fifty may miss a bar: the printed
    line and the bar's state come as two records, which may rarely reach the page in two
    messages with a frame between them."""
    seen = view.evaluate(
        """(el, ms) => new Promise(done => {
            const seen = [];
            const start = performance.now();
            const tick = () => {
                seen.push(el.querySelectorAll('.kf-log-line-live').length);
                const t = performance.now() - start;
                // a loaded machine draws few frames: watch on until 60 are seen (at most 5x)
                const more = t < ms || (seen.length < 60 && t < 5 * ms);
                if (more) { requestAnimationFrame(tick); } else { done(seen); }
            };
            requestAnimationFrame(tick);
        })""",
        WATCH_MS,
    )
    short = [n for n in seen if n != 2]
    assert len(seen) >= 10, f"{what}: only {len(seen)} frames drawn in {5 * WATCH_MS} ms"
    assert len(short) * 50 <= len(seen), (
        f"{what}: {len(short)} of {len(seen)} frames did not show both ranks' bars ({short[:10]})"
    )


def _printed_clean(view: Any, what: str) -> None:
    """The lines printed while a bar was drawn show as they were printed (no `...it/s]` in front)."""
    from tests.waits import wait_until

    lines = view.locator(".kf-log-line:not(.kf-log-line-live)", has_text="step")
    wait_until(lambda: lines.count() >= 2, f"{what}: lines printed while the bars run", poll=0.2)
    texts = [t.strip() for t in lines.all_inner_texts()]
    bad = [t for t in texts if not PRINTED.match(t)]
    assert not bad, f"{what}: printed lines carry a bar's fragment: {bad}"


def _finished(view: Any) -> None:
    """The bars ended: one finished line per rank, no live line left."""
    from playwright.sync_api import expect

    expect(view.locator(".kf-log-line-live")).to_have_count(0, timeout=30_000)
    for rank in ("0", "1"):
        expect(view.locator(".kf-log-line", has_text=f"epoch 1 rank {rank}")).to_have_count(
            1, timeout=30_000
        )
    expect(view.locator(".kf-log-line", has_text="after the bar")).to_have_count(2, timeout=30_000)


def test_a_running_progress_bar_shows_in_the_monitor_and_the_panel(
    lab: dict, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    from tests.waits import wait_until

    gate = tmp_path / "gate"
    cell = "%%torchtrain -n 1 -p 2 --name bars --no-wait\n" + BAR.replace(
        "{gate!r}", repr(str(gate))
    )
    write_notebook(lab, "bars.ipynb", ["%load_ext kf_jupyter", cell])
    client = _client(lab)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            open_notebook(page, lab, "bars.ipynb")
            cells = _load_extension(page)
            _run_cell(page, 1)
            monitor = cells.nth(1).locator(".kf-LiveMonitor")
            expect(monitor).to_be_visible(timeout=60_000)
            live = monitor.locator(".kf-log-line-live")
            _bar_moves(monitor, "live monitor")
            _printed_clean(monitor, "live monitor")
            assert client.get_job("bars").status == "Running"
            # the rank filter applies to the bars too
            monitor.locator(".kf-live-filter").select_option("rank-1")
            expect(live).to_have_count(1, timeout=30_000)
            expect(live).to_contain_text("epoch 1 rank 1")
            monitor.locator(".kf-live-filter").select_option(label="all ranks")
            page.screenshot(path=str(ARTIFACTS / "bars-monitor.png"))

            # the job panel (opened from the sidebar) shows the same bars, moving
            page.locator(".jp-SideBar [data-id='kf-jupyter-sidebar']").click(timeout=90_000)
            row = page.locator("#kf-jupyter-sidebar li.kf-job", has_text="bars")
            row.locator(".kf-job-name").click(timeout=60_000)
            panel = page.locator(".kf-JobPanel")
            _bar_moves(panel, "job panel")
            _printed_clean(panel, "job panel")
            page.screenshot(path=str(ARTIFACTS / "bars-panel.png"))

            # the bars end: one finished line per rank, no live line left, in both views
            gate.write_text("")
            expect(panel.locator(".kf-badge")).to_have_text("Complete", timeout=120_000)
            _finished(panel)
            # the panel's relative times keep counting after the job ended (polling stopped)
            created = panel.locator("dd .kf-age").first
            before = created.inner_text()
            wait_until(
                lambda: created.inner_text() != before,
                f"the panel's 'Created ({before})' to count on after the job ended",
                timeout=60,
                poll=0.5,
            )
            page.locator(".lm-TabBar-tab", has_text="bars.ipynb").click()
            expect(monitor.locator(".kf-live-status")).to_have_text("Complete", timeout=60_000)
            _finished(monitor)
            page.screenshot(path=str(ARTIFACTS / "bars-finished.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "failure-bars.png"))
            raise
        finally:
            browser.close()
