"""Plugins through Python entry points (issue 23): a separately installed package registers a
trainer and its magic, a framework policy, a runtime and an option (`kf_jupyter.plugins`).

The slow tests pip-install the real packages tests/plugin_pkg (kf-ring: the 'ring' framework)
and tests/plugin_broken_pkg (one plugin that fails to import, two that take built-in names)
into a throw-away venv on top of the project's, and run jobs there through `%%ringtrain`: on
the local backend (real subprocess ranks) and on the Kubernetes harness (tests/k8s_cluster).
The fast ones load the same plugin modules through entry-point objects made here.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kf_jupyter import plugins
from kf_jupyter.build import build_trainjob, job_shape
from kf_jupyter.errors import ValidationError
from kf_jupyter.policies import get_policy
from kf_jupyter.tier2 import ConfigTrainer, embed_call
from kf_jupyter.trainers import XGBoostTrainer

TESTS = Path(__file__).resolve().parent
GOOD = TESTS / "plugin_pkg"
BROKEN = TESTS / "plugin_broken_pkg"

#: The training cell: every node sends its rank to rank 0 at RING_ADDR, which prints the sum.
RING_CELL = textwrap.dedent(
    """\
    import os, socket, time
    rank, world = int(os.environ["RING_RANK"]), int(os.environ["RING_WORLD"])
    host, port = os.environ["RING_ADDR"].rsplit(":", 1)
    if rank == 0:
        srv = socket.create_server(("", int(port)))
        total = 0
        for _ in range(world - 1):
            conn, _ = srv.accept()
            total += int(conn.recv(16))
            conn.close()
        print(f"ring sum={total} world={world}", flush=True)
    else:
        for _ in range(600):
            try:
                c = socket.create_connection((host, int(port)))
                break
            except OSError:
                time.sleep(0.1)
        c.sendall(str(rank).encode())
        c.close()
        print(f"rank {rank} sent", flush=True)
    """
)


def train_fn() -> None:
    """A training function for the builds here."""


# -- fast: the registry, loaded from entry points made here ---------------------------------


def _eps(*items: tuple[str, str]) -> list[EntryPoint]:
    return [EntryPoint(name, value, plugins.ENTRY_POINT_GROUP) for name, value in items]


@pytest.fixture
def fake_plugins(monkeypatch):
    """Install entry points for this test only (the plugin modules from the test packages)."""
    monkeypatch.syspath_prepend(str(GOOD))
    monkeypatch.syspath_prepend(str(BROKEN))

    def use(*items: tuple[str, str]) -> plugins.Registry:
        monkeypatch.setattr(plugins, "_entry_points", lambda: _eps(*items))
        return plugins.reload()

    yield use
    plugins.registry.cache_clear()


def test_a_plugin_adds_its_trainer_policy_runtime_and_option(fake_plugins) -> None:
    reg = fake_plugins(("ring", "kf_ring.plugin:plugin"))
    assert not reg.problems
    from kf_ring.plugin import RingPolicy, RingTag, RingTrainer

    assert plugins.trainer_for_magic("ringtrain") is RingTrainer
    assert isinstance(get_policy("ring"), RingPolicy)
    assert plugins.get_option("ring-tag") is RingTag
    from kf_jupyter.backends.local.runtimes import find_runtime, local_runtimes

    rt = find_runtime("ring-distributed")
    assert (rt.framework, rt.ml_policy, rt.plugin) == ("ring", "plain", "ring")
    assert rt.to_dict()["plugin"] == "ring"
    assert "torch-distributed" in [r.name for r in local_runtimes()]  # the defaults stay
    from kf_jupyter.policies import reserved_env

    assert "RING_ADDR" in reserved_env()


def test_on_kubernetes_the_command_sets_a_plugin_policys_env_per_node(fake_plugins) -> None:
    """The Trainer does not know the ring policy: the command exports each node's environment
    from JOB_COMPLETION_INDEX; locally the processes get it directly."""
    fake_plugins(("ring", "kf_ring.plugin:plugin"))
    from kf_ring.plugin import RingTag, RingTrainer

    from kf_jupyter.backends.local.runtimes import find_runtime

    rt = find_runtime("ring-distributed")
    trainer = RingTrainer(func=train_fn, num_nodes=2)
    job = build_trainjob(trainer, rt, None, [RingTag("blue")], name="ring-1")
    script = job["spec"]["trainer"]["command"][2]
    assert script.startswith('case "${JOB_COMPLETION_INDEX:-0}" in\n')
    assert (
        "  1) export RING_ADDR=ring-1-node-0-0.ring-1:29500 RING_RANK=1 RING_WORLD=2 ;;" in script
    )
    assert job["metadata"]["labels"]["ring.example.com/tag"] == "blue"
    local = build_trainjob(trainer, rt, None, (), name="ring-1", backend="local")
    assert "JOB_COMPLETION_INDEX" not in local["spec"]["trainer"]["command"][2]
    shape = job_shape(trainer, rt, "ring-1")
    procs = get_policy("ring").local_processes(shape, 4242, "/tmp/x")
    assert [p.env["RING_RANK"] for p in procs] == ["0", "1"]
    assert procs[1].env["RING_ADDR"] == "127.0.0.1:4242"


def test_built_in_policies_get_no_env_table_on_kubernetes() -> None:
    from kf_jupyter.backends.local.runtimes import find_runtime
    from kf_jupyter.trainers import TorchTrainer

    job = build_trainjob(
        TorchTrainer(func=train_fn), find_runtime("torch-distributed"), None, (), name="t-1"
    )
    assert "JOB_COMPLETION_INDEX" not in job["spec"]["trainer"]["command"][2]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (
            ("broken", "kf_ring_broken.broken:plugin"),
            "raised ModuleNotFoundError: No module named 'kf_ring_missing_dependency'",
        ),
        (("clash-magic", "kf_ring_broken.clash:magic_plugin"), "%%torchtrain has the name of a"),
        (("clash-policy", "kf_ring_broken.clash:policy_plugin"), "policy 'torch' has the name"),
        (("not-a-plugin", "kf_ring.plugin:RUNTIME"), "names a dict, not a kf_jupyter.plugins"),
    ],
)
def test_a_bad_plugin_is_one_paragraph_and_the_rest_loads(fake_plugins, entry, says) -> None:
    reg = fake_plugins(entry, ("ring", "kf_ring.plugin:plugin"))
    assert [p.name for p in reg.plugins] == ["ring"]
    (problem,) = reg.problems
    assert says in problem.message
    assert problem.message.startswith(f"kf-jupyter plugin {entry[0]!r}")
    assert "was not loaded" in problem.message and "works without it" in problem.message
    assert "\n" not in problem.message and "Traceback" not in problem.message
    assert type(get_policy("torch")).__module__ == "kf_jupyter.policies.torch"


def test_two_plugins_may_not_share_a_name(fake_plugins) -> None:
    reg = fake_plugins(("ring", "kf_ring.plugin:plugin"), ("ring2", "kf_ring.plugin:plugin"))
    assert [p.name for p in reg.plugins] == ["ring"]
    assert "policy 'ring' has the name of one plugin 'ring' has" in reg.problems[0].message


# -- slow: real packages installed with pip into a throw-away venv ---------------------------


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv on top of the project's (its site-packages added), with both packages installed."""
    root = tmp_path_factory.mktemp("plugin-venv")
    env_dir = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
        check=True,
        timeout=120,
    )
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    project_site = site.getsitepackages()[0]
    Path(purelib, "kf_project.pth").write_text(f"import site; site.addsitedir({project_site!r})\n")
    for pkg in (GOOD, BROKEN):  # build from a copy: pip writes build/ and egg-info beside it
        src = root / pkg.name
        shutil.copytree(pkg, src)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
             "--no-index", str(src)],
            check=True,
            timeout=300,
        )  # fmt: skip
    return python


