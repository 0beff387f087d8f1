"""`kubeflow.trainer.backends.container`: the SDK's Docker/Podman backend, as local processes."""
