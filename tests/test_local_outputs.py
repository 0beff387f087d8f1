"""What a local job writes lands next to the notebook (issue 23).

Ranks run in the notebook's folder itself (as under plain `torchrun` or the Kubeflow SDK's
local backend), with the submit-time copy of it first on `sys.path`: a checkpoint saved to the
working directory exists in the next cell, while a module edited after submission is still
imported as it was. Cells run in a real InteractiveShell, as a notebook runs them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter import JAXTrainer, TrainerClient
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.magics.core import KubeflowMagics


@pytest.fixture
def shell(tmp_path, monkeypatch):
    nb = tmp_path / "nb"
    nb.mkdir()
    (nb / "helpers.py").write_text("VERSION = 'submitted'\n")
    monkeypatch.chdir(nb)
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    sh = InteractiveShell.instance()
    sh.register_magics(KubeflowMagics(shell=sh))
    yield sh
    c = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    for job in c.list_jobs():
        c.delete_job(job.name)
    InteractiveShell.clear_instance()


def next_cell_sees(sh: InteractiveShell, path: str) -> bool:
    sh.run_cell(f"import os\n_seen = os.path.exists({path!r})\n")
    return bool(sh.user_ns["_seen"])


def test_a_file_written_by_the_job_is_in_the_notebooks_folder(tmp_path, monkeypatch):
    nb = tmp_path / "nb"
    nb.mkdir()
    (nb / "helpers.py").write_text("VERSION = 'submitted'\n")
    monkeypatch.chdir(nb)
    client = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    release = tmp_path / "release"

    def save(release: str) -> str:
        import os
        import time

        while not os.path.exists(release):
            time.sleep(0.02)
        import helpers

        with open("model.json", "w") as fh:
            fh.write(helpers.VERSION)
        os.makedirs("checkpoints", exist_ok=True)
        with open(os.path.join("checkpoints", "epoch-1.txt"), "w") as fh:
            fh.write("1")
        return os.getcwd()

    name = client.train(
        JAXTrainer(func=save, func_args={"release": str(release)}, initialize_distributed=False)
    )
    (nb / "helpers.py").write_text("VERSION = 'edited later'\n")  # after submit
    release.write_text("go")
    client.wait_for_job_status(name, timeout=120)
    assert client.get_job_result(name) == str(nb)
    # the output is next to the notebook, written by the code as it was submitted
    assert (nb / "model.json").read_text() == "submitted"
    assert (nb / "checkpoints" / "epoch-1.txt").exists()
    assert not (client.backend.jobs_dir / name / "workspace" / "model.json").exists()
    plan = client.dry_run(JAXTrainer(func=save, func_args={"release": ""}))
    assert plan["workspace"]["outputs"].startswith(f"{nb}: the ranks run in this folder")


@pytest.mark.slow
def test_torch_checkpoint_from_rank_zero_exists_in_the_next_cell(shell, capsys):
    cell = textwrap.dedent(
        """\
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = torch.nn.Linear(4, 2)
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "mnist_cnn.pt")
        dist.barrier()
        dist.destroy_process_group()
        """
    )
    assert not next_cell_sees(shell, "mnist_cnn.pt")
    shell.run_cell_magic("torchtrain", "-n 1 -p 2 --timeout 240", cell)
    assert next_cell_sees(shell, "mnist_cnn.pt")
    shell.run_cell("import torch\n_w = torch.load('mnist_cnn.pt')['weight'].shape\n")
    assert tuple(shell.user_ns["_w"]) == (2, 4)


@pytest.mark.slow
def test_xgboost_model_json_exists_in_the_next_cell(shell, capsys):
    cell = textwrap.dedent(
        """\
        import numpy as np
        import xgboost as xgb
        rng = np.random.default_rng(0)
        X = rng.normal(size=(64, 3))
        y = (X[:, 0] > 0).astype(int)
        booster = xgb.train({"objective": "binary:logistic"}, xgb.DMatrix(X, label=y), 3)
        import os
        if os.environ.get("DMLC_TASK_ID", "0") == "0":
            booster.save_model("xgboost_model.json")
        """
    )
    shell.run_cell_magic("xgboosttrain", "-n 1 --timeout 240", cell)
    assert next_cell_sees(shell, "xgboost_model.json")
    shell.run_cell(
        "import xgboost as xgb\n_b = xgb.Booster()\n_b.load_model('xgboost_model.json')\n"
        "_n = _b.num_boosted_rounds()\n"
    )
    assert shell.user_ns["_n"] == 3
    assert Path("xgboost_model.json").is_file()
