"""Magics through a real IPython InteractiveShell (text mode: no widget frontend)."""

from __future__ import annotations

import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter.magics.cell import CellSyntaxError, build_cell_function, free_names
from kf_jupyter.magics.core import KubeflowMagics
from tests.manifests import assert_valid_trainjob


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)  # %config in one test must not leak into the next
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    sh.user_ns.pop("job", None)
    sh.kf = magics  # type: ignore[attr-defined]
    yield sh
    for client in magics._clients.values():
        if client.backend_name == "local":
            for j in client.list_jobs():
                client.delete_job(j.name)


def run(sh, capsys, text):
    result = sh.run_cell(text)
    out = capsys.readouterr()
    return result, out.out, out.err


def local_jobs(sh):
    return sh.kf.client("local").list_jobs()


# -- the cell becomes a function ------------------------------------------------------------


def test_cell_body_becomes_function_and_keeps_multiline_strings_exact():
    cf = build_cell_function('x = 1\ns = """a\n  b\n$HOME"""\nreturn s\n', ("lr",))
    ns: dict = {}
    exec(cf.source, ns)
    assert cf.source.startswith("def kf_train_cell(lr):\n")
    assert ns["kf_train_cell"](0.1) == "a\n  b\n$HOME"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("import numpy as np\nprint(np.pi, len([]))", []),
        ("print(data)", ["data"]),
        ("def helper():\n    return scale * 2\nhelper()", ["scale"]),
        ("x = 2\ndef helper():\n    return x\nclass C:\n    y = x\n", []),
        ("ys = [i * k for i in range(3)]", ["k"]),
        ("class A:\n    z = 1\n    q = [z for _ in range(2)]\n", ["z"]),
        ("global G\nG = 1\ndef f():\n    return G\n", []),
        ("def f():\n    global H\n    H = 1\nprint(H)", []),
        ("def outer():\n    a = 1\n    def inner():\n        nonlocal a\n        a += 1\n", []),
        ("v = 1\ndel v\n", []),
        ("print(__name__, __file__, __doc__)", []),
        ("display(1)\nget_ipython()", ["display", "get_ipython"]),
        ("try:\n    pass\nexcept ValueError as e:\n    print(e)", []),
        ("with open('f') as fh, ctx() as c:\n    print(fh, c)", ["ctx"]),
        ("from os import path\nprint(path, lr)", []),
    ],
)
def test_free_names(body, expected):
    assert list(build_cell_function(body, ("lr",)).free_names) == expected


def test_free_names_of_source_directly():
    assert free_names("def f(a):\n    return a + b\n", "f") == ["b"]


def test_syntax_error_points_at_cell_line():
    with pytest.raises(CellSyntaxError) as ei:
        build_cell_function("x = 1\ny = 2\nfor i in range(:\n    pass\n")
    msg = str(ei.value)
    assert "line 4" in msg and "Nothing was submitted" in msg  # the magic line is line 1
    assert "for i in range(:" in msg


# -- magics ------------------------------------------------------------------------------------


def test_bad_flag_is_a_usage_error_not_a_traceback(shell, capsys):
    result, out, err = run(shell, capsys, "%%torchtrain --bogus 3\nprint(1)\n")
    assert not result.success
    text = out + err
    assert "UsageError" in text and "--bogus" in text
    assert "Traceback" not in text
    # -p does not exist for JAX (one process per node).
    result, out, err = run(shell, capsys, "%%jaxtrain -p 2\nprint(1)\n")
    assert "UsageError" in out + err and not result.success


def test_syntax_error_is_reported_and_nothing_is_submitted(shell, capsys):
    result, out, err = run(shell, capsys, "%%torchtrain\nimport os\nprint(os.getpid(\n")
    assert not result.success
    text = out + err
    assert "Syntax error in the training cell at line" in text
    assert "Traceback" not in text
    assert local_jobs(shell) == []


