"""Optimizer backends (`kubeflow.optimizer.backends`): the base class, local, Kubernetes."""
