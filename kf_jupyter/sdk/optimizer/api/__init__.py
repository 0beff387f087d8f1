"""The Kubeflow SDK optimizer client (`kubeflow.optimizer.api`)."""
