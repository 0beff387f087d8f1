"""The local runtimes: the default Kubeflow Trainer install's runtimes, under their real names.

A cell that names `torch-distributed` runs unchanged on both backends. The names, framework
labels and ML policies are read from the Trainer manifests when they are on this machine
(`$KF_TRAINER_MANIFESTS`, else `<repo>/../shared/kubeflow-trainer/manifests`; the runtimes the
default install's `base/runtimes/kustomization.yaml` lists), else taken from the built-in copy
below (Kubeflow Trainer v2.3.0). Images are not kept: a local run uses the kernel's Python.

The old names (`local-torch`, ...) are aliases for one release: they resolve to the new runtime
with one FutureWarning per name and process. Runtimes whose work needs more than the trainer
(torchtune: a model and dataset fetched by initializers, and its own trainer image) are listed,
so the list matches a cluster's, but refused by `check_emulable` with a clear error.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ...constants import CLUSTER_RUNTIME_KIND, FRAMEWORK_LABEL, LOCAL_UNSUPPORTED_ANNOTATION
from ...errors import RuntimeNotFoundError, ValidationError, did_you_mean
from ...runtimes import Runtime

log = logging.getLogger("kf_jupyter.local")

#: Kept for code that imported it; local runtimes now carry the cluster's kind.
LOCAL_RUNTIME_KIND = "LocalRuntime"

MANIFESTS_ENV = "KF_TRAINER_MANIFESTS"
_INITIALIZER_JOBS = ("dataset-initializer", "model-initializer")
_JOBS_ANNOTATION = LOCAL_UNSUPPORTED_ANNOTATION

#: The default install of Kubeflow Trainer v2.3.0 (base/runtimes): name, framework label,
#: ML policy, numNodes, numProcPerNode, the replicated jobs besides the trainer.
BUILTIN: tuple[tuple[str, str, str, int, int | None, tuple[str, ...]], ...] = (
    ("deepspeed-distributed", "deepspeed", "mpi", 1, 1, ()),
    ("mlx-distributed", "mlx", "mpi", 1, 1, ()),
    ("torch-distributed", "torch", "torch", 1, None, ()),
    ("jax-distributed", "jax", "jax", 1, None, ()),
    ("xgboost-distributed", "xgboost", "xgboost", 1, None, ()),
    ("torchtune-llama3.2-1b", "torchtune", "torch", 1, None, _INITIALIZER_JOBS),
    ("torchtune-llama3.2-3b", "torchtune", "torch", 1, None, _INITIALIZER_JOBS),
    ("torchtune-qwen2.5-1.5b", "torchtune", "torch", 1, None, _INITIALIZER_JOBS),
)

#: The `node` container's resources in the default manifests (torchtune asks for 2 GPUs).
_BUILTIN_RESOURCES: dict[str, dict[str, dict[str, Any]]] = {
    name: {"requests": {}, "limits": {"nvidia.com/gpu": 2}}
    for name, framework, *_ in BUILTIN
    if framework == "torchtune"
}

#: The old local names and the runtime each now means.
ALIASES: dict[str, str] = {
    "local-torch": "torch-distributed",
    "local-mpi": "deepspeed-distributed",
    "local-jax": "jax-distributed",
    "local-xgboost": "xgboost-distributed",
}

_warned: set[str] = set()


def manifests_dir() -> Path:
    """Where the Trainer manifests are looked for (they may be absent)."""
    env = os.environ.get(MANIFESTS_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[3].parent / "shared" / "kubeflow-trainer" / "manifests"


def _kustomize_files(directory: Path, seen: set[Path]) -> Iterator[Path]:
    """The yaml files a kustomization lists (recursively through listed directories)."""
    import yaml

    directory = directory.resolve()
    if directory in seen:
        return
    seen.add(directory)
    kfile = directory / "kustomization.yaml"
    if not kfile.is_file():
        yield from sorted(p for p in directory.glob("*.yaml"))
        return
    with kfile.open(encoding="utf-8") as fh:
        spec = yaml.safe_load(fh) or {}
    for entry in spec.get("resources") or []:
        path = directory / str(entry)
        if path.is_dir():
            yield from _kustomize_files(path, seen)
        elif path.suffix in (".yaml", ".yml") and path.is_file():
            yield path


def _replicated_jobs(obj: Mapping[str, Any]) -> list[str]:
    spec = obj.get("spec") or {}
    jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs") or []
    return [str(j.get("name", "")) for j in jobs]


def _local_copy(rt: Runtime, extra_jobs: tuple[str, ...]) -> Runtime:
    """A cluster runtime as the local backend offers it (no image; initializer jobs noted)."""
    annotations = dict(rt.annotations)
    if extra_jobs:
        annotations[_JOBS_ANNOTATION] = ",".join(extra_jobs)
    return Runtime(
        name=rt.name,
        kind=CLUSTER_RUNTIME_KIND,
        framework=rt.framework,
        ml_policy=rt.ml_policy,
        image=None,
        num_nodes=rt.num_nodes,
        num_proc_per_node=rt.num_proc_per_node,
        deprecated=rt.deprecated,
        labels=dict(rt.labels),
        annotations=annotations,
        trainer_job=rt.trainer_job,
        node_resources=dict(rt.node_resources),
        run_launcher_as_node=rt.run_launcher_as_node,
        launcher_first=rt.launcher_first,
    )


def from_manifests(root: Path) -> tuple[Runtime, ...]:
    """The default install's runtimes parsed from a Trainer `manifests` directory."""
    import yaml

    out: list[Runtime] = []
    for path in _kustomize_files(root / "base" / "runtimes", set()):
        with path.open(encoding="utf-8") as fh:
            docs = [d for d in yaml.safe_load_all(fh) if isinstance(d, dict)]
        for obj in docs:
            if obj.get("kind") != CLUSTER_RUNTIME_KIND:
                continue
            extra = tuple(j for j in _replicated_jobs(obj) if j in _INITIALIZER_JOBS)
            out.append(_local_copy(Runtime.from_manifest(obj), extra))
    return tuple(out)