def run_in(python: Path, code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    state = tmp_path / "state"
    return subprocess.run(
        [str(python), "-c", code],
        cwd=tmp_path,
        env={**os.environ, "KF_JUPYTER_STATE_DIR": str(state), **env},
        capture_output=True,
        text=True,
        timeout=400,
    )


SHELL = textwrap.dedent(
    """\
    import json, sys
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "kf_jupyter")
    print("HEAVY", sorted(m for m in ("torch", "jax", "xgboost") if m in sys.modules))
    """
)


@pytest.mark.slow
def test_an_installed_plugin_runs_a_job_locally_through_its_magic(venv, tmp_path) -> None:
    code = SHELL + textwrap.dedent(
        f"""\
        shell.run_line_magic("kf_plugins", "")
        shell.run_line_magic("kf_runtimes", "ring --backend local")
        shell.run_cell_magic("ringtrain", "-n 3 --backend local --no-workspace -o h", {RING_CELL!r})
        h = shell.user_ns["h"]
        job = h.client.get_job(h.name)
        print("RESULT", json.dumps({{"status": job.status, "runtime": str(job.runtime)}}))
        """
    )
    out = run_in(venv, code, tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "HEAVY []" in out.stdout  # loading the extension and the plugins imports no framework
    assert "%%ringtrain (RingTrainer), policy ring, runtime ring-distributed" in out.stdout
    assert "kf-ring 0.1.0" in out.stdout
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("ring-distributed ")]
    assert rows == [
        ["ring-distributed", "ring", "plain", "1", "-", "plugin", "ring"]
    ]  # %kf_runtimes
    assert "ring sum=3 world=3" in text  # rank 0 got ranks 1 and 2 at RING_ADDR
    result = json.loads(out.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result == {"status": "Complete", "runtime": "ring-distributed"}
    # the broken and clashing plugins: one warning paragraph each, the tool works
    assert out.stderr.count("kf-jupyter plugin ") == 3  # once each, not again per magic
    assert "No module named 'kf_ring_missing_dependency'" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_the_built_in_magics_keep_their_names_beside_clashing_plugins(venv, tmp_path) -> None:
    code = SHELL + textwrap.dedent(
        """\
        from kf_jupyter.magics.core import KubeflowMagics
        magic = shell.find_cell_magic("torchtrain")
        print("OWNER", type(magic.__self__).__name__)
        from kf_jupyter.policies import get_policy
        print("POLICY", type(get_policy("torch")).__module__)
        """
    )
    out = run_in(venv, code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "OWNER KubeflowMagics" in out.stdout
    assert "POLICY kf_jupyter.policies.torch" in out.stdout
    assert "%%torchtrain has the name of a kf-jupyter magic" in out.stderr
    assert "pip uninstall kf-ring-broken" in out.stderr


@pytest.mark.slow
def test_an_installed_plugin_runs_a_job_on_the_harness(
    venv, tmp_path, k8s_cluster, k8s_standin, k8s_admin_kubeconfig, k8s_namespace
) -> None:
    """The admin installs the plugin's runtime (python -m kf_jupyter.plugins --manifests); the
    TrainJob passes the harness's admission and its three pods sum the ring."""
    import yaml
    from kubernetes import client as k8s

    out = run_in(venv, "from kf_jupyter.plugins import main; main(['--manifests'])", tmp_path)
    assert out.returncode == 0, out.stderr
    custom: Any = k8s.CustomObjectsApi(k8s_cluster.api_client())
    (manifest,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    try:
        custom.create_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", manifest
        )
    except k8s.ApiException as exc:  # another run of this test in the session made it
        if exc.status != 409:
            raise
    code = SHELL + textwrap.dedent(
        f"""\
        from kf_jupyter.plugins import get_option
        shell.user_ns["opts"] = [get_option("ring-tag")("blue")]
        shell.run_cell_magic(
            "ringtrain",
            "-n 3 --backend kubernetes --namespace {k8s_namespace} --options opts -o h",
            {RING_CELL!r},
        )
        h = shell.user_ns["h"]
        job = h.client.get_job(h.name)
        print("RESULT", json.dumps({{"status": job.status, "name": h.name}}))
        """
    )
    out = run_in(venv, code, tmp_path, KUBECONFIG=k8s_admin_kubeconfig)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    result = json.loads(out.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["status"] == "Complete", text
    assert "ring sum=3 world=3" in text
    tj = custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", k8s_namespace, "trainjobs", result["name"]
    )
    assert tj["spec"]["runtimeRef"]["name"] == "ring-distributed"
    assert tj["metadata"]["labels"]["ring.example.com/tag"] == "blue"
    assert tj["spec"]["trainer"]["numNodes"] == 3


def test_a_plugins_magic_takes_the_training_flags(fake_plugins, tmp_path, monkeypatch, capsys):
    """`%%ringtrain --dry-run`: the job on ring-distributed with 2 nodes; the flags are the
    training flags (-n; no -p, as RingTrainer has no processes per node)."""
    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.magics.core import KubeflowMagics

    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.chdir(tmp_path)
    fake_plugins(("ring", "kf_ring.plugin:plugin"))
    sh = InteractiveShell.instance()
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    magics.register_plugin_magics()
    sh.run_cell_magic("ringtrain", "-n 2 --dry-run --backend local --name ring-dry", "print(1)\n")
    out = capsys.readouterr().out
    assert "ring-distributed" in out and "ring-dry" in out
    assert "2 nodes" in out
    result = sh.run_cell("%%ringtrain -p 2 --dry-run\nprint(1)\n")
    assert result.error_in_exec is not None or result.error_before_exec is not None
    # A cell too large for a job's command is refused before IPython parses it, as for the
    # built-in magics (the same one-paragraph error, not minutes of IPython's clean-up passes).
    capsys.readouterr()
    big = sh.run_cell("%%ringtrain --dry-run\n" + "x = 1\n" * 2_000_000)
    assert big.error_before_exec is not None and "holds at most" in str(big.error_before_exec)
    del sh.magics_manager.magics["cell"]["ringtrain"], sh.magics_manager.magics["line"]["ringtrain"]


@dataclass(kw_only=True)
class EchoTrainer(ConfigTrainer, XGBoostTrainer):
    """A plugin's configuration-driven (Tier-2) trainer: prints its words on every rank."""

    program_name: ClassVar[str] = "echo.py"

    def validate_config(self) -> None:
        if not isinstance((self.config or {}).get("words"), list):
            raise ValidationError("EchoTrainer needs 'words', a list.")

    def program(self) -> str:
        return embed_call("def main(cfg):\n    print(*cfg['words'])\n", "main", self.config_json())


echo_plugin = plugins.Plugin(trainers={"echotrain": EchoTrainer})


def test_a_plugins_tier2_magic_takes_a_configuration_cell(fake_plugins, tmp_path, monkeypatch):
    """`%%echotrain`: the cell is the trainer's YAML configuration, as for %%transformerstrain."""
    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.magics.core import KubeflowMagics

    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    fake_plugins(("echo", "tests.test_plugins:echo_plugin"))
    sh = InteractiveShell.instance()
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    magics.register_plugin_magics()
    try:
        trainer = magics._trainer(
            "echotrain",
            _parse(sh, "echotrain", "-n 2"),
            "words: [hello, ring]\n",
        )
        assert isinstance(trainer, EchoTrainer) and trainer.num_nodes == 2
        assert trainer.config == {"words": ["hello", "ring"]}
        with pytest.raises(ValidationError, match="needs 'words'"):
            magics._trainer("echotrain", _parse(sh, "echotrain", ""), "other: 1\n")
    finally:
        for kind in ("cell", "line"):
            sh.magics_manager.magics[kind].pop("echotrain", None)


def _parse(sh: Any, magic: str, line: str) -> Any:
    from IPython.core import magic_arguments as ma

    func = sh.magics_manager.magics["cell"][magic]
    args = ma.parse_argstring(func, line)
    args.script_args = []
    return args
