"""Shared set-up of the real-browser tests: a JupyterLab subprocess with the kf-jupyter server
extension on a temp job store, loading the lab extension built in THIS checkout (a temp
`JUPYTER_PATH` entry, checked against what the page loads), and Debian's Chromium."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter.backends.local.ports import free_port as _free_port

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
BUILD = ROOT / "kf_jupyter" / "labextension"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LABEXT = "kf-jupyter-labextension"


def _notebook(cells: list[str]) -> dict:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"c{i}",
                "metadata": {},
                "outputs": [],
                "source": src,
            }
            for i, src in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[dict]:
    """A running JupyterLab with the kf-jupyter server extension on a temp job store."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    if not (ROOT / "kf_jupyter" / "labextension" / "package.json").exists():
        pytest.skip("the lab extension is not built (bash scripts/build-labextension.sh)")
    tmp = tmp_path_factory.mktemp("lab")
    notebooks, state, config, settings = (tmp / d for d in ("nb", "state", "config", "settings"))
    for d in (notebooks, state, config, settings / "@jupyterlab" / "apputils-extension"):
        d.mkdir(parents=True)
    # a test module may turn lab extensions off (LAB_DISABLED = ["kf-jupyter-labextension"])
    disabled = getattr(request.module, "LAB_DISABLED", [])
    if disabled:
        (config / "labconfig").mkdir()
        (config / "labconfig" / "page_config.json").write_text(
            json.dumps({"disabledExtensions": dict.fromkeys(disabled, True)})
        )
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"kf_jupyter": True}}})
    )
    # no "receive Jupyter news?" toast over the UI
    (
        settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    ).write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # this checkout's build of the lab extension first on the labextensions path
    labext = tmp / "jupyter-path" / "labextensions"
    labext.mkdir(parents=True)
    (labext / LABEXT).symlink_to(BUILD.resolve())
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        KF_JUPYTER_STATE_DIR=str(state),
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        JUPYTER_PATH=os.pathsep.join(
            p for p in (str(tmp / "jupyter-path"), os.environ.get("JUPYTER_PATH", "")) if p
        ),
    )
    log = (tmp / "lab.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            f"--port={port}",
            f"--ServerApp.token={token}",
            "--ServerApp.allow_root=True",
            f"--notebook-dir={notebooks}",
            "--ServerApp.ip=127.0.0.1",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"jupyter lab did not start:\n{(tmp / 'lab.log').read_text()}")
                time.sleep(0.3)
        _check_build_is_ours(f"http://127.0.0.1:{port}", token)
        yield {
            "url": f"http://127.0.0.1:{port}",
            "token": token,
            "state": state,
            "notebooks": notebooks,
            "log": tmp / "lab.log",
        }
    finally:
        stop_lab(proc, log, tmp / "lab.log", "lab-server.log")
        stop_jobs(state)


def stop_jobs(state: Path) -> None:
    """Delete the jobs left in a test's store and stop its warm pools: a job outlives the
    kernel that started it (by design), so a test that failed before its own clean-up would
    leave ranks running that the next tests' process checks would count as theirs."""
    from kf_jupyter import LocalBackendConfig, TrainerClient
    from kf_jupyter.backends.local.warm.pool import stop_all

    client = TrainerClient(LocalBackendConfig(state_dir=state))
    for job in client.list_jobs():
        try:
            client.delete_job(job.name)
        except Exception as exc:  # keep going: the others must still stop
            print(f"could not delete {job.name}: {exc}", file=sys.stderr)
    stop_all(state)


def stop_lab(proc: subprocess.Popen, log: Any, log_path: Path | None, artifact: str | None) -> None:
    """Stop a JupyterLab started in its own process group (with its kernels); keep its log."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.close()
    if artifact and log_path is not None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log_path, ARTIFACTS / artifact)


def _check_build_is_ours(url: str, token: str) -> None:
    """The page loads this checkout's build (its remoteEntry file), not another copy."""
    ours = sorted(p.name for p in (BUILD / "static").glob("remoteEntry.*.js"))
    with urllib.request.urlopen(f"{url}/lab?token={token}", timeout=30) as resp:
        page = resp.read().decode()
    m = re.search(r'"name":\s*"kf-jupyter-labextension"[^}]*"load":\s*"([^"]+)"', page)
    if m is None:  # key order differs: look for the load path near our name
        m = re.search(r'"load":\s*"(static/remoteEntry[^"]+)"[^}]*"name":\s*"kf-jupyter', page)
    assert m is not None, "JupyterLab does not load kf-jupyter-labextension"
    assert m.group(1).rsplit("/", 1)[-1] in ours, (m.group(1), ours)


