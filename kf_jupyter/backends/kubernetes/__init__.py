"""Kubernetes backend (Kubeflow Trainer TrainJobs); `backend` imports the kubernetes client."""
