"""The Kubeflow SDK 0.5.0's constants (`kubeflow.trainer.constants.constants`), same values.

API names, labels, paths and the trainer entrypoints the SDK writes into TrainJobs. The
environment variables the SDK reads (`DEFAULT_PIP_INDEX_URLS`, `DEFAULT_MPI_USER_HOME`,
`DEFAULT_TRAINING_RUNTIME`) are read here too, once, at import, as the SDK does.
"""

from __future__ import annotations

import os

from ...constants import API_VERSION as API_VERSION
from ...constants import GROUP as GROUP
from ...constants import TRAINJOB_KIND as TRAINJOB_KIND
from ..types.types import DATASET_PATH as DATASET_PATH
from ..types.types import INITIALIZER_DEFAULT_IGNORE_PATTERNS as INITIALIZER_DEFAULT_IGNORE_PATTERNS
from ..types.types import MODEL_PATH as MODEL_PATH
from ..types.types import WORKSPACE_PATH as WORKSPACE_PATH

VERSION = API_VERSION.split("/", 1)[1]
CLUSTER_TRAINING_RUNTIME_PLURAL = "clustertrainingruntimes"
TRAINING_RUNTIME_PLURAL = "trainingruntimes"
TRAINJOB_PLURAL = "trainjobs"

# The statuses of a TrainJob, and the pod phases the SDK reads.
TRAINJOB_CREATED = "Created"
TRAINJOB_RUNNING = "Running"
TRAINJOB_COMPLETE = "Complete"
TRAINJOB_FAILED = "Failed"
POD_SUCCEEDED = "Succeeded"
POD_PENDING = "Pending"

TRAINJOB_ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
RUNTIME_FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
DATASET_INITIALIZER = "dataset-initializer"
MODEL_INITIALIZER = "model-initializer"
INITIALIZER_ENV_ACCESS_TOKEN = "ACCESS_TOKEN"
LAUNCHER = "launcher"
NODE = "node"

# Resource names of devices.
CPU_LABEL = "cpu"
GPU_LABEL = "nvidia.com/gpu"
GPU_MIG_PREFIX = "nvidia.com/mig-"
TPU_LABEL = "google.com/tpu"
NPU_LABEL = "huawei.com/Ascend910"

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_RJOB_NAME_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
#: The pods of a TrainJob (`.format(trainjob_name=...)`).
POD_LABEL_SELECTOR = (
    f"{JOBSET_NAME_LABEL}={{trainjob_name}},{JOBSET_RJOB_NAME_LABEL} in "
    f"({DATASET_INITIALIZER}, {MODEL_INITIALIZER}, {LAUNCHER}, {NODE})"
)

#: The SDK's default package index; kf-jupyter's CustomTrainer leaves an unset index to pip.
DEFAULT_PIP_INDEX_URLS = os.getenv("DEFAULT_PIP_INDEX_URLS", "https://pypi.org/simple").split(",")

#: The shape of the SDK's own function command: the function's code written to a file by a
#: heredoc, then run by the runtime's entrypoint (`__ENTRYPOINT__`). kf-jupyter builds its
#: own, quoted command instead (see docs/decisions.md); this is the SDK's, for code that reads it.
EXEC_FUNC_SCRIPT = (
    "\nread -r -d '' SCRIPT << EOM\n\n{func_code}\nEOM\n"
    'printf "%s" "$SCRIPT" > "{func_file}"\n__ENTRYPOINT__ "{func_file}"'
)
DEFAULT_COMMAND = ("bash", "-c", EXEC_FUNC_SCRIPT.replace("__ENTRYPOINT__", "python"))
DEFAULT_MPI_USER_HOME = os.getenv("DEFAULT_MPI_USER_HOME", "/home/mpiuser")
MPI_COMMAND = ("mpirun", "--hostfile", "/etc/mpi/hostfile", *DEFAULT_COMMAND)
DEFAULT_TRAINING_RUNTIME = os.getenv("DEFAULT_TRAINING_RUNTIME", "torch-distributed")
TORCH_COMMAND = ("bash", "-c", EXEC_FUNC_SCRIPT.replace("__ENTRYPOINT__", "torchrun"))
TORCH_ENV_NUM_PROC_PER_NODE = "PET_NPROC_PER_NODE"
TORCH_TUNE_COMMAND = ("tune", "run")
TORCH_TUNE_INSTRUCT_DATASET = "torchtune.datasets.instruct_dataset"
DEFAULT_FRAMEWORK_IMAGES = {"torch": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"}
JOB_NAME_UUID_LENGTH = 11
