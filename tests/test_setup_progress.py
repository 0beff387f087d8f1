"""scripts/setup.sh says what it is doing and keeps the tools' noise in a log (issue 22).

The first run took 18 minutes, 13 of them silent, then printed about 3,200 lines of yarn.
Now each step is one line (what it installs, what it downloads, about how long), the output of
apt, pip and jlpm goes to setup.log, a failing step shows the last lines of that log and its
path, and a run with nothing to do says so in one line.

Real runs of the script: a fresh virtualenv whose package step fails (no package index), and
the set-up of this checkout, already done.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_each_step_is_one_line_and_a_failure_shows_the_log(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    shutil.copytree(ROOT / "requirements", repo / "requirements")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copytree(  # as a fresh clone has it: sources, no node_modules
        ROOT / "labextension", repo / "labextension",
        ignore=shutil.ignore_patterns("node_modules", "lib", ".yarn", "*.tsbuildinfo"),
    )  # fmt: skip
    env = {
        **os.environ,
        # no index and no local wheels: pip's first download fails, quickly and for real
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": "",
        "PIP_CONFIG_FILE": os.devnull,
    }
    proc = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=repo, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode != 0
    out = proc.stdout.splitlines()
    log = repo / "setup.log"
    assert out[0] == f"setup: output of the tools goes to {log}"
    assert out[1].startswith("setup: a virtualenv in .venv (Python 3.")
    assert "(under a minute) ... done (" in out[1]
    assert out[1].endswith(" s)") and " ... done (" in out[1]
    # the first download: jlpm, for the lab extension's packages fetched while pip works
    assert out[2] == (
        "setup: jlpm, the lab extension's package manager (jupyter-builder; seconds) ... FAILED"
    )
    assert len(out) == 3, proc.stdout  # nothing of pip's on the terminal
    err = proc.stderr
    assert "No matching distribution found for jupyter-builder" in err  # the cause, from the log
    assert f"the whole output is in {log}" in err
    assert "No matching distribution found for jupyter-builder" in log.read_text()
    assert "== " in log.read_text()  # each step's heading


def test_a_second_run_has_nothing_to_do() -> None:
    setup_sum = subprocess.run(
        "cat pyproject.toml requirements/*.txt | sha256sum | cut -c1-16",
        shell=True, cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    stamp = ROOT / ".venv" / ".kf-setup-stamp"
    if not stamp.is_file() or stamp.read_text().strip() != setup_sum:
        pytest.skip("this checkout's requirements changed since its set-up: run scripts/setup.sh")
    before = (ROOT / "setup.log").stat().st_mtime_ns if (ROOT / "setup.log").exists() else None
    proc = subprocess.run(
        ["bash", "scripts/setup.sh"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    if len(lines) > 1:  # the lab extension's sources changed since its build: one step, logged
        assert lines[1].startswith("setup: the JupyterLab extension ("), proc.stdout
        return
    assert lines == [lines[0]] and lines[0].startswith("setup: ready (Python 3.")
    assert lines[0].endswith("; nothing to do)")
    after = (ROOT / "setup.log").stat().st_mtime_ns if (ROOT / "setup.log").exists() else None
    assert after == before  # the last real run's log is kept
