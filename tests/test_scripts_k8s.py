"""Real code runs unchanged on the Kubernetes backend (issue 11), against the real API server.

The stand-in (tests/k8s_cluster) runs each pod's command as a kubelet would, with the env the
Trainer injects; the training magics submit through a real kube-apiserver with the Trainer CRDs.
"""

from __future__ import annotations

import pytest

from .test_magics import run, shell  # noqa: F401
from .test_scripts_local import DDP_SCRIPT, JAX_OWN_INIT, KUBEFLOW_XGBOOST

pytestmark = pytest.mark.slow


@pytest.fixture
def kube(shell, capsys, k8s_admin_kubeconfig, k8s_namespace, k8s_standin):  # noqa: F811
    """The shell's magics pointed at the test cluster; gives the flags of one namespace."""
    run(shell, capsys, f'%config KubeflowMagics.kubeconfig = "{k8s_admin_kubeconfig}"')
    return f"--backend kubernetes --namespace {k8s_namespace}"


def test_script_file_with_arguments_on_a_cluster(shell, capsys, kube, tmp_path, monkeypatch):  # noqa: F811
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    monkeypatch.chdir(tmp_path)
    line = f"%torchtrain train.py -n 1 -p 2 {kube} --timeout 280 -- --epochs 2 --lr 0.05"
    result, out, err = run(shell, capsys, line)
    assert result.success, out + err
    assert "rank 0 epoch 2 loss" in out and "rank 1 epoch 2 loss" in out
    assert "epoch 3" not in out and "unrecognized arguments" not in out + err


def test_kubeflow_xgboost_example_on_a_cluster(shell, capsys, kube):  # noqa: F811
    cell = f"%%xgboosttrain -n 2 {kube} --timeout 280\n" + KUBEFLOW_XGBOOST
    result, out, err = run(shell, capsys, cell)
    assert result.success, out + err
    assert "Worker 0/2 trees 5" in out and "Worker 1/2 trees 5" in out
    assert "Address already in use" not in out + err


def test_jax_initialize_without_arguments_on_a_cluster(shell, capsys, kube):  # noqa: F811
    cell = (
        f"%%jaxtrain -n 2 {kube} --env JAX_PLATFORMS=cpu --timeout 280 -o job\n"
        "from __future__ import annotations\n"
        + JAX_OWN_INIT.format(call="jax.distributed.initialize()")
    )
    result, out, err = run(shell, capsys, cell)
    assert result.success, out + err
    assert shell.user_ns["job"].result == {"processes": 2, "sum": 3.0}


def test_hydra_program_finds_its_config_on_a_cluster(shell, capsys, kube, tmp_path, monkeypatch):  # noqa: F811
    """Issue 39: the script's code carries its path in the job's unpacked workspace, so
    Hydra's config_path="." finds the config shipped next to it."""
    pytest.importorskip("hydra")
    from .test_scripts import hydra_folder

    hydra_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    line = f"%torchtrain gpt/main.py -n 1 -p 2 {kube} --timeout 280 -- trainer_config.max_epochs=2"
    result, out, err = run(shell, capsys, line)
    assert result.success, out + err
    for rank in (0, 1):
        assert f"RANK {rank} EPOCHS 2 CODE " in out, out + err
    code = out.split("RANK 0 EPOCHS 2 CODE ", 1)[1].split()[0]
    assert code.endswith("/gpt/main.py") and "kf_func" not in code


def test_mpitrain_says_the_world_at_submit_on_a_cluster(shell, capsys, kube):  # noqa: F811
    result, out, err = run(shell, capsys, f"%%mpitrain -n 1 -p 2 {kube} --no-wait\nprint(1)\n")
    assert result.success, out + err
    assert "this job runs 4 processes, not 1 node × 2 processes = 2" in out, out + err


def test_a_sweeps_trials_keep_their_arguments_on_a_cluster(shell, capsys, kube):  # noqa: F811
    from .test_sweep_magic import KATIB_SCRIPT

    cell = (
        f"%%torchtrain --sweep 'epochs=choice(3)' --algorithm grid {kube} --timeout 280 "
        f"-o sweep -- --batch-size=16\n{KATIB_SCRIPT}"
    )
    result, out, err = run(shell, capsys, cell)
    assert result.success, out + err
    name = shell.user_ns["sweep"]
    client = shell.kf.client("kubernetes", kube.split()[-1])
    logs = "\n".join(client.get_job_logs(f"{name}-trial-1"))
    assert "ARGV ['cell.py', '--batch-size=16', '--epochs=3']" in logs, logs
