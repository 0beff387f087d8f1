"""Real-browser test: the job panel's memory stays flat while animation frames stop (hidden tab).

A local job prints thousands of lines a second; its log panel is open in JupyterLab (Debian's
Chromium via Playwright, the lab extension built in this checkout, loaded through a temporary
JUPYTER_PATH). Animation frames are then held, as a hidden browser tab does: records keep
arriving from the server but no frame applies them. The JS heap (after a forced GC) must stay
flat, and when frames resume the panel shows at most its 2,000 lines, the newest ones, with the
count of hidden earlier lines.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_jupyter import JAXTrainer, LocalBackendConfig, TrainerClient

from ..waits import wait_until
from .conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, ROOT, _free_port, stop_lab

pytestmark = pytest.mark.slow

FROZEN_SECONDS = 20.0


def chatty(seconds: float = 600.0, rate: int = 8000) -> None:
    """Prints about `rate` numbered lines a second for `seconds`."""
    import sys
    import time

    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        for _ in range(rate // 20):
            sys.stdout.write(f"line {i:09d} " + "x" * 60 + "\n")
            i += 1
        sys.stdout.flush()
        ahead = i / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """JupyterLab with this checkout's lab extension and server extension, on a temp store."""
    build = ROOT / "kf_jupyter" / "labextension"
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    if not (build / "package.json").exists():
        pytest.skip("the lab extension is not built (bash scripts/build-labextension.sh)")
    tmp = tmp_path_factory.mktemp("lab-hidden")
    jpath, state, config, settings, nb = (
        tmp / d for d in ("jupyter-path", "state", "config", "settings", "nb")
    )
    for d in (jpath / "labextensions", state, config, nb, settings / "@jupyterlab" / "apputils-extension"):  # fmt: skip
        d.mkdir(parents=True)
    # this checkout's build first on the path, whatever the venv links to
    (jpath / "labextensions" / "kf-jupyter-labextension").symlink_to(build.resolve())
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"kf_jupyter": True}}})
    )
    (
        settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    ).write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        KF_JUPYTER_STATE_DIR=str(state),
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTER_PATH=str(jpath),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
    )
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}",
         f"--ServerApp.token={token}", "--ServerApp.allow_root=True", f"--notebook-dir={nb}",
         "--ServerApp.ip=127.0.0.1"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip

    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited:\n{(tmp / 'lab.log').read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        wait_until(listening, what="jupyter lab listening", poll=0.3)
        yield {"url": f"http://127.0.0.1:{port}", "token": token, "state": state}
    finally:
        stop_lab(proc, log, tmp / "lab.log", "lab-hidden-server.log")


def _log_lines(client: TrainerClient, name: str) -> int:
    path = client.backend.jobs_dir / name / "logs" / "rank-0.log"
    with open(path, "rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))


# Hold animation frames as a hidden tab does: callbacks are kept, never run, until released.
HOLD_FRAMES = """() => {
  window.__kfHeld = [];
  window.__kfRaf = window.requestAnimationFrame;
  let id = 1;
  window.requestAnimationFrame = cb => { window.__kfHeld.push(cb); return id++; };
}"""
RELEASE_FRAMES = """() => {
  window.requestAnimationFrame = window.__kfRaf;
  const held = window.__kfHeld;
  window.__kfHeld = [];
  for (const cb of held) { cb(performance.now()); }
  return held.length;
}"""


@pytest.mark.reliability(
    scenario="lab job panel with animation frames held (hidden tab) while a job prints ~8k "
    "lines/s: JS heap flat, then at most 2,000 lines shown with the hidden count",
    area="server",
)
def test_hidden_tab_keeps_the_panel_bounded(lab: dict, record_property: object) -> None:
    from playwright.sync_api import expect, sync_playwright

    client = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    name = client.train(JAXTrainer(func=chatty, initialize_distributed=False))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            try:
                page.goto(f"{lab['url']}/lab?token={lab['token']}")
                page.locator(".jp-SideBar [data-id='kf-jupyter-sidebar']").click(timeout=120_000)
                row = page.locator("#kf-jupyter-sidebar li.kf-job", has_text=name)
                row.locator(".kf-job-name").click(timeout=120_000)
                log = page.locator(".kf-JobPanel .kf-log")
                expect(log.locator(".kf-log-line").first).to_be_visible(timeout=120_000)
                cdp = page.context.new_cdp_session(page)

                def heap_mib() -> float:
                    cdp.send("HeapProfiler.collectGarbage")
                    return cdp.send("Runtime.getHeapUsage")["usedSize"] / 2**20

                page.evaluate(HOLD_FRAMES)
                before_lines, before_heap = _log_lines(client, name), heap_mib()
                t0 = time.monotonic()
                while time.monotonic() - t0 < FROZEN_SECONDS:
                    page.wait_for_timeout(1000)  # the page keeps receiving the stream
                printed = _log_lines(client, name) - before_lines
                grown = heap_mib() - before_heap
                held = page.evaluate(RELEASE_FRAMES)
                page.wait_for_timeout(500)
                shown = log.locator(".kf-log-line").count()
                note = page.locator(".kf-JobPanel .kf-note").first
                page.screenshot(path=str(ARTIFACTS / "hidden-tab-after.png"))
                record_property("lines_printed_while_frozen", printed)
                record_property("heap_growth_mib", round(grown, 1))
                record_property("lines_shown_after", shown)
                assert held >= 1, "the panel never asked for a frame while frozen"
                assert printed > 20_000, f"the job printed only {printed} lines in the window"
                assert grown < 8.0, f"JS heap grew {grown:.1f} MiB over {printed} lines"
                assert shown <= 2000
                expect(note).to_be_visible()
                expect(note).to_contain_text("earlier lines hidden")
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "hidden-tab-failure.png"))
                raise
            finally:
                browser.close()
    finally:
        client.delete_job(name)
