"""TransformersTrainer ships its own packages to the cluster (issue 35 B).

The default torch runtime's image has neither transformers nor accelerate (nor peft): the job
must install them with the user's packages, or every rank fails with ModuleNotFoundError.
"""

from __future__ import annotations

from typing import Any

import pytest

from kf_jupyter.config import RuntimeConfig
from kf_jupyter.transformers_trainer import TransformersTrainer

from .test_k8s_backend import _backend
from .test_tier2 import TINY

pytestmark = pytest.mark.slow


def _command(dry: dict[str, Any]) -> str:
    trainer = dry["trainjob"]["spec"]["trainer"]
    return "\n".join(trainer.get("command", []) + trainer.get("args", []))


def test_transformers_job_installs_transformers_and_accelerate(
    k8s_admin_kubeconfig: str, k8s_standin: Any, k8s_namespace: str
) -> None:
    backend = _backend(k8s_admin_kubeconfig, k8s_namespace)
    plain = _command(backend.dry_run(TransformersTrainer(config=TINY)))
    assert "installing 2 packages (transformers, accelerate) with pip" in plain
    lora = {**TINY, "lora": {"r": 4, "lora_alpha": 8, "target_modules": ["c_attn"]}}
    with_lora = _command(backend.dry_run(TransformersTrainer(config=lora)))
    assert "installing 3 packages (transformers, accelerate, peft) with pip" in with_lora
    # the user's own pin wins: the project is not named twice
    rc = RuntimeConfig(packages_to_install=["transformers==4.57.1", "rich"], workspace=False)
    pinned = _command(backend.dry_run(TransformersTrainer(config=TINY), runtime_config=rc))
    assert "installing 3 packages (transformers==4.57.1, rich, accelerate) with pip" in pinned


def imports_transformers():
    import transformers  # noqa: F401


def test_a_transformers_job_runs_on_the_torch_image_and_shows_progress_without_the_gate(
    k8s_admin_kubeconfig: str, k8s_standin: Any, k8s_namespace: str
) -> None:
    """The harness's torch-image ranks lack transformers as the image does (a plain function
    importing it fails); a TransformersTrainer job installs it and runs, and with the
    TrainJobStatus gate off (the default) its progress comes from the log's report lines."""
    from kf_jupyter import TorchTrainer
    from kf_jupyter.errors import JobFailedError
    from kf_jupyter.report import parse_report

    pytest.importorskip("transformers")
    backend = _backend(k8s_admin_kubeconfig, k8s_namespace)
    plain = backend.train(TorchTrainer(func=imports_transformers, num_proc_per_node=1))
    with pytest.raises(JobFailedError) as err:
        backend.wait_for_job_status(plain, timeout=300)
    assert "ModuleNotFoundError: No module named 'transformers'" in str(err.value)

    config = {**TINY, "save": False}
    name = backend.train(TransformersTrainer(config=config, num_nodes=1, num_proc_per_node=1))
    job = backend.wait_for_job_status(name, timeout=900)
    records = list(backend.iter_log_records(name))
    assert job.status == "Complete", [r.line for r in records]
    assert job.trainer_status is None  # the gate is off: nothing posted
    reports = [r for r in (parse_report(rec.line) for rec in records) if r]
    assert reports and reports[-1]["progress"] == pytest.approx(1.0), reports
    assert any("loss" in r["metrics"] for r in reports), reports
