"""IPython magics: `%%torchtrain`, `%%mpitrain`, `%%jaxtrain`, `%%xgboosttrain` and `%kf_*`.

`%load_ext kf_jupyter` calls `load_ipython_extension`; see docs/notebook.md.
"""

from __future__ import annotations

from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """Register `KubeflowMagics` (configurable: `%config KubeflowMagics.backend = ...`)."""
    from .compare import CompareMagics
    from .core import KubeflowMagics
    from .sweep import SweepMagics

    magics = KubeflowMagics(shell=ipython)
    ipython.register_magics(magics)
    ipython.register_magics(CompareMagics(shell=ipython, core=magics))
    ipython.register_magics(SweepMagics(shell=ipython, core=magics))
    magics.register_plugin_magics()
    magics.prestart()


def unload_ipython_extension(ipython: Any) -> None:
    """Nothing to undo beyond what IPython does; kept for `%unload_ext`."""


__all__ = ["load_ipython_extension"]
