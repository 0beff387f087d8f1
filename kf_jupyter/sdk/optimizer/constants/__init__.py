"""Constants of the optimizer (`kubeflow.optimizer.constants`)."""
