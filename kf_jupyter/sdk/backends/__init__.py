"""`kubeflow.trainer.backends`: the SDK's backends, on kf-jupyter's (see `.base`)."""
