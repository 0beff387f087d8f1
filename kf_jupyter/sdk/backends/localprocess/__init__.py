"""`kubeflow.trainer.backends.localprocess`: kf-jupyter's local backend behind the SDK's names."""
