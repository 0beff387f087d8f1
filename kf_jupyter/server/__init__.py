"""Jupyter server extension: the REST API under `<base_url>/kf-jupyter/api/` used by the lab UI.

Enabled automatically by `jupyter-config/jupyter_server_config.d/kf_jupyter.json`
(`kf_jupyter._jupyter_server_extension_points()` points here). Settings are traitlets of
`KFJupyterServer` (for example `c.KFJupyterServer.state_dir = "/data/kf-jupyter"`); see
docs/server.md for the routes.
"""

from __future__ import annotations

from typing import Any

from .state import KFJupyterServer

__all__ = ["KFJupyterServer"]

SETTINGS_KEY = "kf_jupyter"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Where Jupyter finds this extension (same answer as the package's top-level hook)."""
    return [{"module": "kf_jupyter.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the kf-jupyter REST handlers on a running Jupyter server."""
    from .handlers import route_table

    state = KFJupyterServer(parent=serverapp, log=serverapp.log)
    web_app = serverapp.web_app
    web_app.settings[SETTINGS_KEY] = state
    base_url = web_app.settings.get("base_url", "/")
    web_app.add_handlers(".*$", route_table(base_url))
    serverapp.log.info(
        "kf-jupyter server extension loaded: %skf-jupyter/api/ (local job store %s)",
        base_url,
        state.local_state_dir(),
    )


def _unload_jupyter_server_extension(serverapp: Any) -> None:
    """Stop log streams and worker threads when the server stops."""
    state = serverapp.web_app.settings.pop(SETTINGS_KEY, None)
    if state is not None:
        state.shutdown()
