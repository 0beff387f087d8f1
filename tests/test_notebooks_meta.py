"""The stored tutorial notebooks, as a reader and CI see them (fast: no kernel is started).

nbval (scripts/test.sh) re-executes them and compares the checked cells; these tests check what
nbval cannot: each says what it teaches first, its stored outputs come from a clean run (no
errors, no stray outputs beside the job monitor, nothing left running, under a minute), the
deterministic cells are really checked, and the sanitize file does its job.
"""

from __future__ import annotations

import configparser
import re
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from kf_jupyter.build import generate_name

REPO = Path(__file__).resolve().parents[1]
NB_DIR = REPO / "notebooks"
NOTEBOOKS = [
    "01-quickstart.ipynb",
    "02-mpi.ipynb",
    "03-jax.ipynb",
    "04-xgboost.ipynb",
    "05-config-and-options.ipynb",
    "06-kubernetes.ipynb",
    "07-metrics.ipynb",
    "08-progress.ipynb",
    "09-transformers.ipynb",
    "10-sweeps.ipynb",
]
TRAIN_MAGICS = (
    "%%torchtrain",
    "%%mpitrain",
    "%%jaxtrain",
    "%%xgboosttrain",
    "%%transformerstrain",
)
WIDGET = "application/vnd.jupyter.widget-view+json"


def _load(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NB_DIR / name, as_version=4)


