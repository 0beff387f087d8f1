"""The README's two commands in either order (issue 22): `scripts/run.sh` serves a working copy
of the tutorials (my-tutorials/, made once, never overwritten) and the tutorial tests run the
committed tutorials, whatever a user saved into notebooks/.

Fast: what tests/committed_tutorials.py exports, with and without git history. Slow: the real
nbval run (scripts/test-notebooks.sh) of a repository whose tutorial a user edited, and run.sh
starting a real JupyterLab whose saves (the contents API autosave uses) land in the copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from kf_jupyter.backends.local.ports import free_port as _free_port
from tests.committed_tutorials import export

ROOT = Path(__file__).resolve().parents[1]
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=m"]


def _notebook(*cells: str) -> str:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nbformat.writes(nb)


def _commit_all(repo: Path) -> None:
    subprocess.run([*GIT, "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "tutorials"], check=True)


def test_the_committed_tutorials_are_tested_not_the_users_edits(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    committed = _notebook("print(2 + 2)")
    (repo / "notebooks" / "01-a.ipynb").write_text(committed)
    (repo / "notebooks" / "02-b.ipynb").write_text(_notebook("x = 1"))
    _commit_all(repo)
    (repo / "notebooks" / "01-a.ipynb").write_text(_notebook("print(2 + 2)", "raise ValueError"))
    (repo / "notebooks" / "mine.ipynb").write_text(_notebook("raise ValueError"))
    notes = export(repo, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["01-a.ipynb", "02-b.ipynb"]
    assert (tmp_path / "out" / "01-a.ipynb").read_text() == committed
    assert any("notebooks/01-a.ipynb differs from the committed version" in n for n in notes)
    assert any("notebooks/mine.ipynb is not committed" in n for n in notes)
    assert len(notes) == 2
    # the user's files are untouched
    assert "raise ValueError" in (repo / "notebooks" / "01-a.ipynb").read_text()


def test_a_clone_without_git_history_tests_notebooks_as_they_are(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    (repo / "notebooks" / "01-a.ipynb").write_text(_notebook("print(1)"))
    (repo / "notebooks" / ".ipynb_checkpoints").mkdir()
    assert export(repo, tmp_path / "out") == []
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["01-a.ipynb"]


def _mini_repo(tmp_path: Path) -> Path:
    """What scripts/test-notebooks.sh and scripts/run.sh need, with this checkout's venv."""
    repo = tmp_path / "repo"
    for part in ("scripts", "jupyter-config"):
        shutil.copytree(ROOT / part, repo / part)
    (repo / "tests").mkdir()
    for name in (
        "__init__.py",
        "committed_tutorials.py",
        "nbval_tutorials.py",
        "nbval-sanitize.cfg",
    ):
        shutil.copy(ROOT / "tests" / name, repo / "tests" / name)
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy(ROOT / ".gitignore", repo / ".gitignore")
    (repo / ".venv").symlink_to((ROOT / ".venv").resolve())
    (repo / "notebooks").mkdir()
    return repo


