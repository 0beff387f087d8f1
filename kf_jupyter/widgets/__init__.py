"""Widgets: `JobMonitor` (kf_jupyter.widgets.monitor), `RuntimeConfigForm` and
`PodOverridesForm` (kf_jupyter.widgets.forms). ipywidgets loads on first use."""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "JobMonitor": "kf_jupyter.widgets.monitor",
    "RuntimeConfigForm": "kf_jupyter.widgets.forms",
    "PodOverridesForm": "kf_jupyter.widgets.forms",
    "LogState": "kf_jupyter.widgets.state",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kf_jupyter.widgets' has no attribute {name!r}")


__all__ = ["JobMonitor", "LogState", "PodOverridesForm", "RuntimeConfigForm"]
