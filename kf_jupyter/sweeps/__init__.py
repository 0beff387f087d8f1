"""Hyperparameter sweeps (issue 25): a search space run as trial jobs on any backend.

- `space`: parameters (uniform, log-uniform, choice) and the trials of a grid or random search;
- `metrics`: a trial's metrics from `name=value` lines, report lines and trainerStatus;
- `engine`: `SweepEngine`, the backend-neutral loop (submit, follow, record, best trial);
- `local`: the local backend's sweeps (a detached driver process, a record on disk).

Users reach it through `kf_jupyter.sdk.optimizer.OptimizerClient` (the Kubeflow SDK's API);
docs/sweeps.md is the guide.
"""
