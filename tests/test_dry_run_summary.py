"""A dry run says what would be submitted in ten lines before the full manifest (issue 22).

The manifest of a job with a function is ~700 lines (the runner travels in its command) and the
user's settings come at its end. The summary names the runtime, nodes × processes and where the
numbers come from, image, resources, env names (never values), packages, workspace files and the
runtime patches; in a notebook the manifest is folded below it. Magics (with the forms), and the
Python API's `TrainerClient.dry_run`. Fast: a real InteractiveShell, the local backend.
"""

from __future__ import annotations

import re

import pytest
import yaml
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from kf_jupyter import RuntimeConfig, SecretRef, TorchTrainer, TrainerClient
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.dryrun import DryRun
from kf_jupyter.magics.core import KubeflowMagics
from kf_jupyter.widgets.forms import PodOverridesForm, RuntimeConfigForm


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    nb = tmp_path / "nb"
    nb.mkdir()
    (nb / "datautils.py").write_text("X = 1\n")
    monkeypatch.chdir(nb)
    sh = InteractiveShell.instance()
    sh.register_magics(KubeflowMagics(sh))
    yield sh
    InteractiveShell.clear_instance()


def _summary(text: str) -> dict[str, str]:
    """The `#   key  value` lines at the top."""
    lines = text.splitlines()
    assert lines[0] == "# Dry run: nothing was submitted. In short:", text[:500]
    out = {}
    for ln in lines[1:]:
        m = re.fullmatch(r"#   (\w+) +(.*)", ln)
        if m is None:
            assert re.fullmatch(r"# The full manifest follows \(\d+ lines\)\.", ln), ln
            break
        out[m.group(1)] = m.group(2)
    return out


def test_the_magic_shows_a_summary_first_and_the_manifest_after(shell, capsys):
    shell.run_cell_magic(
        "torchtrain",
        "-n 2 -p 2 --resources cpu=2,memory=4Gi --env OMP_NUM_THREADS=1 --env WANDB_MODE=off "
        "--dry-run",
        "print('hello')",
    )
    out = capsys.readouterr().out
    s = _summary(out)
    assert list(s) == [
        "job", "runtime", "shape", "image", "resources", "env", "workspace", "patches",
    ]  # fmt: skip
    assert s["job"].endswith("(local backend: processes on this machine)")
    assert s["runtime"] == "torch-distributed (ClusterTrainingRuntime)"
    assert s["shape"] == (
        "2 nodes × 2 processes = 4 ranks (nodes: set with -n / num_nodes; processes: set with "
        "-p / num_proc_per_node)"
    )
    assert s["image"] == "the runtime's"
    assert s["resources"] == "cpu 2, memory 4Gi per node"
    assert s["env"] == "OMP_NUM_THREADS, WANDB_MODE"
    assert re.fullmatch(r"1 file, 6 B from .*/nb \(listed below the manifest\)", s["workspace"])
    assert s["patches"] == "none"
    # The full manifest is all there after it, and the whole output is still YAML.
    docs = list(yaml.safe_load_all(out))
    assert docs[0]["kind"] == "TrainJob" and docs[0]["spec"]["trainer"]["numNodes"] == 2
    assert "datautils.py (6 B)" in out


def test_the_forms_dry_run_summarises_packages_secrets_and_pod_patches(shell, capsys):
    form = RuntimeConfigForm(client_factory=lambda backend: TrainerClient(), framework="torch")
    form.packages.value = "numpy, scikit-learn>=1.4"
    form.add_env("OMP_NUM_THREADS", "1")
    form.add_env("HF_TOKEN", "hf-credentials/token", secret=True)
    pods = PodOverridesForm()
    pods.node_selector.value = "pool=cpu"
    pods.tolerations.value = "dedicated=training:NoSchedule"
    pods.volumes.value = "datasets:/data:ro"
    shell.user_ns.update(config_form=form, pod_form=pods)
    shell.run_cell_magic(
        "torchtrain",
        "--backend kubernetes --dry-run -n 2 --resources cpu=3 --runtime torch-distributed "
        "--config config_form --options pod_form",
        "print('hello')",
    )
    out = capsys.readouterr().out
    s = _summary(out)
    assert s["shape"] == (
        "2 nodes × 3 processes = 6 ranks (nodes: set with -n / num_nodes; processes: one per CPU "
        "asked for, as the Trainer's torch policy does)"
    )
    assert s["packages"] == "numpy, scikit-learn>=1.4"
    assert s["env"] == "OMP_NUM_THREADS, HF_TOKEN (Secret hf-credentials/token)"
    assert s["patches"] == (
        "kf-jupyter.io/kf-jupyter (node: nodeSelector, tolerations, volumes, container node: "
        "volumeMounts); kf-jupyter.io/workspace (node: volumes, container node: volumeMounts)"
    )
    assert s["job"].startswith("torch-") and "Kubernetes backend" in s["job"]


def test_in_a_notebook_the_manifest_is_folded_below_the_summary(shell):
    with capture_output() as cap:
        shell.run_cell_magic("torchtrain", "-n 1 --dry-run", "print('hello')")
    (shown,) = cap.outputs
    page = shown.data["text/html"]
    assert page.index("<table") < page.index("<details>")
    assert re.search(
        r"<summary>Full manifest \(\d+ lines\)</summary><pre>apiVersion: trainer", page
    )
    assert shown.data["text/plain"].startswith("# Dry run: nothing was submitted.")


def _train() -> None:
    print("hello")


def test_the_python_api_dry_run_is_the_same_dict_shown_as_a_summary(tmp_path):
    client = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    config = RuntimeConfig(env={"TOKEN": SecretRef("creds", "token"), "MODE": "fast"})
    plan = client.dry_run(TorchTrainer(func=_train, num_nodes=1, num_proc_per_node=2), None, config)
    assert isinstance(plan, dict) and isinstance(plan, DryRun)
    assert plan["trainjob"]["spec"]["trainer"]["numProcPerNode"] == 2
    summary = plan.summary()
    assert "shape      1 node × 2 processes = 2 ranks" in summary
    assert "env        TOKEN (Secret creds/token), MODE" in summary
    assert "fast" not in summary  # names, not values
    page = plan._repr_html_()
    assert "<details>" in page and "nothing was submitted" in page
    shell = InteractiveShell.instance()
    try:
        text = shell.display_formatter.format(plan)[0]["text/plain"]
    finally:
        InteractiveShell.clear_instance()
    assert text.startswith("# Dry run: nothing was submitted. In short:")
    assert "apiVersion: trainer.kubeflow.org/v1alpha1" in text