def write_notebook(lab: dict, name: str, cells: list[str]) -> None:
    """Put a notebook of code cells into the lab's notebook folder."""
    (lab["notebooks"] / name).write_text(json.dumps(_notebook(cells)))


def write_monitor_notebook(lab: dict, name: str, job: str) -> None:
    """Put a notebook of one cell into the lab's notebook folder that, run, shows local job
    `job`'s live monitor (the display payload a `--no-wait` cell's output carries)."""
    payload = {"version": 1, "name": job, "backend": "local", "runtime": ""}
    write_notebook(
        lab,
        name,
        [
            "from IPython.display import display\n"
            f"display({{'application/vnd.kf-jupyter.job+json': {payload!r}}}, raw=True)"
        ],
    )


@contextmanager
def held_widget_job(lab: dict, nb: str, name: str, *cells: str) -> Iterator[tuple[Any, Path]]:
    """A notebook `nb` in the lab: `%load_ext kf_jupyter`, then `cells`, each formatted with
    the job's `name` and `gate` (a file the job waits for, so it stays held where the test
    wants it until the test creates the file). Yields the lab's job client and the gate; after
    the block the gate is created and the job deleted, whatever happened in it."""
    from kf_jupyter import LocalBackendConfig, TrainerClient

    gate = lab["state"].parent / f"gate-{name}"
    write_notebook(
        lab, nb, ["%load_ext kf_jupyter", *(c.format(name=name, gate=str(gate)) for c in cells)]
    )
    client = TrainerClient(LocalBackendConfig(state_dir=lab["state"]))
    try:
        yield client, gate
    finally:
        gate.touch()
        if name in {j.name for j in client.list_jobs()}:
            client.delete_job(name)


def open_notebook(page: Any, lab: dict, name: str, theme: str | None = None) -> None:
    """Open a notebook in the page and wait until its kernel is idle (and, given a `theme`, until
    the page shows that theme)."""
    from playwright.sync_api import expect

    # ?reset: a fresh layout with this notebook only (no tabs restored from earlier tests)
    page.goto(f"{lab['url']}/lab/tree/{name}?reset&token={lab['token']}")
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
    expect(page.locator(".jp-StatusBar-Widget", has_text="| Idle")).to_have_count(1, timeout=90_000)
    if theme is not None:
        expect_theme(page, theme)


#: The two themes the views are checked in (a test parametrized over them runs in each).
THEMES = ["JupyterLab Light", "JupyterLab Dark"]


def theme_slug(theme: str) -> str:
    """The word a test names its notebooks and screenshots after: "dark" or "light"."""
    return "dark" if "Dark" in theme else "light"


def set_theme(lab: dict, theme: str) -> None:
    """Make `theme` the lab's theme for the pages opened from now on (its user settings)."""
    settings = lab["state"].parent / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))


@contextmanager
def lab_theme(lab: dict, theme: str) -> Iterator[str]:
    """The lab in `theme` for the block (which gets its slug), back to the light theme after it,
    so the module's next tests start in the default theme whatever this one did."""
    set_theme(lab, theme)
    try:
        yield theme_slug(theme)
    finally:
        set_theme(lab, "JupyterLab Light")


def expect_theme(page: Any, theme: str) -> None:
    """Wait until the open page is drawn in `theme` (JupyterLab's light/dark body attribute)."""
    from playwright.sync_api import expect

    expect(page.locator("body")).to_have_attribute(
        "data-jp-theme-light", "false" if theme_slug(theme) == "dark" else "true", timeout=30_000
    )


