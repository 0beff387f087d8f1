"""kf-ring: a toy framework plugin for kf-jupyter (see kf_ring.plugin)."""

from .plugin import RingPolicy, RingTag, RingTrainer, plugin

__all__ = ["RingPolicy", "RingTag", "RingTrainer", "plugin"]
