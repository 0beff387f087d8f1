"""The first ten minutes: `bash scripts/run.sh` opens the quickstart itself, without news (Chromium).

run.sh starts JupyterLab as a user gets it (set-up skipped with KF_SKIP_SETUP=1, from a copy of
the repository's scripts, tutorials and config so that saving cannot touch the repository); the test opens the URL it
prints, as a user would, and saves the notebook as JupyterLab's autosave does: into the working
copy my-tutorials/, never into notebooks/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from .conftest import ARTIFACTS, BUILD, CHROMIUM, CHROMIUM_ARGS, LABEXT, ROOT, _free_port, stop_lab

pytestmark = pytest.mark.slow


def _strip_volatile(nb: dict) -> dict:
    """What a reader and the tests see (JupyterLab may reorder keys or add cell ids)."""
    nb = json.loads(json.dumps(nb))
    for cell in nb["cells"]:
        cell.pop("id", None)
    return nb


def test_run_sh_opens_the_quickstart_without_the_news_popup(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    if not (ROOT / "kf_jupyter" / "labextension" / "package.json").exists():
        pytest.skip("the lab extension is not built (bash scripts/build-labextension.sh)")
    from playwright.sync_api import expect, sync_playwright

    # A copy of the parts of the repository run.sh uses (the same venv).
    repo = tmp_path / "repo"
    for part in ("scripts", "notebooks", "jupyter-config"):
        shutil.copytree(ROOT / part, repo / part)
    (repo / ".venv").symlink_to((ROOT / ".venv").resolve())
    nbdir = repo / "notebooks"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(
        KF_SKIP_SETUP="1",
        KF_JUPYTER_STATE_DIR=str(tmp_path / "state"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "user-settings"),  # a first-time user's
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
    )
    # this checkout's build of the lab extension first on the labextensions path
    labext = tmp_path / "jupyter-path" / "labextensions"
    labext.mkdir(parents=True)
    (labext / LABEXT).symlink_to(BUILD.resolve())
    env["JUPYTER_PATH"] = str(tmp_path / "jupyter-path")
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(
        ["bash", str(repo / "scripts" / "run.sh"), "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        url = None
        while url is None:
            m = re.search(r"http://127\.0\.0\.1:\d+/\S+", (tmp_path / "run.log").read_text())
            if m:
                url = m.group(0)
            elif proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"run.sh did not print a URL:\n{(tmp_path / 'run.log').read_text()}")
            else:
                time.sleep(0.3)
        # What the README says it prints: the quickstart's own URL.
        assert re.fullmatch(
            rf"http://127\.0\.0\.1:{port}/lab/tree/01-quickstart\.ipynb\?token=[0-9a-f]+", url
        ), url
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            try:
                page.goto(url)
                tab = page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current")
                expect(tab).to_contain_text("01-quickstart.ipynb", timeout=90_000)
                page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
                assert page.locator(".jp-Launcher").count() == 0
                # The news question is not what a first-time user sees: give it time to come.
                page.wait_for_timeout(5000)
                assert page.get_by_text("Jupyter news").count() == 0
                assert page.locator(".jp-toast-message").count() == 0
                page.screenshot(path=str(ARTIFACTS / "run-sh-quickstart.png"))
                # Save it as autosave would: the stored tutorial must stay what the tests read.
                page.locator(".jp-Notebook").first.click()
                page.keyboard.press("Control+s")
                expect(tab).not_to_have_class(re.compile("jp-mod-dirty"), timeout=30_000)
                page.wait_for_timeout(1000)
            finally:
                browser.close()
        # It saved into the working copy (my-tutorials/), which holds the tutorial unchanged;
        # the tracked one is not touched at all.
        before = nbformat.read(ROOT / "notebooks" / "01-quickstart.ipynb", as_version=4)
        after = nbformat.read(repo / "my-tutorials" / "01-quickstart.ipynb", as_version=4)
        assert _strip_volatile(after) == _strip_volatile(before)
        assert (nbdir / "01-quickstart.ipynb").read_bytes() == (
            ROOT / "notebooks" / "01-quickstart.ipynb"
        ).read_bytes()
    finally:
        stop_lab(proc, log, None, None)
