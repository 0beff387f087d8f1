"""Optimizer types (`kubeflow.optimizer.types`)."""
