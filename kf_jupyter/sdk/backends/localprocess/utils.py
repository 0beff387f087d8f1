"""The SDK's local-process helpers (`kubeflow.trainer.backends.localprocess.utils`).

Package merging, the local runtime trainer and the pip / clean-up snippets mean what they mean
in the SDK. The two that build the SDK's venv job script (`get_command_using_train_func`,
`get_local_train_job_script`) raise a clear error: kf-jupyter's local backend runs functions
its own way (`TrainerClient().train(...)` does it).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from string import Template
from typing import Any

from ...types import types
from . import constants as local_exec_constants
from .types import LocalRuntimeTrainer


def _name(requirement: str) -> str:
    m = local_exec_constants.PYTHON_PACKAGE_NAME_RE.match(requirement)
    if not m:
        raise ValueError(f"Could not parse a package name from: {requirement!r}")
    return re.sub(r"[-_.]+", "-", m.group(1)).lower()


def get_install_packages(
    runtime_packages: list[str], trainer_packages: list[str] | None = None
) -> list[str]:
    """Runtime packages, each replaced by the trainer's entry of the same name, then the
    trainer's packages (a name twice among the trainer's is an error)."""
    if not trainer_packages:
        return runtime_packages
    names = [_name(p) for p in trainer_packages]
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup:
        raise ValueError(f"Duplicate dependency in trainer_packages: '{dup}'")
    last = {_name(p): i for i, p in enumerate(runtime_packages)}
    kept = [
        p for i, p in enumerate(runtime_packages) if _name(p) not in names and last[_name(p)] == i
    ]
    return kept + list(trainer_packages)


def get_local_runtime_trainer(
    runtime_name: str, venv_dir: str, framework: str
) -> LocalRuntimeTrainer:
    """The SDK's local runtime trainer: its packages, and the entrypoint in `venv_dir`."""
    rt = next((r for r in local_exec_constants.local_runtimes if r.name == runtime_name), None)
    if rt is None:
        raise ValueError(f"Runtime {runtime_name} not found")
    trainer = LocalRuntimeTrainer(
        trainer_type=types.TrainerType.CUSTOM_TRAINER,
        framework=framework,
        packages=list(getattr(rt.trainer, "packages", [])),
        image=local_exec_constants.LOCAL_RUNTIME_IMAGE,
    )
    binary = (
        local_exec_constants.TORCH_COMMAND
        if framework == local_exec_constants.TORCH_FRAMEWORK_TYPE
        else local_exec_constants.DEFAULT_COMMAND
    )
    trainer.set_command((os.path.join(str(Path(venv_dir) / "bin"), binary),))
    return trainer


def get_dependencies_command(
    runtime_packages: list[str],
    pip_index_urls: list[str],
    trainer_packages: list[str],
    quiet: bool = True,
) -> str:
    """The pip command installing the merged packages from the index URLs (values quoted)."""
    packages = get_install_packages(runtime_packages, trainer_packages)
    index = []
    if pip_index_urls:
        index = ["--index-url", pip_index_urls[0]]
        for url in pip_index_urls[1:]:
            index += ["--extra-index-url", url]
    return Template(local_exec_constants.DEPENDENCIES_SCRIPT).substitute(
        QUIET="--quiet" if quiet else "",
        PIP_INDEX=" ".join(shlex.quote(a) for a in index),
        PACKAGE_STR=" ".join(shlex.quote(p) for p in packages),
    )


def _not_here(what: str) -> ValueError:
    return ValueError(
        f"{what} builds the Kubeflow SDK's per-job venv script, which kf-jupyter's local backend "
        "does not use: it runs your function as local processes with the kernel's Python and a "
        "cached environment for extra packages. Submit the function with "
        "TrainerClient().train(trainer=CustomTrainer(func=...)) instead; client.train(..., "
        "options=[...]) and kf_jupyter's dry run show what it runs."
    )


def get_command_using_train_func(
    runtime: types.Runtime,
    train_func: Callable[..., Any],
    train_func_parameters: dict[str, Any] | None,
    venv_dir: str,
    train_job_name: str,
) -> str:
    """The SDK's venv entrypoint for a function (not used by kf-jupyter: raises, see above)."""
    raise _not_here("get_command_using_train_func")


def get_cleanup_venv_script(venv_dir: str, cleanup_venv: bool = True) -> str:
    """The snippet that removes the job's venv ("\\n" when `cleanup_venv` is False)."""
    if not cleanup_venv:
        return "\n"
    return Template(local_exec_constants.LOCAL_EXEC_JOB_CLEANUP_SCRIPT).substitute(
        PYENV_LOCATION=venv_dir
    )


def get_local_train_job_script(
    train_job_name: str,
    venv_dir: str,
    trainer: types.CustomTrainer,
    runtime: types.Runtime,
    cleanup_venv: bool = True,
) -> tuple[Any, ...]:
    """The SDK's whole venv job script (not used by kf-jupyter: raises, see above)."""
    raise _not_here("get_local_train_job_script")


__all__ = [
    "LocalRuntimeTrainer",
    "get_cleanup_venv_script",
    "get_command_using_train_func",
    "get_dependencies_command",
    "get_install_packages",
    "get_local_runtime_trainer",
    "get_local_train_job_script",
]
