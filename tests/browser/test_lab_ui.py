"""Real-browser test: JupyterLab + the kf-jupyter lab extension in Debian's Chromium (Playwright).

Starts `jupyter lab` (a subprocess, own token, temp notebook dir and job store), runs a notebook
cell `%%torchtrain -n 1 -p 2` on the local backend, and checks what a user sees: the job in the
"Kubeflow Trainer" sidebar reaching Complete, and its log panel showing lines from both ranks.
Screenshots go to tests/artifacts/ (gitignored).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

CELLS = [
    "%load_ext kf_jupyter",
    "%%torchtrain -n 1 -p 2\nimport os\nprint(f\"hello from rank {os.environ['RANK']}\", flush=True)",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A running JupyterLab with the kf-jupyter server extension on a temp job store."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    if not (ROOT / "kf_jupyter" / "labextension" / "package.json").exists():
        pytest.skip("the lab extension is not built (bash scripts/build-labextension.sh)")
    tmp = tmp_path_factory.mktemp("lab")
    notebooks, state, config, settings = (tmp / d for d in ("nb", "state", "config", "settings"))
    for d in (notebooks, state, config, settings / "@jupyterlab" / "apputils-extension"):
        d.mkdir(parents=True)
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"kf_jupyter": True}}})
    )
    # no "receive Jupyter news?" toast over the UI
    (
        settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    ).write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    (notebooks / "train.ipynb").write_text(json.dumps(_notebook(CELLS)))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        KF_JUPYTER_STATE_DIR=str(state),
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
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
        yield {
            "url": f"http://127.0.0.1:{port}",
            "token": token,
            "state": state,
            "log": tmp / "lab.log",
        }
    finally:
        # stop the server and its kernels (own process group, started above)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp / "lab.log", ARTIFACTS / "lab-server.log")


def test_torchtrain_cell_shows_up_in_sidebar_and_log_panel(lab: dict) -> None:
    from playwright.sync_api import expect, sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{lab['url']}/lab/tree/train.ipynb?token={lab['token']}")
            # the notebook is open and its kernel is idle
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=90_000)
            expect(page.locator(".jp-StatusBar-Widget", has_text="| Idle")).to_have_count(
                1, timeout=90_000
            )
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
