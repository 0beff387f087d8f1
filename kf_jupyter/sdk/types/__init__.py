"""`kubeflow.trainer.types`, for kf-jupyter: the SDK's types live in `.types` (as in the SDK)."""

from .types import *  # noqa: F403
from .types import (  # noqa: F401  (used by kf_jupyter.sdk itself)
    DEFAULT_TRAINING_RUNTIME,
    INITIALIZER_DEFAULT_IGNORE_PATTERNS,
    UNKNOWN,
    WORKSPACE_PATH,
    default_pip_index_urls,
)
from .types import __all__ as __all__
