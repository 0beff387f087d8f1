"""`kubeflow.trainer.api`: the SDK's `TrainerClient` lives in `.trainer_client`, as in the SDK."""