def _code(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code"]


def _checked(cell: nbformat.NotebookNode) -> bool:
    return cell.source.lstrip().startswith("# NBVAL_CHECK_OUTPUT") or (
        "nbval-check-output" in cell.metadata.get("tags", [])
    )


def _stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def _training_source(cell: nbformat.NotebookNode) -> str | None:
    """The magic line of a training cell that submits a job (not a dry run), else None."""
    lines = cell.source.splitlines()
    if lines and lines[0].strip() == "%%if_cluster":
        lines = lines[1:]
    if lines and lines[0].startswith(TRAIN_MAGICS) and "--dry-run" not in lines[0]:
        return lines[0]
    return None


def test_the_tutorials_are_there_and_nothing_else():
    assert sorted(p.name for p in NB_DIR.glob("*.ipynb")) == NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_first_cell_says_what_the_notebook_teaches(name):
    first = _load(name).cells[0]
    assert first.cell_type == "markdown"
    number = name[:2]
    assert first.source.startswith(f"# {number} · ")
    assert "**What this notebook teaches:**" in first.source


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_stored_outputs_come_from_one_clean_run_in_the_venv_kernel(name):
    nb = _load(name)
    assert nb.metadata.kernelspec.name == "python3"
    counts = [c.execution_count for c in _code(nb)]
    assert all(counts), f"{name}: unexecuted cells"
    assert counts == sorted(counts) and len(set(counts)) == len(counts), counts
    for cell in _code(nb):
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
        if "--dry-run" not in cell.source:  # a dry run notes on stderr that no cluster was asked
            assert not [o for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_recorded_run_took_under_a_minute(name):
    nb = _load(name)
    marks = [c.metadata.get("execution") for c in _code(nb)]
    assert all(marks), f"{name}: executed without timing (use nbclient / nbconvert --execute)"

    def at(stamp: str) -> datetime:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

    span = at(max(m["shell.execute_reply"] for m in marks)) - at(
        min(m["iopub.execute_input"] for m in marks)
    )
    assert span.total_seconds() < 60, f"{name}: {span.total_seconds():.1f} s"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_training_cells_show_only_the_monitor_and_their_results_are_checked(name):
    cells = _code(_load(name))
    trains = [i for i, c in enumerate(cells) if _training_source(c)]
    if name == "05-config-and-options.ipynb":
        assert not trains  # dry runs only
        return
    if name == "10-sweeps.ipynb":
        _check_sweep_cells(cells, trains)
        return
    assert len(trains) == 1, name
    i = trains[0]
    train = cells[i]
    assert " -o job" in _training_source(train)
    # The monitor is the cell's only output (no stray prints from its threads), and the job
    # left its static rendering there: plain HTML + text that show anywhere, no widget.
    assert [o.output_type for o in train.outputs] == ["display_data"]
    data = train.outputs[0].data
    assert set(data) == {"text/html", "text/plain"}, set(data)
    assert WIDGET not in data
    assert "kf-monitor-static kf-status-complete" in data["text/html"]
    assert "##kf-jupyter" not in data["text/html"] + data["text/plain"]
    # The next cell prints the status and the result, and nbval compares it.
    result = cells[i + 1]
    assert _checked(result)
    assert _stdout(result).startswith("Complete\n")


def _check_sweep_cells(cells: list[nbformat.NotebookNode], trains: list[int]) -> None:
    """The sweep notebook: a local sweep, then the same on a cluster (guarded). The local one's
    only output is the sweep's static view (table and curves, no widget, no live MIME type), and
    the next cell checks the result with the SDK's OptimizerClient."""
    assert len(trains) == 2
    local, cluster = (cells[i] for i in trains)
    assert " --sweep " in _training_source(local) and " -o sweep" in _training_source(local)
    assert cluster.source.startswith("%%if_cluster\n%%torchtrain --backend kubernetes")
    assert [o.output_type for o in local.outputs] == ["display_data"]
    data = local.outputs[0].data
    assert set(data) == {"text/html", "text/plain"}, set(data)
    assert "kf-sweep-static" in data["text/html"] and "data-status='Complete'" in data["text/html"]
    assert "<img" in data["text/html"] and "★ best" in data["text/html"]
    result = cells[trains[0] + 1]
    assert _checked(result) and _stdout(result).startswith("Complete ")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_ends_by_checking_that_no_job_keeps_running(name):
    cells = _code(_load(name))
    last_train = max((i for i, c in enumerate(cells) if _training_source(c)), default=-1)
    finals = [
        c
        for c in cells[last_train + 1 :]
        if _checked(c) and "list_jobs()" in c.source and "Running" in c.source
    ]
    assert finals, f"{name}: no checked cell lists the unfinished jobs after the last job"
    assert "jobs still running: []" in _stdout(finals[-1])


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_deterministic_cells_are_checked(name):
    checked = [c for c in _code(_load(name)) if _checked(c)]
    assert len(checked) >= 3, name
    for c in checked:
        assert c.outputs, f"{name}: checked cell without stored output: {c.source[:60]!r}"


def test_cluster_notebook_was_recorded_against_a_cluster_and_skips_without_one():
    cells = _code(_load("06-kubernetes.ipynb"))
    probe = _stdout(cells[1])
    assert probe.startswith("cluster reachable: ")
    assert "except KFJupyterError" in cells[1].source and "CLUSTER = False" in cells[1].source
    guarded = [c for c in cells[3:] if "CLUSTER" in c.source or c.source.startswith("%%if_cluster")]
    # every cell after the probe that talks to the cluster is guarded
    for c in cells[3:]:
        if "k8s." in c.source or "job." in c.source or "{job.name}" in c.source:
            assert c in guarded, c.source
    assert _stdout(cells[-2]).strip() == "No jobs."


def test_sanitize_file_masks_job_names_and_times():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "tests" / "nbval-sanitize.cfg")
    rules = [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]
    assert rules

    def clean(text: str) -> str:
        for rx, repl in rules:
            text = rx.sub(repl, text)
        return text

    a = f"Deleted job {generate_name('torch')} at 12:01:02 on 127.0.0.1:40213 pid 4711"
    b = f"Deleted job {generate_name('torch')} at 09:59:58 on 127.0.0.1:29500 pid 17"
    assert clean(a) == clean(b)
    assert clean("{'world_size': 4, 'weight': 3.0}") == "{'world_size': 4, 'weight': 3.0}"


def test_ci_runs_the_notebooks_with_nbval_and_the_sanitize_file():
    assert "bash scripts/test-notebooks.sh" in (REPO / "scripts" / "test.sh").read_text()
    script = (REPO / "scripts" / "test-notebooks.sh").read_text()
    line = next(ln for ln in script.splitlines() if "--nbval-lax" in ln)
    assert "--nbval-current-env" in line
    assert "--nbval-sanitize-with tests/nbval-sanitize.cfg" in script
    assert "-p tests.nbval_tutorials" in script
    # the committed tutorials, copied out of the repository (tests/committed_tutorials.py)
    assert '-m tests.committed_tutorials "$tut/notebooks"' in script
    assert '"$tut/notebooks"' in script.split("--nbval-lax", 1)[1]
