"""Whole notebooks executed by nbclient in a real kernel (slow): the monitor, -o, dry-run,
free names, syntax errors and the interrupt path, as a user running the notebook sees them."""

from __future__ import annotations

import copy
import threading
import time

import nbformat
import pytest
import yaml
from jupyter_client.utils import run_sync
from nbclient import NotebookClient

from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.client import TrainerClient
from tests.manifests import assert_valid_trainjob

pytestmark = pytest.mark.slow

TRAIN_CELL = """%%torchtrain -n 1 -p 2 --args lr -o job
import os
import kf_jupyter
for s in range(4):
    kf_jupyter.report(step=s, progress=(s + 1) / 4, loss=1.0 / (s + 1))
    print("step", s, "rank", os.environ["RANK"], flush=True)
return {"lr": lr, "world": int(os.environ["WORLD_SIZE"])}
"""


def _nb(*cells: str | tuple[str, list[str]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for c in cells:
        src, tags = (c, []) if isinstance(c, str) else c
        cell = nbformat.v4.new_code_cell(src)
        cell.metadata["tags"] = tags
        nb.cells.append(cell)
    return nb


def _text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for o in cell.outputs:
        if o.output_type == "stream":
            parts.append(o.text)
        elif o.output_type == "error":
            parts.append(o.ename + ": " + o.evalue + "\n" + "\n".join(o.traceback))
        elif "text/plain" in o.get("data", {}):
            parts.append(o.data["text/plain"])
    return "\n".join(parts)


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    yield tmp_path / "state"
    client = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    for j in client.list_jobs():
        client.delete_job(j.name)


def test_notebook_torch_cell_monitor_result_dryrun_freenames_syntax(state_dir, tmp_path):
    nb = _nb(
        "%load_ext kf_jupyter",
        "lr = 0.25",
        TRAIN_CELL,
        "print(job.status, job.result)",
        "%%torchtrain --backend kubernetes --dry-run --runtime torch-distributed --name nb-dry\n"
        "import torch\nprint(torch.__version__)\n",
        "%%torchtrain --dry-run\nprint(undefined_thing)\n",
        ("%%torchtrain\nx = 1\nif x >\n    pass\n", ["raises-exception"]),
        "%kf_jobs",
    )
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    train = nb.cells[2]
    # No stray outputs: the training cell shows the monitor and nothing else.
    assert [o.output_type for o in train.outputs] == ["display_data"], train.outputs
    # When the job ended the live monitor was replaced by its static rendering: plain HTML and
    # text that a saved notebook shows anywhere (no widget, no live MIME type, no JS).
    data = train.outputs[0].data
    assert set(data) == {"text/html", "text/plain"}, set(data)
    static = data["text/html"]
    assert "kf-monitor-static" in static and "data-status='Complete'" in static
    assert "step 3 rank 0" in static and "step 3 rank 1" in static
    assert "data:image/svg+xml;base64," in static and "alt='loss: " in static
    assert "width:100%" in static
    assert "##kf-jupyter" not in static and "<script" not in static
    assert data["text/plain"].startswith("Job ") and ": Complete" in data["text/plain"]
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(nb)
    assert "kf-monitor-static" in page and "VBox(children=" not in page
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    values = [m["state"].get("value", "") for m in state.values() if m["model_name"] == "HTMLModel"]
    log = next(v for v in values if "kf-log" in str(v))
    assert "[rank-0]</span> step 3 rank 0" in log and "[rank-1]</span> step 3 rank 1" in log
    header = next(v for v in values if "kf-status" in str(v))
    assert "Complete" in header
    progress = [m["state"] for m in state.values() if m["model_name"] == "FloatProgressModel"]
    assert progress and progress[0]["value"] == pytest.approx(1.0)
    assert any("data-metric='loss'" in str(v) for v in values)
    assert _text(nb.cells[3]).strip() == "Complete {'lr': 0.25, 'world': 2}"
    # The dry run is one display: a summary table (HTML) and, as text, the summary as YAML
    # comments followed by the manifest, so the text stays valid YAML.
    dry = [o for o in nb.cells[4].outputs if o.output_type == "display_data"]
    assert len(dry) == 1 and "text/html" in dry[0].data, nb.cells[4].outputs
    assert "nb-dry" in dry[0].data["text/html"]
    manifest = next(  # the TrainJob, then the workspace ConfigMap
        yaml.safe_load_all(dry[0].data["text/plain"])
    )
    assert manifest["metadata"]["name"] == "nb-dry"
    assert_valid_trainjob(manifest)
    warn = _text(nb.cells[5])
    assert "'undefined_thing'" in warn and "NameError" in warn
    err = _text(nb.cells[6])
    # JupyterLab's numbering: the magic is line 1, so `if x >` is line 3.
    assert "Syntax error in the training cell at line 3" in err and "Traceback" not in err
    jobs = TrainerClient(LocalBackendConfig(state_dir=state_dir)).list_jobs()
    assert len(jobs) == 1  # the dry-runs and the syntax error submitted nothing
    assert jobs[0].name in str(nb.cells[7].outputs)


def test_finished_monitors_release_their_widgets(state_dir, tmp_path):
    """Each training cell's monitor is replaced by its static rendering when the job ends; its
    widget models are closed then, so a long session does not keep every past job's monitor
    (and the log buffer it holds) alive in the kernel and the front end. Only its outer box
    stays, holding the static view as one HTML (for a page that was away when the job ended,
    issue 22): a fixed handful of small models per job, at most KEEP_SETTLED jobs."""
    count = (
        "import json\n"
        "from ipywidgets.widgets.widget import _instances  # every live widget model\n"
        "print(json.dumps(sorted(type(w).__name__ for w in _instances.values())))"
    )
    short = "%%torchtrain -n 1 -p 1\nprint('short job', flush=True)"
    nb = _nb("%load_ext kf_jupyter", count, short, count, short, short, count)
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    for i in (2, 4, 5):
        assert "kf-monitor-static" in nb.cells[i].outputs[0].data["text/html"], i
    import json
    from collections import Counter

    before, after_one, after_three = (Counter(json.loads(_text(nb.cells[i]))) for i in (1, 3, 6))
    settled = Counter({"VBox": 1, "HTML": 1, "HTMLStyle": 1, "Layout": 2})  # a box, its HTML
    assert after_one - before == settled, (before, after_one)
    assert after_three - before == Counter({k: 3 * v for k, v in settled.items()}), after_three


@pytest.mark.parametrize("widgets", ["off", "auto"])
def test_notebook_interrupt_leaves_job_running_and_says_how_to_reattach(
    state_dir, tmp_path, widgets
):
    nb = _nb(
        f"%load_ext kf_jupyter\n%config KubeflowMagics.widgets = '{widgets}'",
        (
            "%%torchtrain -n 1 -p 1 -o job\nimport time\nfor i in range(300):\n"
            "    print('tick', i, flush=True)\n    time.sleep(0.2)\n",
            ["raises-exception"],
        ),
        "print(job.status)",
    )
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    local = TrainerClient(LocalBackendConfig(state_dir=state_dir))

    def interrupt_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            jobs = local.list_jobs()
            if (
                jobs
                and jobs[0].status == "Running"
                and any("tick 3" in ln for ln in local.get_job_logs(jobs[0].name))
            ):
                break
            time.sleep(0.2)
        run_sync(client.km.interrupt_kernel)()  # the kernel manager's own interrupt

    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)
        t = threading.Thread(target=interrupt_when_running, daemon=True)
        t.start()
        client.execute_cell(nb.cells[1], 1)
        t.join(timeout=130)
        client.execute_cell(nb.cells[2], 2)
        client.set_widgets_metadata()
    out = _text(nb.cells[1])
    name = local.list_jobs()[0].name
    if widgets == "off":
        assert "tick 1" in out
    else:
        state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        html = " ".join(str(m["state"].get("value", "")) for m in state.values())
        assert "tick 1" in html and "Detached" in html
    assert f"%kf_logs {name} -f" in out and "keeps running" in out
    assert "Traceback" not in out
    assert _text(nb.cells[2]).strip() == "Running"
    assert local.get_job(name).status == "Running"


def test_cancel_from_outside_ends_the_cell_short_and_kf_monitor_reattaches(state_dir, tmp_path):
    """What the lab's live monitor does, seen from the kernel: a Cancel through the backend while
    the cell waits ends the cell with one line and a static "Cancelled" rendering; %kf_monitor
    shows a running job live and an ended one statically."""
    loop = (
        "import os, time\nfor i in range(3000):\n"
        "    print('tick', i, os.environ['RANK'], flush=True)\n    time.sleep(0.1)\n"
    )
    nb = _nb(
        "%load_ext kf_jupyter",
        ("%%torchtrain -n 1 -p 2 --name nb-cancel\n" + loop, ["raises-exception"]),
        "%%torchtrain -n 1 -p 1 --name nb-later --no-wait\n" + loop,
        "%kf_monitor nb-later",
        "from kf_jupyter import LocalBackendConfig, TrainerClient\n"
        "from kf_jupyter.widgets.monitor import cancel_if_running\n"
        "print(cancel_if_running(TrainerClient(LocalBackendConfig()), 'nb-later')[0])",
        "%kf_monitor nb-later",
        # wait (kernel side) until the two monitors of nb-later have replaced their outputs
        "import time\n"
        "core = get_ipython().magics_manager.registry['KubeflowMagics']\n"
        "mine = [m for m in core.monitors if m.name == 'nb-later']\n"
        "deadline = time.monotonic() + 240\n"
        "while not all(m._stop.is_set() for m in mine) and time.monotonic() < deadline:\n"
        "    time.sleep(0.2)\n"
        "print(len(mine), [m.error for m in mine])",
    )
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    local = TrainerClient(LocalBackendConfig(state_dir=state_dir))

    def cancel_when_running() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if any("tick 3" in ln for ln in local.get_job_logs("nb-cancel")):
                    break
            except Exception:
                pass
            time.sleep(0.2)
        local.backend.cancel_job("nb-cancel")  # what POST jobs/nb-cancel/cancel does

    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)
        t = threading.Thread(target=cancel_when_running, daemon=True)
        t.start()
        client.execute_cell(nb.cells[1], 1)
        t.join(timeout=130)
        for i in range(2, 4):
            client.execute_cell(nb.cells[i], i)
        live = copy.deepcopy(nb.cells[3].outputs[0].data)  # as shown then
        for i in range(4, 7):
            client.execute_cell(nb.cells[i], i)
    cancelled = nb.cells[1]
    errors = [o for o in cancelled.outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].evalue == (
        "Job nb-cancel was cancelled; its processes were stopped."
    )
    assert errors[0].traceback == [
        "\x1b[31mkf-jupyter:\x1b[0m Job nb-cancel was cancelled; its processes were stopped."
    ]
    static = next(o for o in cancelled.outputs if o.output_type == "display_data").data
    assert "kf-status-cancelled" in static["text/html"]
    assert "SignalException" not in static["text/html"] + static["text/plain"]
    assert local.get_job("nb-cancel").reason == "Cancelled"
    # %kf_monitor on a running job: the live bundle (MIME type + widget), the cell returns
    assert live["application/vnd.kf-jupyter.job+json"]["name"] == "nb-later"
    assert "application/vnd.jupyter.widget-view+json" in live
    assert _text(nb.cells[4]).strip() == "True"
    # ... and on the ended one: its static rendering
    ended = nb.cells[5].outputs[0].data
    assert set(ended) == {"text/html", "text/plain"}
    assert "kf-status-cancelled" in ended["text/html"]
    # No cell waited for nb-later: when it ended, its monitors replaced their own outputs (the
    # --no-wait cell's and %kf_monitor's, by display id) with the static view, so a saved
    # notebook holds no widget a restarted kernel lacks (before: the live widget stayed).
    assert _text(nb.cells[6]).strip() == "2 [None, None]"
    # The lab's live payload stays beside the static HTML (the lab extension goes on showing the
    # ended job in its live monitor); only the widget view is gone.
    for i in (2, 3):
        assert [set(o.data) for o in nb.cells[i].outputs] == [
            {"application/vnd.kf-jupyter.job+json", "text/html", "text/plain"}
        ], i
        assert nb.cells[i].outputs[0].data["application/vnd.kf-jupyter.job+json"]["name"] == (
            "nb-later"
        )
        assert "kf-status-cancelled" in nb.cells[i].outputs[0].data["text/html"], i
