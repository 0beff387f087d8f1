"""The optimizer on kf-jupyter's local backend: each trial a local job, started warm.

A sweep is run by a detached driver process (`kf_jupyter.sweeps.local`), so it goes on when
the kernel restarts, and any process using the same state directory lists, follows, cancels
and deletes it. docs/sweeps.md is the guide.
"""

from __future__ import annotations

from .....backends.local.config import LocalBackendConfig
from .....sweeps import local as sweeps_local
from ....client import KFBackend
from ..sweeps import SweepsBackend


class LocalProcessBackend(SweepsBackend):
    """The optimizer's `RuntimeBackend` on kf-jupyter's local backend.

    `config`: kf-jupyter's `LocalBackendConfig` (state directory, working directory, warm);
    the SDK's `LocalProcessBackendConfig` or None mean the defaults.
    """

    def __init__(self, config: LocalBackendConfig | None = None) -> None:
        self.config = config if isinstance(config, LocalBackendConfig) else LocalBackendConfig()
        self.trainer = KFBackend(self.config)
        self.sweeps = sweeps_local.LocalSweeps(self.config)
