"""The plain ML policy: only the node count and `trainer.env`; one process per node."""

from __future__ import annotations

from .base import Policy


class PlainPolicy(Policy):
    """Any runtime without a known ML policy."""

    name = "plain"
