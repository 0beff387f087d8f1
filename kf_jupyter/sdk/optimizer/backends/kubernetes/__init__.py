"""The optimizer on a Kubernetes cluster (`kubeflow.optimizer.backends.kubernetes`)."""
