"""Plugins whose magics take names IPython already has (`%time`, `%%writefile`, `%run`, ...)."""

from dataclasses import dataclass
from typing import ClassVar

from kf_jupyter.plugins import Plugin
from kf_jupyter.trainers import BaseTrainer


@dataclass(kw_only=True)
class Shadow(BaseTrainer):
    """A trainer registered under one of IPython's magic names."""

    supported_frameworks: ClassVar[tuple[str, ...]] = ("plain",)


time_plugin = Plugin(trainers={"time": Shadow})
writefile_plugin = Plugin(trainers={"writefile": Shadow})
run_plugin = Plugin(trainers={"run": Shadow})
load_ext_plugin = Plugin(trainers={"load_ext": Shadow})
ls_plugin = Plugin(trainers={"ls": Shadow})
