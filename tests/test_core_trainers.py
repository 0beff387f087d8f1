"""Trainers, RuntimeConfig and validation rules: what a user sees for good and bad input."""

from __future__ import annotations

import pytest

import kf_jupyter as kf
from kf_jupyter import (
    BaseTrainer,
    JAXTrainer,
    MPITrainer,
    RuntimeConfig,
    SecretRef,
    TorchTrainer,
    ValidationError,
    XGBoostTrainer,
)
from kf_jupyter.config import mask_secrets, mask_url


def train(lr: float = 0.1) -> float:
    return lr


def test_frameworks_in_preference_order() -> None:
    assert TorchTrainer.supported_frameworks == ("torch",)
    assert MPITrainer.supported_frameworks == ("mpi", "deepspeed", "mlx")
    assert JAXTrainer.supported_frameworks == ("jax",)
    assert XGBoostTrainer.supported_frameworks == ("xgboost",)


def test_base_trainer_is_abstract() -> None:
    with pytest.raises(TypeError):
        BaseTrainer(func=train)


def test_trainer_fields() -> None:
    t = TorchTrainer(
        func=train,
        func_args={"lr": 0.5},
        num_nodes=2,
        num_proc_per_node=4,
        max_restarts=3,
        monitor_interval=0.5,
        resources_per_node={"cpu": 2, "memory": "4Gi", "gpu": 1},
        image="pytorch/pytorch:2.13.0",
    )
    assert t.resources() == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert t.procs_per_node == 4


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"num_nodes": 0}, "num_nodes must be a whole number of at least 1"),
        ({"num_proc_per_node": 0}, "num_proc_per_node must be"),
        ({"max_restarts": -1}, "max_restarts must be"),
        ({"monitor_interval": 0}, "monitor_interval must be"),
        ({"resources_per_node": {"gpu": 1, "mig-1g.5gb": 1}}, "both whole GPUs"),
        ({"resources_per_node": {"gpus": 1}}, "Unknown resource 'gpus'"),
        ({"resources_per_node": {"cpu": "two"}}, "Invalid quantity 'two'"),
        ({"func_args": {"model": object()}}, "func_args['model'] is a object"),
        ({"func_args": [1, 2]}, "func_args must be a dict"),
        ({"image": "bad image; rm -rf /"}, "Invalid container image"),
        ({"func": "train"}, "func must be a Python function"),
    ],
)
def test_bad_trainer_input_gets_clear_error(kwargs: dict, words: str) -> None:
    kwargs.setdefault("func", train)
    with pytest.raises(ValidationError) as info:
        TorchTrainer(**kwargs)
    assert words in str(info.value)


def test_resource_names() -> None:
    t = TorchTrainer(
        func=train,
        resources_per_node={"mig-1g.5gb": 2, "storage": "10Gi", "amd.com/gpu": "1"},
    )
    assert t.resources() == {
        "nvidia.com/mig-1g.5gb": "2",
        "ephemeral-storage": "10Gi",
        "amd.com/gpu": "1",
    }


def test_runtime_config_validates() -> None:
    rc = RuntimeConfig(
        packages_to_install=["transformers[torch]", "numpy>=1.26,<3"],
        pip_index_urls=["https://pypi.org/simple", "https://u:p4ss@private.example.com/simple"],
        env={"LR": "0.1", "TOKEN": SecretRef("hf", "token")},
    )
    assert rc.packages == ["transformers[torch]", "numpy>=1.26,<3"]
    text = repr(rc)
    assert "p4ss" not in text and "****" in text
    assert "0.1" not in text  # env values are not echoed in reprs
    assert rc.to_dict()["env"]["TOKEN"] == {"secret": "hf", "key": "token"}


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"packages_to_install": "numpy"}, "must be a list"),
        ({"packages_to_install": ["--index-url=http://evil"]}, "Invalid package"),
        ({"packages_to_install": ["numpy; rm -rf /"]}, "Invalid package"),
        ({"packages_to_install": ["numpy==$(id)"]}, "Invalid package"),
        ({"pip_index_urls": ["ftp://x/simple"]}, "Invalid pip index URL"),
        ({"env": {"1BAD": "x"}}, "Invalid environment variable name"),
        ({"env": {"A-B": "x"}}, "Invalid environment variable name"),
        ({"env": {"A": 1}}, "must be strings"),
        ({"env": {"A": "x\x00y"}}, "NUL"),
    ],
)
def test_bad_runtime_config(kwargs: dict, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        RuntimeConfig(**kwargs)
    assert words in str(info.value)


def test_masking() -> None:
    assert mask_url("https://user:secret@h.example.com/simple") == (
        "https://user:****@h.example.com/simple"
    )
    assert mask_url("https://h.example.com/simple") == "https://h.example.com/simple"
    text = "pip install --index-url 'https://tok3n@h.example.com/simple' x"
    assert "tok3n" not in mask_secrets(text)
    assert "https://a:b@x.io/s and http://c:d@y.io" not in mask_secrets(
        "https://a:b@x.io/s and http://c:d@y.io"
    )


def test_public_names_importable() -> None:
    for name in kf.__all__:
        assert getattr(kf, name) is not None, name
    assert kf.TrainerClient.__name__ == "TrainerClient"
