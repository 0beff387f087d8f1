"""Constants of the Kubeflow SDK 0.5.0 optimizer, same names and values."""

GROUP = "kubeflow.org"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"

#: The Kind name for the (Katib) Experiment.
EXPERIMENT_KIND = "Experiment"
#: The plural for the Experiment.
EXPERIMENT_PLURAL = "experiments"
#: The succeeded condition for the Experiment.
EXPERIMENT_SUCCEEDED = "Succeeded"
#: Label to identify Experiment's resources.
EXPERIMENT_LABEL = "katib.kubeflow.org/experiment"
#: The plural for the Trials.
TRIAL_PLURAL = "trials"
#: The Kind name for the Trials.
TRIAL_KIND = "Trial"
#: The Kind name for the OptimizationJob.
OPTIMIZATION_JOB_KIND = "OptimizationJob"
#: The status of an OptimizationJob once created.
OPTIMIZATION_JOB_CREATED = "Created"
#: At least one trial is running.
OPTIMIZATION_JOB_RUNNING = "Running"
#: The OptimizationJob has finished.
OPTIMIZATION_JOB_COMPLETE = "Complete"
#: The OptimizationJob has failed (locally also: cancelled, reason `Cancelled`).
OPTIMIZATION_JOB_FAILED = "Failed"
#: The name of the Katib metrics collector sidecar container.
METRICS_COLLECTOR_CONTAINER = "metrics-logger-and-collector"
#: Katib search space parameter types.
DOUBLE_PARAMETER = "double"
CATEGORICAL_PARAMETERS = "categorical"
