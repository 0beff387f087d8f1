"""Where JupyterLab finds the prebuilt front end of kf-jupyter.

`kf_jupyter/__init__.py` re-exports `_jupyter_labextension_paths` so that
`jupyter labextension develop .` and the JupyterLab extension manager find it.
No Jupyter imports here.
"""

from __future__ import annotations

LABEXTENSION_NAME = "kf-jupyter-labextension"


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    # `src` is relative to the kf_jupyter package; `dest` is the folder name under
    # share/jupyter/labextensions (the "name" of labextension/package.json).
    return [{"src": "labextension", "dest": LABEXTENSION_NAME}]
