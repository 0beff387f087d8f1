"""The kf-jupyter magics in a real IPython shell, as a notebook's kernel has them."""

from __future__ import annotations

from typing import Any


def line_magic_output(capsys: Any, name: str, line: str = "") -> str:
    """What `%name line` prints in the IPython shell with KubeflowMagics freshly registered
    (reading the job store KF_JUPYTER_STATE_DIR names at that moment); `capsys` is the test's
    fixture, whatever was printed before is dropped."""
    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.magics.core import KubeflowMagics

    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)
    sh.register_magics(KubeflowMagics(shell=sh))
    capsys.readouterr()
    sh.run_line_magic(name, line)
    return capsys.readouterr().out
