"""The SDK's container backend helpers (`kubeflow.trainer.backends.container.utils`).

The pure ones (status mapping, environment, pip command, initializer env) mean what they mean
in the SDK; those that need a container engine (`maybe_pull_image`, `get_container_status`,
`aggregate_container_statuses`) raise the one-paragraph error of kf-jupyter's container backend.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...constants import constants
from ...types import types
from ._refuse import no_containers

UNKNOWN = types.UNKNOWN


def create_workdir(job_name: str) -> str:
    """Make and return `~/.kubeflow/trainer/containers/<job_name>` (the SDK's per-job folder)."""
    if not job_name or "/" in job_name or job_name in (".", ".."):
        raise ValueError(f"Invalid job name for a working directory: {job_name!r}")
    path = Path.home() / ".kubeflow" / "trainer" / "containers" / job_name
    path.mkdir(parents=True, exist_ok=True)
    return str(path.resolve())


def get_training_script_code(trainer: types.CustomTrainer) -> str:
    """The function's source followed by its call with `func_args` (as Python, not str(dict))."""
    from ....program import function_source

    fs = function_source(trainer.func)
    args = ", ".join(f"{k}={v!r}" for k, v in (trainer.func_args or {}).items())
    return f"{fs.source}\n{fs.name}({args})\n"


def build_environment(trainer: types.CustomTrainer) -> dict[str, str]:
    """The trainer's environment variables."""
    return dict(trainer.env or {})


def build_pip_install_cmd(trainer: types.CustomTrainer) -> str:
    """A shell snippet that installs `packages_to_install` ("" when there are none)."""
    pkgs = trainer.packages_to_install or []
    if not pkgs:
        return ""
    urls = trainer.pip_index_urls or list(constants.DEFAULT_PIP_INDEX_URLS)
    from ..kubernetes.utils import get_script_for_python_packages

    return get_script_for_python_packages(pkgs, urls, install_log_file="/tmp/pip_install.log")


def container_status_to_trainjob_status(status: str, exit_code: int) -> str:
    """running -> Running, created -> Created, exited -> Complete (code 0) or Failed."""
    if status == "running":
        return constants.TRAINJOB_RUNNING
    if status == "created":
        return constants.TRAINJOB_CREATED
    if status == "exited":
        return constants.TRAINJOB_COMPLETE if exit_code == 0 else constants.TRAINJOB_FAILED
    return UNKNOWN


def aggregate_status_from_containers(container_statuses: list[str]) -> str:
    """One job status from its containers': any Failed, else any Running, else all Complete."""
    if constants.TRAINJOB_FAILED in container_statuses:
        return constants.TRAINJOB_FAILED
    if constants.TRAINJOB_RUNNING in container_statuses:
        return constants.TRAINJOB_RUNNING
    known = [s for s in container_statuses if s != UNKNOWN]
    if known and all(s == constants.TRAINJOB_COMPLETE for s in known):
        return constants.TRAINJOB_COMPLETE
    if constants.TRAINJOB_CREATED in container_statuses:
        return constants.TRAINJOB_CREATED
    return UNKNOWN


def maybe_pull_image(adapter: Any, image: str, pull_policy: str) -> None:
    """Pull an image per the policy (needs a container engine: refused here)."""
    raise no_containers("maybe_pull_image")


def get_container_status(adapter: Any, container_id: str) -> str:
    """A container's job status (needs a container engine: refused here)."""
    raise no_containers("get_container_status")


def aggregate_container_statuses(adapter: Any, containers: list[dict]) -> str:
    """A job's status from its containers (needs a container engine: refused here)."""
    raise no_containers("aggregate_container_statuses")


@dataclass
class ContainerInitializer:
    """An initializer container: name, image, command, environment."""

    name: str
    image: str
    command: list[str]
    env: dict[str, str]


def get_optional_initializer_envs(
    initializer: types.BaseInitializer, required_fields: set[str]
) -> dict[str, str]:
    """`{"ACCESS_TOKEN": ..., ...}` for the set fields not in `required_fields`."""
    env = {}
    for f in dataclasses.fields(initializer):
        value = getattr(initializer, f.name)
        if f.name in required_fields or value is None:
            continue
        env[f.name.upper()] = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return env


def _initializer(kind: str, part: Any, config: Any, image_attr: str) -> ContainerInitializer:
    env = {"STORAGE_URI": part.storage_uri}
    env.update(get_optional_initializer_envs(part, {"storage_uri"}))
    image = getattr(config, image_attr, None) or f"ghcr.io/kubeflow/trainer/{kind}:latest"
    path = constants.DATASET_PATH if kind.startswith("dataset") else constants.MODEL_PATH
    env.setdefault("OUTPUT_PATH", path)
    return ContainerInitializer(name=kind, image=image, command=[], env=env)


def get_dataset_initializer(dataset: types.BaseInitializer, config: Any) -> ContainerInitializer:
    """The dataset initializer container for `dataset` (not run by kf-jupyter locally)."""
    return _initializer("dataset-initializer", dataset, config, "dataset_initializer_image")


def get_model_initializer(model: types.BaseInitializer, config: Any) -> ContainerInitializer:
    """The model initializer container for `model` (not run by kf-jupyter locally)."""
    return _initializer("model-initializer", model, config, "model_initializer_image")


__all__ = [
    "UNKNOWN",
    "ContainerInitializer",
    "aggregate_container_statuses",
    "aggregate_status_from_containers",
    "build_environment",
    "build_pip_install_cmd",
    "container_status_to_trainjob_status",
    "create_workdir",
    "get_container_status",
    "get_dataset_initializer",
    "get_model_initializer",
    "get_optional_initializer_envs",
    "get_training_script_code",
    "maybe_pull_image",
]
