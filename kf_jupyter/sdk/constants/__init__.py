"""`kubeflow.trainer.constants`: the SDK's constants are in `.constants`, as in the SDK."""
