"""`kubeflow.trainer.backends.kubernetes`: the SDK's cluster backend on kf-jupyter's."""
