"""Kubernetes backend constants (`kubeflow.trainer.backends.kubernetes.constants`; none yet)."""
