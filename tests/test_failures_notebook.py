"""A notebook run by nbclient in a real kernel: the root cause first, readable logs (slow)."""

from __future__ import annotations

import re

import pytest
from nbclient import NotebookClient

from .test_magics_notebooks import _nb, _text, state_dir  # noqa: F401

pytestmark = pytest.mark.slow

FAILING = """%%torchtrain -n 1 -p 2 -o job
import torch.distributed as dist
dist.init_process_group("gloo")
print("rank", dist.get_rank(), "ready", flush=True)
if dist.get_rank() == 1:
    print(undefined_name)
dist.barrier()
"""

PROGRESS = """%%torchtrain -n 1 -p 2
import sys, time
import kf_jupyter
for i in range(6):
    sys.stderr.write(f"\\r{i * 20:3d}%|{'#' * i}{' ' * (5 - i)}| {i}/5")
    sys.stderr.flush()
    kf_jupyter.report(step=i, progress=i / 5)
    time.sleep(0.2)
sys.stderr.write("\\n")
print("finished", flush=True)
"""


def _widget_html(nb) -> list[str]:
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return [
        str(m["state"].get("value", "")) for m in state.values() if m["model_name"] == "HTMLModel"
    ]


def test_rank_one_name_error_shows_its_cause_first_everywhere(state_dir, tmp_path):  # noqa: F811
    nb = _nb(
        "%load_ext kf_jupyter",
        (FAILING, ["raises-exception"]),
        "%kf_jobs",
        "%kf_logs {job.name}".replace("{job.name}", "$job.name"),
        PROGRESS,
    )
    NotebookClient(
        nb, timeout=400, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    # The cell's error: the rank, the exception, the user's line (line 6 as JupyterLab shows it).
    err = next(o for o in nb.cells[1].outputs if o.output_type == "error")
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(err.traceback))
    first = text.splitlines()[0]
    assert re.fullmatch(
        r"kf-jupyter: Job torch-\w+ failed\. Rank 1 failed: NameError: name 'undefined_name' is "
        r"not defined",
        first,
    ), text
    # The cell's frame at its own line 6 (named as the runner ships the cell: a script).
    assert re.search(
        r'  File "(<training cell>|cell\.py)", line 6, in (kf_train_cell|<module>)', text
    )
    assert "    print(undefined_name)" in text
    for noise in ("kf_entry", "ChildFailedError", "node-0 failed", "OMP_NUM_THREADS", "##kf"):
        assert noise not in text, noise
    # The monitor: the failure box names the cause; the log view has no protocol line or banner.
    html_values = _widget_html(nb)
    box = next(v for v in html_values if "kf-failure" in v)
    assert "Rank 1 failed: NameError: name &#x27;undefined_name&#x27; is not defined" in box
    assert "line 6" in box and "kf_entry" not in box
    logs = [v for v in html_values if "kf-log" in v]
    assert any("rank 1 ready" in v for v in logs)
    assert not any("##kf-jupyter" in v or "OMP_NUM_THREADS" in v for v in logs)
    # %kf_jobs says why it failed; %kf_logs is readable.
    assert "Rank 1: NameError: name &#x27;undefined_name&#x27; is not defined" in str(
        nb.cells[2].outputs
    )
    logs_text = _text(nb.cells[3])
    assert "[rank-1] NameError: name 'undefined_name' is not defined" in logs_text
    assert "##kf-jupyter" not in logs_text and "OMP_NUM_THREADS" not in logs_text
    # A progress bar is one line per rank in the monitor, at its last state.
    html_values = _widget_html(nb)
    final_logs = [v for v in html_values if "kf-log" in v and "finished" in v]
    assert final_logs, html_values
    log = final_logs[-1]
    for rank in (0, 1):
        bars = re.findall(rf"\[rank-{rank}\]</span> ([^\n]*\|[^\n]*)", log)
        assert bars == ["100%|#####| 5/5"], log
