"""Plugins that take names kf-jupyter already has."""

from dataclasses import dataclass
from typing import ClassVar

from kf_jupyter.plugins import Plugin
from kf_jupyter.policies import Policy
from kf_jupyter.trainers import BaseTrainer


@dataclass(kw_only=True)
class Mine(BaseTrainer):
    """A trainer registered under %%torchtrain."""

    supported_frameworks: ClassVar[tuple[str, ...]] = ("mine",)


class Torch(Policy):
    """A second policy named torch."""

    name = "torch"


def magic_plugin() -> Plugin:
    """Returned by a function, as a plugin may be."""
    return Plugin(trainers={"torchtrain": Mine})


policy_plugin = Plugin(policies=[Torch()])
