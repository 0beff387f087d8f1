"""API names, labels and annotations shared by every layer (no I/O)."""

from __future__ import annotations

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
TRAINJOB_KIND = "TrainJob"
TRAINJOB_PLURAL = "trainjobs"
CLUSTER_RUNTIME_KIND = "ClusterTrainingRuntime"
CLUSTER_RUNTIME_PLURAL = "clustertrainingruntimes"
RUNTIME_KIND = "TrainingRuntime"
RUNTIME_PLURAL = "trainingruntimes"

FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
SUPPORT_LABEL = "trainer.kubeflow.org/support"
DEPRECATED = "deprecated"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
DEFAULT_RUNTIME_ANNOTATION = "kf-jupyter.io/default"
# On a local runtime the backend cannot run: the steps it would need (initializers).
LOCAL_UNSUPPORTED_ANNOTATION = "kf-jupyter.io/local-unsupported"

# Labels and annotations kf-jupyter puts on what it creates.
CREATED_BY_LABEL = "kf-jupyter.io/created-by"
CREATED_BY_VALUE = "kf-jupyter"
FRAMEWORK_ANNOTATION = "kf-jupyter.io/framework"
TRAINER_ANNOTATION = "kf-jupyter.io/trainer"
# Set by suspend_job, removed by resume_job: a suspension the user asked for (not Kueue's).
SUSPENDED_BY_USER_ANNOTATION = "kf-jupyter.io/suspended-by-user"

# Kueue (facts doc "Lifecycle and queues").
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MULTIKUEUE_MANAGER = "kueue.x-k8s.io/multikueue"
TRAINJOB_MANAGER = "trainer.kubeflow.org/trainjob-controller"

# The manager of our runtime patches (one entry per TrainJob).
PATCH_MANAGER = "kf-jupyter.io/kf-jupyter"

# Pod selection (facts doc).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
STEP_NAMES = ("dataset-initializer", "model-initializer", "launcher", "node")

TRAINER_CONTAINER = "node"
NODE_JOB = "node"
LAUNCHER_JOB = "launcher"

DEFAULT_MASTER_PORT = 29500

# Lines the runner prints.
REPORT_PREFIX = "##kf-jupyter:report "
RESULT_PREFIX = "##kf-jupyter:result "
ERROR_PREFIX = "##kf-jupyter:error "
#: Every line the runner prints for kf-jupyter itself starts with this (hidden in the views).
PROTOCOL_PREFIX = "##kf-jupyter:"

#: Sweeps (issue 25): every trial job names its sweep and its index in labels, and carries its
#: parameter values in annotations (`kf-jupyter.io/sweep-param-<name>`), so any process can
#: find a sweep's trials from the jobs alone.
SWEEP_LABEL = "kf-jupyter.io/sweep"
SWEEP_TRIAL_LABEL = "kf-jupyter.io/sweep-trial"
SWEEP_PARAM_ANNOTATION_PREFIX = "kf-jupyter.io/sweep-param-"
