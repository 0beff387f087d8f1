"""JobsTable: `%kf_jobs` actions in a notebook — pick a job, show its logs or delete it.

The table itself is displayed as static HTML beside it, so a saved notebook keeps it.
"""

from __future__ import annotations

import html
from typing import Any


class JobsTable:
    """A job picker with Logs / Delete buttons (the rows come from `%kf_jobs`)."""

    def __init__(self, magics: Any, rows: list[list[str]], backend: str | None = None) -> None:
        import ipywidgets as w

        self.magics = magics
        self.backend = backend
        names = [r[0] for r in rows]
        self.pick = w.Dropdown(options=names, value=names[-1] if names else None)
        self.logs_button = w.Button(description="Logs")
        self.delete_button = w.Button(description="Delete", button_style="danger")
        self.output = w.HTML("")
        self.logs_button.on_click(lambda _b: self.show_logs())
        self.delete_button.on_click(lambda _b: self.delete())
        self.widget = w.VBox(
            [w.HBox([self.pick, self.logs_button, self.delete_button]), self.output]
        )

    def show_logs(self, tail: int = 200) -> None:
        """Show the picked job's last lines."""
        name = self.pick.value
        try:
            lines = list(self.magics.client(self.backend).get_job_logs(name, tail_lines=tail))
        except Exception as exc:
            self.output.value = f"<pre>{html.escape(str(exc))}</pre>"
            return
        self.output.value = (
            "<pre style='max-height:20em;overflow:auto'>" + html.escape("\n".join(lines)) + "</pre>"
        )

    def delete(self) -> None:
        """Delete the picked job."""
        name = self.pick.value
        try:
            self.magics.client(self.backend).delete_job(name)
            self.output.value = f"Deleted {html.escape(name)}."
        except Exception as exc:
            self.output.value = f"<pre>{html.escape(str(exc))}</pre>"