def builtin() -> tuple[Runtime, ...]:
    """The built-in copy of the default install's runtimes."""
    out = []
    for name, framework, policy, nodes, nproc, extra in BUILTIN:
        rt = Runtime(
            name=name,
            framework=framework,
            ml_policy=policy,
            num_nodes=nodes,
            num_proc_per_node=nproc,
            labels={FRAMEWORK_LABEL: framework},
            trainer_job="launcher" if policy == "mpi" else "node",
            # the default MPI runtimes list node, then launcher, and run the launcher as a node
            run_launcher_as_node=policy == "mpi",
            node_resources=_BUILTIN_RESOURCES.get(name, {}),
        )
        out.append(_local_copy(rt, extra))
    return tuple(out)


@functools.cache
def _load(root: str) -> tuple[tuple[Runtime, ...], str]:
    path = Path(root)
    if (path / "base" / "runtimes").is_dir():
        try:
            found = from_manifests(path)
        except (OSError, ValueError, ImportError) as exc:  # yaml.YAMLError is a ValueError
            log.warning(
                "Trainer manifests at %s unreadable (%s); using built-in runtimes", path, exc
            )
        else:
            if found:
                return found, str(path / "base" / "runtimes")
    return builtin(), "built-in copy (Kubeflow Trainer v2.3.0)"


def builtin_local_runtimes() -> tuple[Runtime, ...]:
    """The default install's runtimes the local backend offers, in the manifests' order."""
    return _load(str(manifests_dir()))[0]


def plugin_local_copy(rt: Runtime, plugin: str) -> Runtime:
    """A plugin's runtime as the local backend offers it, marked with the plugin's name."""
    return dataclasses.replace(_local_copy(rt, ()), plugin=plugin)


def local_runtimes() -> tuple[Runtime, ...]:
    """The runtimes the local backend offers: the default install's, then the plugins'."""
    from ...plugins import registry

    return builtin_local_runtimes() + tuple(registry().runtimes)


def runtimes_source() -> str:
    """Where `local_runtimes()` came from (a directory, or the built-in copy)."""
    return _load(str(manifests_dir()))[1]


def _caller_stacklevel() -> int:
    """The warnings stacklevel of the first frame outside kf_jupyter (the user's code)."""
    package = str(Path(__file__).resolve().parents[2])
    frame = sys._getframe(1)
    level = 1
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(package):
        frame = frame.f_back
        level += 1
    return level


def canonical_name(name: str) -> str:
    """The runtime an old `local-*` name now means (one FutureWarning per name); else `name`."""
    new = ALIASES.get(name)
    if new is None:
        return name
    if name not in _warned:
        _warned.add(name)
        warnings.warn(
            f"The local runtime name {name!r} is deprecated and will be removed in the next "
            f"release; use {new!r}, the name the runtime has on a cluster, so the same cell runs "
            "on both backends.",
            FutureWarning,
            stacklevel=_caller_stacklevel(),
        )
    return new


def find_runtime(name: str) -> Runtime:
    """One local runtime by name or old alias (RuntimeNotFoundError lists the names)."""
    if not isinstance(name, str):
        raise RuntimeNotFoundError(f"A runtime name is a string, got {type(name).__name__}.")
    wanted = canonical_name(name)
    runtimes = local_runtimes()
    for rt in runtimes:
        if rt.name == wanted:
            return rt
    raise RuntimeNotFoundError(
        f"No local runtime named {name!r}.{did_you_mean(wanted, (r.name for r in runtimes))} "
        "Local runtimes (those of a default Kubeflow Trainer "
        f"install): {', '.join(r.name for r in runtimes)}. Check the name with "
        "client.list_runtimes() (or %kf_runtimes)."
    )


def unsupported_reason(rt: Runtime) -> str | None:
    """Why the local backend cannot run this runtime, or None when it can."""
    jobs = str(rt.annotations.get(_JOBS_ANNOTATION, ""))
    if rt.framework == "torchtune":
        return (
            f"Runtime {rt.name!r} is a torchtune fine-tuning runtime: on a cluster it downloads a "
            "pre-trained model and a dataset with its initializers and runs the torchtune "
            "trainer image (a BuiltinTrainer); the local backend runs your function with the "
            "kernel's Python and has no model to fine-tune. Run it on a cluster "
            "(--backend kubernetes / KubernetesBackendConfig), or train your own function "
            "locally on 'torch-distributed'."
        )
    if jobs:
        return (
            f"Runtime {rt.name!r} needs its {jobs.replace(',', ' and ')} steps, which the local "
            "backend does not run. Run it on a cluster, or use 'torch-distributed' locally."
        )
    return None


def check_emulable(rt: Runtime) -> None:
    """Raise ValidationError (one paragraph, what to do) for a runtime that cannot run locally."""
    reason = unsupported_reason(rt)
    if reason:
        raise ValidationError(reason)
