"""Configuration-driven (Tier-2) trainers (issue 23): the `ConfigTrainer` base and
`TransformersTrainer`, fine-tuning a tiny model built from a configuration (no download) on a
synthetic dataset, locally for real and as a TrainJob on the harness; `%%transformerstrain`.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from kf_jupyter import TorchTrainer, TrainerClient, XGBoostTrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.build import build_trainjob
from kf_jupyter.errors import ValidationError
from kf_jupyter.runtimes import Runtime
from kf_jupyter.tier2 import ConfigTrainer, embed_call
from kf_jupyter.transformers_trainer import TransformersTrainer, parse_config_text

TINY = {
    "model": {
        "config": {
            "model_type": "gpt2",
            "n_layer": 1,
            "n_head": 2,
            "n_embd": 16,
            "vocab_size": 64,
            "n_positions": 32,
        }
    },
    "dataset": {"synthetic": {"num_samples": 24, "seq_len": 16}},
    "training_args": {
        "max_steps": 6,
        "per_device_train_batch_size": 4,
        "logging_steps": 2,
        "save_strategy": "no",
        "disable_tqdm": True,
    },
}


@dataclass(kw_only=True)
class EchoTrainer(ConfigTrainer, XGBoostTrainer):
    """A minimal Tier-2 trainer on another Tier-1 framework: prints its config on every rank."""

    program_name: ClassVar[str] = "echo.py"

    def validate_config(self) -> None:
        if "words" not in (self.config or {}):
            raise ValidationError("EchoTrainer needs 'words'.")

    def program(self) -> str:
        module = textwrap.dedent(
            """\
            import os

            def main(cfg):
                rank = os.environ["DMLC_TASK_ID"]
                print(f"rank {rank} of {os.environ['DMLC_NUM_WORKER']}: {' '.join(cfg['words'])}")
            """
        )
        return embed_call(module, "main", self.config_json())


@pytest.fixture
def client(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    yield c
    for job in c.list_jobs():
        c.delete_job(job.name)


# -- the base (fast) ----------------------------------------------------------------------------


def test_a_tier2_trainer_is_its_tier1_trainer_with_a_generated_program() -> None:
    t = TransformersTrainer(config=TINY, num_nodes=2, num_proc_per_node=1)
    assert isinstance(t, TorchTrainer) and TransformersTrainer.tier1() is TorchTrainer
    assert t.framework == "torch" and t.policy == "torch" and t.func is None
    assert t.script.name == "transformers_train.py"
    assert "def main(cfg):" in t.script.source and '"n_layer": 1' in t.script.source
    assert "kf_jupyter" not in t.script.source.split('"""', 2)[2]  # no import of ours
    rt = Runtime(name="torch-distributed", framework="torch", ml_policy="torch")
    job = build_trainjob(t, rt, name="hf-1")
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 1
    assert "torchrun" in trainer["command"][2]
    assert job["metadata"]["annotations"]["kf-jupyter.io/trainer"] == "TransformersTrainer"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"modle": "gpt2"}, "unknown key"),
        ({"model": None}, "'model' is required"),
        ({"model": {"config": {"n_layer": 1}}}, "model_type"),
        ({"dataset": {}}, "exactly one source"),
        ({"dataset": {"synthetic": {}, "hub": "imdb"}}, "exactly one source"),
        ({"dataset": {"path": "train.jsonl"}}, "needs a tokenizer"),
        ({"task": "translation"}, "not one of"),
        ({"training_args": ["max_steps", 3]}, "must be a dict"),
        ({"training_args": {"lr": float("nan")}}, "plain values"),
    ],
)
def test_configuration_mistakes_are_one_paragraph(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message) as err:
        TransformersTrainer(config={**TINY, **change})
    assert "\n" not in str(err.value)


def test_a_tier2_trainer_takes_no_code_and_needs_a_tier1_base() -> None:
    with pytest.raises(ValidationError, match="not your code"):
        TransformersTrainer(config=TINY, func=print)

    @dataclass(kw_only=True)
    class Orphan(ConfigTrainer):
        def program(self) -> str:
            return ""

    with pytest.raises(TypeError, match="Tier-1"):
        Orphan(config={})


def test_the_magic_body_is_yaml_or_json() -> None:
    assert parse_config_text("model: gpt2\ndataset: {hub: imdb}\n") == {
        "model": "gpt2",
        "dataset": {"hub": "imdb"},
    }
    assert parse_config_text('{"model": "gpt2"}') == {"model": "gpt2"}
    with pytest.raises(ValidationError, match="mapping"):
        parse_config_text("- a\n- b\n")