@contextmanager
def browser_page(failure_png: str, width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A page of Debian's Chromium (its own browser context) for the block; if the block raises,
    a screenshot goes to tests/artifacts/`failure_png` first (of this page, or if it was closed
    of the newest page still open: see `fresh_page`). The browser is closed after the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": width, "height": height}).new_page()
        try:
            yield page
        except Exception:
            open_pages = [p for c in browser.contexts for p in c.pages if not p.is_closed()]
            shown = page if not page.is_closed() else (open_pages or [None])[-1]
            if shown is not None:
                shown.screenshot(path=str(ARTIFACTS / failure_png))
            raise
        finally:
            browser.close()


def fresh_page(page: Any, width: int = 1400, height: int = 1000) -> Any:
    """A new page of `page`'s browser in a context of its own (no cookie or storage of the
    others): the notebook opened again as after closing the browser tab."""
    return page.context.browser.new_context(viewport={"width": width, "height": height}).new_page()


def run_first_cell_in_notebook7(page: Any, shown: Any) -> None:
    """Run the first cell of a Jupyter Notebook 7 page until `shown` (a locator of what the cell
    displays) is there once: the kernel may still be starting, so up to three tries, and a
    dialog asking which kernel to start (others run on this server) is accepted."""
    from playwright.sync_api import expect

    editor = page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-editor").first
    for _ in range(3):
        select = page.locator(".jp-Dialog .jp-mod-accept", has_text="Select")
        if select.count():
            select.click()
        editor.click()
        page.keyboard.press("Escape")
        page.keyboard.press("Control+Enter")
        try:
            expect(shown).to_have_count(1, timeout=30_000)
            break
        except AssertionError:
            continue


def run_cells(page: Any, count: int) -> None:
    """Run the notebook's first `count` cells from the top as a person does: click into the
    first cell, Escape to command mode, Shift+Enter once a cell."""
    page.locator(".jp-Notebook .jp-CodeCell .jp-InputArea-editor").first.click()
    page.keyboard.press("Escape")
    for _ in range(count):
        page.keyboard.press("Shift+Enter")


#: Every text node of our views, its colour against the background it is drawn on (alpha
#: blended up the ancestors): the WCAG 2 contrast ratio, and those under 4.5:1.
CONTRAST_JS = """
(selector) => {
  const parse = s => {
    const m = /rgba?\\(([^)]+)\\)/.exec(s || '');
    if (!m) return [0, 0, 0, 0];
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, below) => {
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)).concat([1]);
  };
  const background = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let bg = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
    return bg;
  };
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const bad = [];
  let checked = 0;
  for (const root of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode;
      if (!node.textContent.trim()) continue;
      const el = node.parentElement;
      const cs = getComputedStyle(el);
      const rect = el.getBoundingClientRect();
      if (rect.width === 0 || rect.height === 0 || cs.visibility === 'hidden') continue;
      if (el.closest('[disabled], option')) continue;  // disabled controls: exempt (WCAG 1.4.3)
      const svg = el instanceof SVGElement;
      const bg = background(svg ? el.closest('svg') || el : el);
      const fg = over(parse(svg ? cs.fill : cs.color), bg);
      const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
      const ratio = (hi + 0.05) / (lo + 0.05);
      checked++;
      if (ratio < 4.5) {
        bad.push({text: node.textContent.trim().slice(0, 40), cls: String(el.className.baseVal ?? el.className),
                  fg: cs.color, ratio: Math.round(ratio * 100) / 100});
      }
    }
  }
  return {checked, bad};
}
"""


def assert_readable(page: Any, selector: str, what: str, min_checked: int | None = 5) -> None:
    """Every text in the elements `selector` matches is at 4.5:1 or more against what it is
    drawn on (more than `min_checked` texts were checked, unless None), and axe-core finds no
    violation there; `what` names the state in a failure."""
    found = page.evaluate(CONTRAST_JS, selector)
    if min_checked is not None:
        assert found["checked"] > min_checked, (what, found)
    assert found["bad"] == [], (what, found["bad"])
    assert axe_violations(page, selector) == [], what


def axe_violations(page: Any, selector: str) -> list[dict]:
    """axe-core's violations (the axe.min.js of the pip package axe-playwright-python) in the
    elements `selector` matches: our views, not JupyterLab's own."""
    from importlib.resources import files

    page.add_script_tag(path=str(files("axe_playwright_python") / "axe.min.js"))
    result = page.evaluate(
        """async sel => {
             const include = [...document.querySelectorAll(sel)].map(e => e);
             const r = await axe.run({include}, {resultTypes: ['violations']});
             return r.violations.map(v => ({id: v.id, help: v.help,
               nodes: v.nodes.slice(0, 5).map(n => n.target.join(' '))}));
           }""",
        selector,
    )
    return result