def test_args_must_exist_and_be_json(shell, capsys):
    result, out, err = run(shell, capsys, "%%torchtrain --args missing_var\nprint(1)\n")
    assert not result.success and "missing_var" in out + err and "Traceback" not in out + err
    shell.user_ns["model"] = object()
    result, out, err = run(shell, capsys, "%%torchtrain --args model\nprint(model)\n")
    assert not result.success
    assert "'model'" in out + err and "JSON" in out + err
    assert local_jobs(shell) == []


def test_free_name_warning_names_the_variable(shell, capsys):
    shell.user_ns["batch_size"] = 32
    result, _out, err = run(shell, capsys, "%%torchtrain --dry-run\nprint(batch_size, epochs)\n")
    assert result.success
    assert "'batch_size'" in err and "'epochs'" in err
    assert "--args batch_size" in err


def test_dry_run_kubernetes_manifest_validates_against_crd(shell, capsys):
    shell.user_ns["lr"] = 0.01
    cell = (
        "%%torchtrain -n 2 -p 2 --backend kubernetes --dry-run --args lr --name mnist-ddp "
        "--env MODE=fast --packages numpy,scipy>=1.10 "
        "--pip-index-url https://user:s3cret@pypi.example.com/simple "
        "--resources cpu=2,memory=4Gi --max-restarts 1\n"
        "import torch\n"
        'msg = """line one\n$HOME `x`"""\n'
        "print(msg, lr)\n"
    )
    result, out, err = run(shell, capsys, cell)
    assert result.success, out + err
    assert "s3cret" not in out + err
    assert "command:\n    - bash\n    - -c\n    - |" in out  # readable block style
    manifest = next(yaml.safe_load_all(out))  # then the workspace ConfigMap
    assert manifest["kind"] == "TrainJob" and manifest["metadata"]["name"] == "mnist-ddp"
    assert manifest["spec"]["trainer"]["numNodes"] == 2
    assert manifest["spec"]["trainer"]["env"] == [
        {"name": "MODE", "value": "fast"},
        {"name": "KF_JUPYTER_PIP_INDEX_0", "value": "https://user:****@pypi.example.com/simple"},
    ]
    assert manifest["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert_valid_trainjob(manifest)
    assert "cannot be reached" in err  # the offline fallback says so
    assert local_jobs(shell) == []


def test_pod_security_flag_puts_the_restricted_fields_on_every_pod(shell, capsys):
    cell = "%%mpitrain --backend kubernetes --dry-run --pod-security restricted\nprint(1)\n"
    result, out, err = run(shell, capsys, cell)
    assert result.success, out + err
    manifest = next(yaml.safe_load_all(out))
    [patch] = [
        p for p in manifest["spec"]["runtimePatches"] if p["manager"] == "kf-jupyter.io/kf-jupyter"
    ]
    jobs = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert {j["name"] for j in jobs} == {"launcher", "node"}
    for j in jobs:
        pod = j["template"]["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert_valid_trainjob(manifest)


def test_dry_run_local_prints_plan_and_submits_nothing(shell, capsys):
    result, out, err = run(shell, capsys, "%%mpitrain -n 1 -p 2 --dry-run\nprint('hi')\n")
    assert result.success, out + err
    plan = yaml.safe_load(out)
    assert "plan" in plan or "processes" in str(plan)
    assert local_jobs(shell) == []


def test_config_and_kf_backend_set_defaults(shell, capsys):
    run(shell, capsys, '%config KubeflowMagics.backend = "kubernetes"')
    assert shell.kf.backend == "kubernetes"
    _, out, _ = run(shell, capsys, "%kf_backend local --namespace team-a")
    assert shell.kf.backend == "local" and shell.kf.namespace == "team-a"
    assert "local" in out
    result, out, err = run(shell, capsys, "%kf_backend nowhere")
    assert not result.success and "UsageError" in out + err


def test_config_var_must_be_a_runtime_config(shell, capsys):
    shell.user_ns["cfg"] = {"packages": ["numpy"]}
    result, out, err = run(shell, capsys, "%%torchtrain --config cfg --dry-run\nprint(1)\n")
    assert not result.success and "RuntimeConfig" in out + err


def test_bad_env_and_resources_are_clear_errors(shell, capsys):
    result, out, err = run(shell, capsys, "%%torchtrain --env NOEQUALS --dry-run\nprint(1)\n")
    assert not result.success and "KEY=VALUE" in out + err
    result, out, err = run(shell, capsys, "%%torchtrain --resources tpu=1 --dry-run\nprint(1)\n")
    assert not result.success and "Unknown resource" in out + err
    assert "Traceback" not in out + err


def test_unknown_job_is_one_paragraph(shell, capsys):
    result, out, err = run(shell, capsys, "%kf_logs no-such-job")
    assert not result.success and "no-such-job" in out + err and "Traceback" not in out + err


# -- real local jobs ----------------------------------------------------------------------------

TRAIN = (
    "%%torchtrain -n 1 -p 2 --args lr -o job\n"
    "import os\n"
    "import kf_jupyter\n"
    "def helper(s):\n"
    "    return s * lr\n"
    "for s in range(3):\n"
    "    kf_jupyter.report(step=s, progress=(s + 1) / 3, loss=1.0 / (s + 1))\n"
    "    print('step', s, 'rank', os.environ['RANK'])\n"
    "return {'lr': lr, 'world': int(os.environ['WORLD_SIZE']), 'h': helper(2)}\n"
)


@pytest.mark.slow
def test_local_torch_cell_streams_both_ranks_and_out_gives_result(shell, capsys):
    shell.user_ns["lr"] = 0.5
    result, out, err = run(shell, capsys, TRAIN)
    assert result.success, out + err
    assert "[rank-0] step 2 rank 0" in out and "[rank-1] step 2 rank 1" in out
    assert "##kf-jupyter:report" not in out  # reports drive progress, not the text
    job = shell.user_ns["job"]
    assert job.status == "Complete"
    assert job.result == {"lr": 0.5, "world": 2, "h": 1.0}
    _, out, _ = run(shell, capsys, "%kf_jobs")
    assert job.name in out and "Complete" in out and "1 node × 2 processes" in out
    _, out, _ = run(shell, capsys, f"%kf_logs {job.name} --tail 2")
    assert out.strip()
    _, out, _ = run(shell, capsys, f"%kf_delete {job.name}")
    assert "Deleted" in out
    assert local_jobs(shell) == []


@pytest.mark.slow
def test_failed_job_shows_failing_rank_last_lines(shell, capsys):
    cell = (
        "%%torchtrain -n 1 -p 2\n"
        "import os\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise RuntimeError('boom on rank one')\n"
        "print('fine')\n"
    )
    result, out, err = run(shell, capsys, cell)
    assert not result.success
    text = out + err
    assert "failed" in text and "%kf_logs" in text
    assert "boom on rank one" in text.split("failed", 1)[1]


@pytest.mark.slow
def test_no_wait_returns_at_once_and_handle_waits(shell, capsys):
    cell = "%%torchtrain -n 1 -p 1 --no-wait -o job\nimport time\ntime.sleep(1)\nreturn 7\n"
    result, out, _err = run(shell, capsys, cell)
    assert result.success and "kf_logs" in out
    job = shell.user_ns["job"]
    assert job.status in ("Created", "Running")
    assert job.wait(timeout=120).status == "Complete"
    assert job.result == 7


def test_kf_runtimes_table_and_config_text_mode(shell, capsys):
    result, out, _ = run(shell, capsys, "%kf_runtimes torch")
    assert result.success
    assert out.splitlines()[0].split()[:3] == ["name", "framework", "policy"]
    assert all(" torch " in line for line in out.splitlines()[1:])
    result, out, _ = run(shell, capsys, "%kf_config")
    assert result.success and "backend=local" in out and "--config VAR" in out


def test_forms_passed_as_config_and_options(shell, capsys):
    from kf_jupyter.widgets.forms import PodOverridesForm, RuntimeConfigForm

    cfg = RuntimeConfigForm()
    cfg.add_env("MODE", "fast")
    pods = PodOverridesForm()
    pods.node_selector.value = "disktype=ssd"
    shell.user_ns.update(cfg=cfg, pods=pods)
    result, out, err = run(
        shell,
        capsys,
        "%%torchtrain --backend kubernetes --dry-run --config cfg --options pods --env B=2\n"
        "print(1)\n",
    )
    assert result.success, out + err
    manifest = next(yaml.safe_load_all(out))  # then the workspace ConfigMap
    assert manifest["spec"]["trainer"]["env"] == [
        {"name": "MODE", "value": "fast"},
        {"name": "B", "value": "2"},
    ]
    assert "disktype" in str(manifest["spec"]["runtimePatches"])
    assert_valid_trainjob(manifest)
    cfg.add_env("9BAD", "x")
    result, out, err = run(shell, capsys, "%%torchtrain --dry-run --config cfg\nprint(1)\n")
    assert not result.success and "9BAD" in out + err


@pytest.mark.slow
def test_timeout_stops_following_a_quiet_job(shell, capsys):
    cell = "%%torchtrain -n 1 -p 1 --timeout 2 -o job\nimport time\ntime.sleep(60)\n"
    result, out, err = run(shell, capsys, cell)
    assert not result.success
    job = shell.user_ns["job"]
    assert "Timed out after 2" in out + err and f"%kf_logs {job.name} -f" in out + err
    assert job.status in ("Created", "Running")


@pytest.mark.slow
def test_dry_run_against_a_real_api_server_uses_discovered_runtime(
    shell, capsys, k8s_admin_kubeconfig, k8s_namespace
):
    run(shell, capsys, f'%config KubeflowMagics.kubeconfig = "{k8s_admin_kubeconfig}"')
    result, out, err = run(
        shell,
        capsys,
        f"%%jaxtrain -n 2 --backend kubernetes --namespace {k8s_namespace} --dry-run\n"
        "import jax\nprint(jax.devices())\n",
    )
    assert result.success, out + err
    assert "cannot be reached" not in err
    manifest = next(yaml.safe_load_all(out))  # then the workspace ConfigMap
    assert manifest["spec"]["runtimeRef"]["name"] == "jax-distributed"
    assert manifest["metadata"]["namespace"] == k8s_namespace
    assert_valid_trainjob(manifest)
    _, out, _ = run(shell, capsys, "%kf_runtimes --backend kubernetes")
    assert "torch-distributed" in out and "jax-distributed" in out


@pytest.mark.parametrize(
    ("cell", "world"),
    [
        ("%%torchtrain -n 2 -p 3", "world      6 processes: 3 per node × 2 nodes"),
        # MPI on deepspeed-distributed: runLauncherAsNode, 2 hosts for -n 1, 2 slots each
        ("%%mpitrain -n 1 -p 2", "world      4 processes: 2 per node × 2 hosts"),
    ],
)
def test_offline_kubernetes_dry_run_says_the_world_size(shell, capsys, cell, world):
    """Issue 19 (d): with no cluster reachable the dry run shows the world (processes per node,
    world size and why) as the online one does; before, it had none."""
    text = f"{cell} --backend kubernetes --dry-run\nprint('hi')\n"
    result, out, err = run(shell, capsys, text)
    assert result.success, out + err
    assert "cannot be reached" in err
    summary = [ln.removeprefix("#   ") for ln in out.splitlines() if ln.startswith("#   ")]
    line = next((ln for ln in summary if ln.startswith("world ")), "")
    assert line.startswith(world), summary