def test_a_tier2_trainer_on_xgboost_runs_locally_on_two_nodes(client) -> None:
    """The base is framework-neutral: discovery, policy and the local backend work unchanged."""
    name = client.train(EchoTrainer(config={"words": ["it", "works"]}, num_nodes=2))
    job = client.wait_for_job_status(name, timeout=120)
    assert job.runtime == "xgboost-distributed"
    lines = [r.line for r in client.iter_log_records(name)]
    assert any("rank 0 of 2: it works" in ln for ln in lines)
    assert any("rank 1 of 2: it works" in ln for ln in lines)


def test_transformerstrain_dry_run_in_a_real_shell(tmp_path, monkeypatch, capsys) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.magics.core import KubeflowMagics

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    sh = InteractiveShell.instance()
    try:
        sh.register_magics(KubeflowMagics(shell=sh))
        body = textwrap.dedent(
            """\
            model: {config: {model_type: gpt2, n_layer: 1, n_head: 2, n_embd: 16}}
            dataset: {synthetic: {num_samples: 8}}
            training_args: {max_steps: 2}
            """
        )
        sh.run_cell(f"%%transformerstrain -n 2 -p 1 --dry-run\n{body}")
        out = capsys.readouterr().out
        assert "kind: TrainJob" in out and "runtimeRef" in out and "torchrun" in out
        assert "TransformersTrainer" in out
        result = sh.run_cell("%%transformerstrain --dry-run\nmodel: gpt2\n")
        text = "".join(capsys.readouterr())
        assert not result.success and "'dataset' needs exactly one source" in text
        assert not (tmp_path / "state" / "jobs").exists()
    finally:
        InteractiveShell.clear_instance()


# -- for real (slow) -----------------------------------------------------------------------------


@pytest.mark.slow
def test_transformers_trainer_fine_tunes_a_tiny_model_locally(client, tmp_path) -> None:
    pytest.importorskip("transformers")
    name = client.train(TransformersTrainer(config=TINY, num_nodes=1, num_proc_per_node=2))
    job = client.wait_for_job_status(name, timeout=900)
    logs = "\n".join(client.get_job_logs(name))
    assert job.status == "Complete", logs
    assert "train metrics:" in logs
    ts = job.trainer_status
    assert ts is not None and ts.progress_percentage == 100, logs
    assert float(ts.metrics["loss"]) > 0
    # the model lands next to the notebook (the local job's working folder)
    assert (tmp_path / "transformers-output" / "config.json").is_file()


@pytest.fixture
def k8s(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig

    return TrainerClient(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )


@pytest.mark.slow
def test_transformers_trainer_runs_as_a_trainjob_on_the_harness(k8s, k8s_cluster) -> None:
    pytest.importorskip("transformers")
    from kubernetes import client as kc

    config = {**TINY, "save": False}
    name = k8s.train(TransformersTrainer(config=config, num_nodes=1, num_proc_per_node=1))
    obj = kc.CustomObjectsApi(k8s_cluster.api_client()).get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", k8s.backend.namespace, "trainjobs", name
    )
    assert obj["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert obj["metadata"]["annotations"]["kf-jupyter.io/trainer"] == "TransformersTrainer"
    job = k8s.wait_for_job_status(name, timeout=900)
    logs = "\n".join(k8s.get_job_logs(name))
    assert job.status == "Complete", logs
    assert "train metrics:" in logs
    k8s.delete_job(name)


@pytest.mark.slow
def test_transformers_trainer_with_lora_trains_only_the_adapter(client, tmp_path) -> None:
    pytest.importorskip("peft")
    config = {
        **TINY,
        "lora": {"r": 4, "lora_alpha": 8, "target_modules": ["c_attn"]},
        "training_args": {**TINY["training_args"], "output_dir": "lora-out"},
    }
    name = client.train(TransformersTrainer(config=config, num_nodes=1, num_proc_per_node=1))
    job = client.wait_for_job_status(name, timeout=900)
    logs = "\n".join(client.get_job_logs(name))
    assert job.status == "Complete", logs
    # peft saves the adapter alone, next to the notebook
    assert (tmp_path / "lora-out" / "adapter_config.json").is_file(), logs
    assert not (tmp_path / "lora-out" / "model.safetensors").exists()
