"""A script file run as the program finds its sibling modules in the shipped workspace (issue 11:
the script-file form of the magics, with workspace shipping). Skipped until the script form is in."""

from __future__ import annotations

import textwrap

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter.magics.core import KubeflowMagics

pytest.importorskip("kf_jupyter.script", reason="the script-file form of the magics is not in yet")

TRAIN = textwrap.dedent(
    """\
    import argparse
    import os

    from helpers import greet          # scripts/helpers.py, next to this script
    from datautils import MyDataset    # the notebook's folder (the workspace root)

    p = argparse.ArgumentParser()
    p.add_argument("--who")
    args = p.parse_args()
    rank = os.environ["PET_NODE_RANK"]
    print(greet(args.who), "rank", rank, "rows", len(MyDataset("data.csv")), flush=True)
    """
)


def _folder(root):
    from .test_workspace import make_notebook_folder

    nb = make_notebook_folder(root)
    (nb / "scripts").mkdir()
    (nb / "scripts" / "train.py").write_text(TRAIN)
    (nb / "scripts" / "helpers.py").write_text("def greet(who):\n    return f'hello {who}'\n")
    return nb


@pytest.mark.slow
def test_script_in_a_subfolder_imports_its_sibling_locally(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(_folder(tmp_path / "nb"))
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    sh = InteractiveShell.instance()
    try:
        sh.register_magics(KubeflowMagics(shell=sh))
        sh.run_line_magic("torchtrain", "scripts/train.py -n 2 -p 1 --timeout 240 -- --who ws")
        out = capsys.readouterr()
        text = out.out + out.err
        assert "hello ws rank 0 rows 3" in text and "hello ws rank 1 rows 3" in text, text
    finally:
        from kf_jupyter import TrainerClient
        from kf_jupyter.backends.local.config import LocalBackendConfig

        c = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
        for job in c.list_jobs():
            c.delete_job(job.name)
        InteractiveShell.clear_instance()


@pytest.mark.slow
def test_script_in_a_subfolder_imports_its_sibling_on_the_cluster(
    k8s_admin_kubeconfig, k8s_namespace, k8s_standin, tmp_path, monkeypatch
):
    from kf_jupyter import TorchTrainer
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig

    monkeypatch.chdir(_folder(tmp_path / "nb"))
    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )
    trainer = TorchTrainer(
        script="scripts/train.py", script_args=["--who", "k8s"], num_nodes=2, num_proc_per_node=1
    )
    name = backend.train(trainer)
    assert backend.wait_for_job_status(name, timeout=240).status == "Complete"
    logs = "\n".join(backend.get_job_logs(name))
    assert "hello k8s rank 0 rows 3" in logs and "hello k8s rank 1 rows 3" in logs, logs
