"""`kubeflow.trainer.backends.container.adapters`: container engines (none used by kf-jupyter)."""
