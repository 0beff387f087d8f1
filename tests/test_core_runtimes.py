"""Runtime parsing and selection, against the real default runtimes of Trainer v2.3."""

from __future__ import annotations

import copy
import logging

import pytest

from kf_jupyter import (
    AmbiguousRuntimeError,
    JAXTrainer,
    MPITrainer,
    Runtime,
    RuntimeMismatchError,
    RuntimeNotFoundError,
    TorchTrainer,
    XGBoostTrainer,
    select_runtime,
)
from tests.k8s_cluster.crds import load_runtimes


def train() -> None:
    pass


@pytest.fixture(scope="module")
def defaults() -> list[Runtime]:
    return [Runtime.from_manifest(obj) for obj in load_runtimes()]


def test_parse_default_runtimes(defaults: list[Runtime]) -> None:
    by_name = {r.name: r for r in defaults}
    torch = by_name["torch-distributed"]
    assert (torch.framework, torch.ml_policy, torch.num_nodes) == ("torch", "torch", 1)
    assert torch.image and torch.image.startswith("pytorch/pytorch")
    assert torch.kind == "ClusterTrainingRuntime"
    ds = by_name["deepspeed-distributed"]
    assert (ds.framework, ds.ml_policy, ds.num_proc_per_node) == ("deepspeed", "mpi", 1)
    assert ds.trainer_job == "launcher"
    assert by_name["jax-distributed"].ml_policy == "jax"
    assert by_name["xgboost-distributed"].ml_policy == "xgboost"


def test_unlabelled_runtime_is_unknown_not_dropped() -> None:
    rt = Runtime.from_manifest(
        {"kind": "TrainingRuntime", "metadata": {"name": "x", "namespace": "ns"}, "spec": {}}
    )
    assert (rt.framework, rt.ml_policy, rt.kind, rt.namespace) == (
        "unknown",
        "plain",
        "TrainingRuntime",
        "ns",
    )


def test_two_torch_runtimes_resolve_to_canonical(defaults, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="kf_jupyter.runtimes"):
        rt = select_runtime(TorchTrainer(func=train), defaults)
    assert rt.name == "torch-distributed"
    assert "canonical name torch-distributed" in caplog.text


def test_other_frameworks(defaults) -> None:
    assert select_runtime(MPITrainer(func=train), defaults).ml_policy == "mpi"
    assert select_runtime(JAXTrainer(func=train), defaults).name == "jax-distributed"
    assert select_runtime(XGBoostTrainer(func=train), defaults).name == "xgboost-distributed"


def test_explicit_name_wins_if_it_fits(defaults) -> None:
    rt = select_runtime(TorchTrainer(func=train), defaults, name="torch-distributed-with-cache")
    assert rt.name == "torch-distributed-with-cache"
    with pytest.raises(RuntimeMismatchError) as info:
        select_runtime(TorchTrainer(func=train), defaults, name="jax-distributed")
    assert "framework 'jax'" in str(info.value)
    with pytest.raises(RuntimeNotFoundError) as info2:
        select_runtime(TorchTrainer(func=train), defaults, name="nope")
    assert "torch-distributed" in str(info2.value)  # lists what exists


def _rename(rt: Runtime, name: str, **kw) -> Runtime:
    d = dict(rt.__dict__)
    d.update(name=name, **kw)
    return Runtime(**d)


def test_admin_default_annotation_wins(defaults) -> None:
    torch = next(r for r in defaults if r.name == "torch-distributed")
    fav = _rename(torch, "torch-2-14", annotations={"kf-jupyter.io/default": "true"})
    assert select_runtime(TorchTrainer(func=train), [*defaults, fav]).name == "torch-2-14"


def test_ambiguous_without_canonical(defaults) -> None:
    torch = next(r for r in defaults if r.name == "torch-distributed")
    pool = [_rename(torch, "torch-a"), _rename(torch, "torch-b")]
    with pytest.raises(AmbiguousRuntimeError) as info:
        select_runtime(TorchTrainer(func=train), pool)
    msg = str(info.value)
    assert "torch-a" in msg and "torch-b" in msg and "runtime='<name>'" in msg


def test_deprecated_skipped(defaults) -> None:
    torch = next(r for r in defaults if r.name == "torch-distributed")
    old = _rename(torch, "torch-old", deprecated=True)
    assert select_runtime(TorchTrainer(func=train), [old, _rename(torch, "t")]).name == "t"
    with pytest.raises(RuntimeNotFoundError) as info:
        select_runtime(TorchTrainer(func=train), [old])
    assert "Deprecated runtimes skipped: torch-old" in str(info.value)


def test_no_runtime_lists_candidates(defaults) -> None:
    jax_only = [r for r in defaults if r.framework == "jax"]
    with pytest.raises(RuntimeNotFoundError) as info:
        select_runtime(TorchTrainer(func=train), jax_only)
    assert "jax-distributed" in str(info.value)


def test_mpi_trainer_prefers_mpi_label_then_deepspeed(defaults) -> None:
    ds = next(r for r in defaults if r.name == "deepspeed-distributed")
    mpi = _rename(ds, "mpi-distributed", framework="mpi")
    assert select_runtime(MPITrainer(func=train), [*defaults, mpi]).name == "mpi-distributed"
    manifest = copy.deepcopy(
        next(o for o in load_runtimes() if o["metadata"]["name"] == "deepspeed-distributed")
    )
    manifest["metadata"]["labels"]["trainer.kubeflow.org/support"] = "deprecated"
    assert Runtime.from_manifest(manifest).deprecated
