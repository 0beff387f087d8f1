"""The local backend offers a cluster's default runtimes under their real names (issue 11).

`torch-distributed`, `deepspeed-distributed`, ... with their framework labels and ML policies,
read from the Trainer manifests when present, else from a built-in copy; the old `local-*` names
are aliases with one deprecation warning; torchtune runtimes are refused with a clear error.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter import (
    JAXTrainer,
    MPITrainer,
    RuntimeNotFoundError,
    TorchTrainer,
    TrainerClient,
    ValidationError,
    XGBoostTrainer,
)
from kf_jupyter.backends.local import runtimes as lr
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.magics.core import KubeflowMagics
from tests.k8s_cluster.crds import ManifestsNotFound
from tests.k8s_cluster.crds import manifests_dir as harness_manifests

DEFAULT_NAMES = [
    "deepspeed-distributed",
    "mlx-distributed",
    "torch-distributed",
    "jax-distributed",
    "xgboost-distributed",
    "torchtune-llama3.2-1b",
    "torchtune-llama3.2-3b",
    "torchtune-qwen2.5-1.5b",
]


def train() -> None:
    print("hi")


@pytest.fixture
def manifests() -> Path:
    try:
        return harness_manifests()
    except ManifestsNotFound as e:
        pytest.skip(str(e))


@pytest.fixture
def use_manifests(monkeypatch):
    """Point the local backend at a manifests dir (or a missing one) for one test."""

    def use(path: Path | str) -> None:
        monkeypatch.setenv(lr.MANIFESTS_ENV, str(path))
        lr._load.cache_clear()

    yield use
    lr._load.cache_clear()


@pytest.fixture
def client(tmp_path) -> TrainerClient:
    return TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))


@pytest.fixture
def fresh_aliases(monkeypatch):
    monkeypatch.setattr(lr, "_warned", set())


def test_builtin_copy_matches_the_real_manifests(manifests, use_manifests) -> None:
    use_manifests(manifests)
    assert lr.runtimes_source() == str(manifests / "base" / "runtimes")
    assert lr.local_runtimes() == lr.builtin()  # the copy has not drifted from the manifests


def test_default_install_names_labels_and_policies(client, use_manifests, tmp_path) -> None:
    use_manifests(tmp_path / "nowhere")  # the built-in copy
    assert lr.runtimes_source().startswith("built-in")
    runtimes = {r.name: r for r in client.list_runtimes()}
    assert list(runtimes) == DEFAULT_NAMES
    assert (runtimes["torch-distributed"].framework, runtimes["torch-distributed"].ml_policy) == (
        "torch",
        "torch",
    )
    ds = runtimes["deepspeed-distributed"]
    assert (ds.framework, ds.ml_policy, ds.num_proc_per_node) == ("deepspeed", "mpi", 1)
    assert runtimes["mlx-distributed"].ml_policy == "mpi"
    assert runtimes["jax-distributed"].ml_policy == "jax"
    assert runtimes["xgboost-distributed"].ml_policy == "xgboost"
    assert runtimes["torchtune-llama3.2-1b"].framework == "torchtune"
    assert all(r.kind == "ClusterTrainingRuntime" and r.image is None for r in runtimes.values())
    assert [r.name for r in client.list_runtimes("torch")] == ["torch-distributed"]
    assert client.get_runtime("jax-distributed").labels == {"trainer.kubeflow.org/framework": "jax"}


def test_runtimes_are_read_from_the_manifests(manifests, use_manifests, tmp_path) -> None:
    copy = tmp_path / "manifests"
    shutil.copytree(manifests / "base" / "runtimes", copy / "base" / "runtimes")
    extra = yaml.safe_load((copy / "base/runtimes/torch_distributed.yaml").read_text())
    extra["metadata"]["name"] = "torch-distributed-gpu"
    (copy / "base/runtimes/torch_gpu.yaml").write_text(yaml.safe_dump(extra))
    kfile = copy / "base/runtimes/kustomization.yaml"
    spec = yaml.safe_load(kfile.read_text())
    spec["resources"].append("torch_gpu.yaml")
    kfile.write_text(yaml.safe_dump(spec))
    use_manifests(copy)
    names = [r.name for r in lr.local_runtimes()]
    assert names == [*DEFAULT_NAMES, "torch-distributed-gpu"]
    # two runtimes share the torch label: the canonical name is the local default
    c = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    rt = c.dry_run(TorchTrainer(func=train))["trainjob"]["spec"]["runtimeRef"]
    assert rt["name"] == "torch-distributed"


def test_default_selection_per_trainer(client) -> None:
    def chosen(trainer, runtime=None):
        return client.dry_run(trainer, runtime=runtime)["trainjob"]["spec"]["runtimeRef"]

    assert chosen(TorchTrainer(func=train)) == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    assert chosen(MPITrainer(func=train))["name"] == "deepspeed-distributed"
    assert chosen(MPITrainer(func=train), "mlx-distributed")["name"] == "mlx-distributed"
    assert chosen(JAXTrainer(func=train))["name"] == "jax-distributed"
    assert chosen(XGBoostTrainer(func=train))["name"] == "xgboost-distributed"
    assert chosen(TorchTrainer(func=train), "torch-distributed")["name"] == "torch-distributed"


def test_old_names_are_aliases_with_one_warning(client, fresh_aliases) -> None:
    with pytest.warns(FutureWarning, match="'local-torch' is deprecated.*'torch-distributed'"):
        assert client.get_runtime("local-torch").name == "torch-distributed"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second use says nothing
        assert client.get_runtime("local-torch").name == "torch-distributed"
        plan = client.dry_run(TorchTrainer(func=train), runtime="local-torch")
    assert plan["trainjob"]["spec"]["runtimeRef"]["name"] == "torch-distributed"
    with pytest.warns(FutureWarning) as caught:
        assert client.get_runtime("local-mpi").name == "deepspeed-distributed"
    assert len(caught) == 1 and caught[0].filename == __file__  # points at the caller
    with pytest.warns(FutureWarning, match="local-jax"):
        assert client.get_runtime("local-jax").name == "jax-distributed"
    with pytest.warns(FutureWarning, match="local-xgboost"):
        assert client.get_runtime("local-xgboost").name == "xgboost-distributed"


def test_unknown_name_lists_the_real_names(client) -> None:
    with pytest.raises(RuntimeNotFoundError, match="torch-distributed, jax-distributed") as e:
        client.get_runtime("pytorch")
    assert "'pytorch'" in str(e.value)


def test_torchtune_is_refused_with_a_clear_error(client) -> None:
    rt = client.get_runtime("torchtune-llama3.2-1b")  # listed like on a cluster
    assert rt.framework == "torchtune"
    for call in (client.dry_run, client.train):
        with pytest.raises(ValidationError) as e:
            call(TorchTrainer(func=train), runtime="torchtune-llama3.2-1b")
        msg = str(e.value)
        assert "model" in msg and "cluster" in msg and "torch-distributed" in msg
        assert "\n" not in msg
    assert client.list_jobs() == []


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    yield sh


def test_magic_runtime_flag_takes_the_cluster_name(shell, capsys) -> None:
    result = shell.run_cell("%%torchtrain --runtime torch-distributed --dry-run\nprint(1)\n")
    out = capsys.readouterr()
    assert result.success, out.out + out.err
    job = next(d for d in yaml.safe_load_all(out.out) if d and d.get("kind") == "TrainJob")
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    shell.run_cell("%kf_runtimes")
    table = capsys.readouterr().out
    assert "deepspeed-distributed" in table and "local-torch" not in table
    tune = next(ln for ln in table.splitlines() if ln.startswith("torchtune-llama3.2-1b"))
    assert tune.rstrip().endswith("cluster only")


def test_offline_cluster_dry_run_names_the_default_installs_runtime(shell, capsys, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    result = shell.run_cell("%%mpitrain --backend kubernetes --dry-run\nprint(1)\n")
    out = capsys.readouterr()
    assert result.success, out.out + out.err
    job = next(d for d in yaml.safe_load_all(out.out) if d and d.get("kind") == "TrainJob")
    assert job["spec"]["runtimeRef"]["name"] == "deepspeed-distributed"  # no mpi-distributed
    assert job["metadata"]["annotations"]["kf-jupyter.io/framework"] == "deepspeed"
    assert "cannot be reached" in out.err
