"""Real-browser test of the startup phase in the lab extension (issue 22: "for 80 s the monitor
showed Running and an empty log"), light and dark.

A real local torch job whose rank 1 holds back from `init_process_group` until a file appears:
the live monitor and the job panel both say "Waiting for all 2 ranks at rendezvous (1/2 there)"
— the very phase the backend's record gives at that moment, from the ranks' own events — with
every text at 4.5:1 and no axe violation; once the ranks print, the phase is gone from both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import (
    ARTIFACTS,
    THEMES,
    assert_readable,
    browser_page,
    expect_theme,
    lab_theme,
    open_notebook,
    run_first_cell_in_notebook7,
    theme_slug,
    write_monitor_notebook,
)
from tests.browser.test_lab_live import _run_cell

pytestmark = pytest.mark.slow

VIEWS = ".kf-LiveMonitor, .kf-JobPanel"
HELD = "Waiting for all 2 ranks at rendezvous (1/2 there). No output yet."


def held_then_ticks(gate: str) -> None:
    """Rank 1 waits for `gate` before joining the process group; then both ranks tick."""
    import os
    import time

    import torch.distributed as dist

    if os.environ["RANK"] == "1":
        while not os.path.exists(gate):
            time.sleep(0.05)
    dist.init_process_group("gloo")
    for i in range(2000):
        print(f"rank {dist.get_rank()} tick {i}", flush=True)
        time.sleep(0.5)


@pytest.fixture
def held(lab: dict, tmp_path: Path) -> Iterator[tuple[Any, str, Path]]:
    """(client, job name, gate): a 2-rank torch job in the lab's store whose rank 1 holds back
    from the rendezvous until the file `gate` exists; deleted after the test."""
    from kf_jupyter import LocalBackendConfig, TorchTrainer, TrainerClient

    gate = tmp_path / "gate"
    client = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    _torch_pool_ready(client)
    name = client.train(
        TorchTrainer(func=held_then_ticks, func_args={"gate": str(gate)}, num_proc_per_node=2)
    )
    try:
        yield client, name, gate
    finally:
        gate.touch()
        client.delete_job(name)


def _torch_pool_ready(client: Any, timeout: float = 300) -> None:
    """The torch pool of the lab's store accepts launches, as a while after `%load_ext`: the
    job starts warm (a first job whose pool still imports starts cold, and torchrun's banner is
    then its first line, so the view rightly shows output instead of the held phase)."""
    import time

    from kf_jupyter.backends.local.warm import pool as warm_pool

    client.backend.prestart_pool("torch")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pools = warm_pool.list_pools(client.backend.state_dir)
        if pools and all(p.get("alive") and p.get("state") == "ready" for p in pools):
            return
        time.sleep(0.1)
    raise AssertionError(f"the torch pool did not become ready in {timeout} s")


def _monitor_shows_held(page: Any, client: Any, name: str, shot: str, what: str) -> Any:
    """(monitor, its startup line): the live monitor says the job waits at the rendezvous, in
    the words of the backend's record (one source), with no log line yet; every text at 4.5:1
    and no axe violation (screenshot `shot`)."""
    from playwright.sync_api import expect

    monitor = page.locator(".kf-LiveMonitor")
    startup = monitor.locator(".kf-live-startup")
    expect(startup).to_have_text(HELD, timeout=180_000)
    assert f"{client.get_job(name).phase}. No output yet." == HELD
    assert monitor.locator(".kf-log-line").count() == 0
    startup.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / shot))
    assert_readable(page, VIEWS, what)
    return monitor, startup


def _panel_shows_held(page: Any, monitor: Any) -> Any:
    """The job panel the monitor opens, once it says the same and its events say why."""
    from playwright.sync_api import expect

    monitor.locator(".kf-live-open").click()
    panel = page.locator(".kf-JobPanel")
    expect(panel.locator(".kf-panel-startup")).to_have_text(HELD, timeout=30_000)
    expect(panel.locator(".kf-events")).to_contain_text(
        "rank 0: waiting for the other ranks", timeout=30_000
    )
    return panel


@pytest.mark.parametrize("theme", THEMES)
def test_the_monitor_and_panel_show_the_held_rendezvous_then_the_log(
    lab: dict, theme: str, held: tuple[Any, str, Path]
) -> None:
    from playwright.sync_api import expect

    slug = theme_slug(theme)
    client, name, gate = held
    nb = f"phase-{slug}.ipynb"
    write_monitor_notebook(lab, nb, name)
    with lab_theme(lab, theme), browser_page(f"phase-{slug}-failure.png") as page:
        open_notebook(page, lab, nb, theme)
        _run_cell(page, 0)
        monitor, startup = _monitor_shows_held(
            page, client, name, f"phase-{slug}-monitor.png", f"monitor, {slug}"
        )
        panel = _panel_shows_held(page, monitor)
        page.screenshot(path=str(ARTIFACTS / f"phase-{slug}-panel.png"))
        assert_readable(page, VIEWS, f"panel, {slug}")
        gate.touch()  # rank 1 joins: the ranks print, the phase goes away everywhere
        expect(panel.locator(".kf-log-line", has_text="tick").first).to_be_visible(timeout=120_000)
        expect(panel.locator(".kf-panel-startup")).to_be_hidden()
        notebook_tab = page.locator(f".lm-TabBar-tab:has-text('{nb}')").first
        notebook_tab.click()
        expect(monitor.locator(".kf-log-line", has_text="tick").first).to_be_visible(timeout=60_000)
        expect(startup).to_be_hidden()


@pytest.mark.parametrize("theme", THEMES)
def test_notebook7_shows_the_held_rendezvous_in_the_monitor_and_panel(
    lab: dict, theme: str, held: tuple[Any, str, Path]
) -> None:
    """Jupyter Notebook 7 (same server), light and dark: the live monitor and the job panel
    (in Notebook 7's right side panel) say what the held job is doing, in the backend's words,
    with every text at 4.5:1 and no axe violation; the phase goes once the ranks print."""
    from playwright.sync_api import expect

    slug = theme_slug(theme)
    client, name, gate = held
    nb = f"nb7-phase-{slug}.ipynb"
    write_monitor_notebook(lab, nb, name)
    with lab_theme(lab, theme), browser_page(f"nb7-phase-{slug}-failure.png") as page:
        page.goto(f"{lab['url']}/notebooks/{nb}?token={lab['token']}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
        expect_theme(page, theme)
        run_first_cell_in_notebook7(page, page.locator(".kf-LiveMonitor"))
        monitor, startup = _monitor_shows_held(
            page, client, name, f"nb7-phase-{slug}-monitor.png", f"Notebook 7 monitor, {slug}"
        )
        panel = _panel_shows_held(page, monitor)
        expect(panel).to_be_visible(timeout=30_000)
        # the side panel is narrow: nothing in it is wider than it (the events' long
        # messages were cut off at its right edge)
        wide = panel.evaluate(
            """p => [...p.querySelectorAll('*')].filter(e => {
                 const r = e.getBoundingClientRect(), q = p.getBoundingClientRect();
                 return r.width > 0 && r.right > Math.min(q.right, innerWidth) + 1;
               }).map(e => e.className || e.tagName)"""
        )
        assert wide == [], wide
        page.screenshot(path=str(ARTIFACTS / f"nb7-phase-{slug}-panel.png"))
        assert_readable(page, VIEWS, f"Notebook 7 panel, {slug}")
        gate.touch()  # rank 1 joins: the ranks print, the phase goes away in both
        expect(monitor.locator(".kf-log-line", has_text="tick").first).to_be_visible(
            timeout=120_000
        )
        expect(startup).to_be_hidden()
        expect(panel.locator(".kf-log-line", has_text="tick").first).to_be_visible(timeout=60_000)
        expect(panel.locator(".kf-panel-startup")).to_be_hidden()
