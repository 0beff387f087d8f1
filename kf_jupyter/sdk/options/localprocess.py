"""Options of the local-process backend (`kubeflow.trainer.options.localprocess`).

The Kubeflow SDK 0.5.0 defines none here yet. Every option of `kf_jupyter.sdk.options` works on
kf-jupyter's local backend except `RuntimePatch` (pod placement; skipped with a warning).
"""