@pytest.mark.slow
def test_the_notebook_tests_pass_after_a_user_edited_a_tutorial(tmp_path: Path) -> None:
    repo = _mini_repo(tmp_path)
    (repo / "notebooks" / "01-quickstart.ipynb").write_text(_notebook("print(6 * 7)"))
    _commit_all(repo)
    # What JupyterLab saved when a user worked in the tracked tutorial (the old run.sh served it)
    (repo / "notebooks" / "01-quickstart.ipynb").write_text(
        _notebook("print(6 * 7)", "raise RuntimeError('half-done cell of the user')")
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("KF_TEST_NOTEBOOKS", None)
    proc = subprocess.run(
        ["bash", "scripts/test-notebooks.sh", "-q"], cwd=repo, env=env,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "1 passed" in out, out
    assert "notebooks/01-quickstart.ipynb differs from the committed version" in out
    assert "half-done" in (repo / "notebooks" / "01-quickstart.ipynb").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("kf-tutorials")] == []


def _start_run_sh(repo: Path, tmp_path: Path, log_name: str) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env.update(
        KF_SKIP_SETUP="1",
        KF_JUPYTER_STATE_DIR=str(tmp_path / "state"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "user-settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
    )
    log = tmp_path / log_name
    with log.open("w") as fh:
        proc = subprocess.Popen(
            ["bash", "scripts/run.sh", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1"],
            cwd=repo, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        m = re.search(r"http://127\.0\.0\.1:\d+/\S+\?token=([0-9a-f]+)", log.read_text())
        if m:
            return proc, m.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"run.sh did not print a URL:\n{log.read_text()}")
        time.sleep(0.3)


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def _api(port_url: str, token: str, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(
        f"{port_url}/api/contents/{path}",
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "PUT",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
def test_run_sh_serves_a_working_copy_that_a_second_run_keeps(tmp_path: Path) -> None:
    repo = _mini_repo(tmp_path)
    shutil.copy(ROOT / "notebooks" / "01-quickstart.ipynb", repo / "notebooks")
    shutil.copy(ROOT / "notebooks" / "02-mpi.ipynb", repo / "notebooks")
    original = (repo / "notebooks" / "01-quickstart.ipynb").read_bytes()
    proc, token = _start_run_sh(repo, tmp_path, "run1.log")
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+", (tmp_path / "run1.log").read_text())
        assert url is not None
        base = url.group(0)
        nb = _api(base, token, "01-quickstart.ipynb")
        nb["content"]["cells"].append(nbformat.v4.new_code_cell("print('my own cell')"))
        # what JupyterLab's save and autosave do
        _api(base, token, "01-quickstart.ipynb", {"type": "notebook", "content": nb["content"]})
    finally:
        _stop(proc)
    log1 = (tmp_path / "run1.log").read_text()
    assert "copied 2 tutorial(s) from notebooks/" in log1, log1
    assert (repo / "notebooks" / "01-quickstart.ipynb").read_bytes() == original
    mine = repo / "my-tutorials" / "01-quickstart.ipynb"
    assert "my own cell" in mine.read_text()
    # git does not see the copy
    subprocess.run([*GIT, "init", "-q", str(repo)], check=True)
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--", "my-tutorials"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert status.stdout == ""
    # A second run (a new tutorial arrived meanwhile): the user's edit stays, the new one is copied.
    (repo / "my-tutorials" / "02-mpi.ipynb").unlink()
    proc, _ = _start_run_sh(repo, tmp_path, "run2.log")
    _stop(proc)
    log2 = (tmp_path / "run2.log").read_text()
    assert "copied 1 tutorial(s)" in log2, log2
    assert "my own cell" in mine.read_text()
    assert (repo / "my-tutorials" / "02-mpi.ipynb").read_bytes() == (
        repo / "notebooks" / "02-mpi.ipynb"
    ).read_bytes()


# -- the README's two commands, in either order, on a fresh clone ----------------------------

USERS_CELL = "raise RuntimeError('my half-done experiment')"


def _fresh_clone(tmp_path: Path) -> Path:
    """`git clone` of this repository, with this checkout's venv (as KF_SKIP_SETUP=1 reuses
    it: .venv is ignored by git, so the clone stays clean)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    (clone / ".venv").symlink_to((ROOT / ".venv").resolve())
    # .gitignore's `.venv/` matches the folder setup.sh makes, not this link standing in for it
    with (clone / ".git" / "info" / "exclude").open("a") as fh:
        fh.write("/.venv\n")
    assert _git_status(clone) == ""
    return clone


def _git_status(clone: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(clone), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def _run_and_edit_the_quickstart(clone: Path, tmp_path: Path) -> None:
    """`bash scripts/run.sh`, then what a user does in the lab: the quickstart opens as
    committed, they add a cell and JupyterLab saves it; then Ctrl+C (SIGTERM here)."""
    proc, token = _start_run_sh(clone, tmp_path, "run.log")
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+", (tmp_path / "run.log").read_text())
        assert url is not None
        nb = _api(url.group(0), token, "01-quickstart.ipynb")
        committed = nbformat.read(clone / "notebooks" / "01-quickstart.ipynb", as_version=4)
        assert [c["source"] for c in nb["content"]["cells"]] == [c.source for c in committed.cells]
        nb["content"]["cells"].append(nbformat.v4.new_code_cell(USERS_CELL))
        _api(
            url.group(0),
            token,
            "01-quickstart.ipynb",
            {"type": "notebook", "content": nb["content"]},
        )
    finally:
        _stop(proc)


def _tutorial_tests(clone: Path, tmp_path: Path, tutorial: str) -> None:
    """The tutorial part of `bash scripts/test.sh`: nbval of one tutorial (its notebooks step,
    `scripts/test-notebooks.sh -k TUTORIAL`) and the stored tutorials' own tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KF_", "JUPYTER"))}
    env["TMPDIR"] = str(tmp_path)
    for cmd, passed in (
        (["bash", "scripts/test-notebooks.sh", "-q", "-k", tutorial], r"\d+ passed"),
        ([".venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
          "tests/test_notebooks_meta.py"], r"\d+ passed"),
    ):  # fmt: skip
        proc = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out
        assert re.search(passed, out) and "failed" not in out, out


@pytest.mark.slow
@pytest.mark.parametrize("order", ["run-then-test", "test-then-run"])
def test_the_readmes_two_commands_in_either_order_on_a_fresh_clone(tmp_path: Path, order: str):
    """Run first: the user's saved edit to the quickstart must not fail the quickstart's nbval
    or the tutorials' tests. Tests first: they must leave the clone as cloned, so that run.sh
    serves the tutorials as committed (nbval of 05, all dry runs, to keep this under about two
    minutes; the quickstart's 4-rank job takes 20-80 s depending on the machine's load)."""
    clone = _fresh_clone(tmp_path)
    committed = (clone / "notebooks" / "01-quickstart.ipynb").read_bytes()
    if order == "run-then-test":
        _run_and_edit_the_quickstart(clone, tmp_path)
        _tutorial_tests(clone, tmp_path, "01-quickstart")
    else:
        _tutorial_tests(clone, tmp_path, "05-config-and-options")
        assert _git_status(clone) == ""  # the tests left nothing in the repository
        _run_and_edit_the_quickstart(clone, tmp_path)
    # What a user checks: notebooks/ as committed (`git status` shows nothing), and their own
    # edit still in their copy after the tests ran.
    assert _git_status(clone) == ""
    assert (clone / "notebooks" / "01-quickstart.ipynb").read_bytes() == committed
    assert USERS_CELL in (clone / "my-tutorials" / "01-quickstart.ipynb").read_text()
    assert not (clone / "notebooks" / ".ipynb_checkpoints").exists()
