"""The SDK's local-process constants (`kubeflow.trainer.backends.localprocess.constants`).

The SDK's local backend builds a fresh venv per job from these shell templates; kf-jupyter's
does not (a cached layered environment, see docs/local-backend.md), so the templates here are
kf-jupyter's own equivalents, with the same `$PLACEHOLDERS`, for code that fills them in.
"""

from __future__ import annotations

import re

from ...types import types as base_types
from ...types.types import DEFAULT_TRAINING_RUNTIME, UNKNOWN
from .types import LocalRuntimeTrainer

TORCH_FRAMEWORK_TYPE = "torch"
LOCAL_RUNTIME_IMAGE = "local"

#: The runtime the SDK's local backend offers (kf-jupyter's local backend offers every runtime
#: of a default install; `client.list_runtimes()`).
local_runtimes = [
    base_types.Runtime(
        name=DEFAULT_TRAINING_RUNTIME,
        trainer=LocalRuntimeTrainer(
            trainer_type=base_types.TrainerType.CUSTOM_TRAINER,
            framework=TORCH_FRAMEWORK_TYPE,
            num_nodes=1,
            device_count=UNKNOWN,
            device=UNKNOWN,
            packages=["torch"],
            image=LOCAL_RUNTIME_IMAGE,
        ),
        kind=base_types.RuntimeKind.TRAINING_RUNTIME,
    )
]

#: pip-install the packages ($QUIET, $PIP_INDEX, $PACKAGE_STR).
DEPENDENCIES_SCRIPT = (
    "\nPIP_DISABLE_PIP_VERSION_CHECK=1 pip install $QUIET --no-warn-script-location "
    "$PIP_INDEX $PACKAGE_STR\n"
)
#: Run the function file ($ENTRYPOINT, $FUNC_FILE, $PARAMETERS).
LOCAL_EXEC_ENTRYPOINT = '\n$ENTRYPOINT "$FUNC_FILE" "$PARAMETERS"\n'
TORCH_COMMAND = "torchrun"
DEFAULT_COMMAND = "python"
#: Remove the job's venv ($PYENV_LOCATION).
LOCAL_EXEC_JOB_CLEANUP_SCRIPT = '\nrm -rf "$PYENV_LOCATION"\n'
#: The whole job: make and enter a venv, install, run, clean up.
LOCAL_EXEC_JOB_TEMPLATE = (
    "\nset -e\n$OS_PYTHON_BIN -m venv --without-pip $PYENV_LOCATION\n"
    'echo "Operating inside $PYENV_LOCATION"\nsource $PYENV_LOCATION/bin/activate\n'
    "$PYENV_LOCATION/bin/python -m ensurepip --upgrade --default-pip\n"
    "$DEPENDENCIES_SCRIPT\n$ENTRYPOINT\n$CLEANUP_SCRIPT\n"
)
LOCAL_EXEC_FILENAME = "train_{}.py"
PYTHON_PACKAGE_NAME_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
