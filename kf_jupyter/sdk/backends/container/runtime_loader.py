"""The SDK's runtime loader for the container backend (`...container.runtime_loader`).

The SDK reads runtime definitions from GitHub, URLs or files; kf-jupyter's local backend has the
runtimes of a default Kubeflow Trainer install built in, and nothing is downloaded. The sources
are accepted and not read; both functions answer from the local backend's runtimes.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from ...types import types as base_types

TRAINING_RUNTIMES_DIR = Path(__file__).resolve().parent / "training_runtimes"
CACHE_DIR = Path.home() / ".kubeflow" / "trainer" / "cache"
CACHE_DURATION = timedelta(days=1)
GITHUB_RUNTIMES_BASE_URL = (
    "https://raw.githubusercontent.com/kubeflow/trainer/master/manifests/base/runtimes"
)
GITHUB_RUNTIMES_TREE_URL = "https://github.com/kubeflow/trainer/tree/master/manifests/base/runtimes"


def list_training_runtimes_from_sources(sources: list[str]) -> list[base_types.Runtime]:
    """The training runtimes a local job can name (`sources` are not read, see above)."""
    from ....backends.local.config import LocalBackendConfig
    from ...client import KFBackend

    return KFBackend(LocalBackendConfig()).list_runtimes()


def get_training_runtime_from_sources(name: str, sources: list[str]) -> base_types.Runtime:
    """One runtime by name (`sources` are not read, see above)."""
    from ....backends.local.config import LocalBackendConfig
    from ...client import KFBackend

    return KFBackend(LocalBackendConfig()).get_runtime(name)
