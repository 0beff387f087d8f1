"""`%kf_compare JOB [JOB ...]`: overlay finished jobs' metric curves (docs/notebook.md).

Registered beside `KubeflowMagics` by `%load_ext kf_jupyter`; it uses that instance's clients
(the backend, namespace and kubeconfig the session chose).
"""

from __future__ import annotations

from typing import Any

from IPython.core import magic_arguments as ma
from IPython.core.magic import Magics, line_magic, magics_class

#: The most jobs one comparison overlays (the palette has 8 colours; beyond ~16 lines a chart
#: is unreadable).
MAX_COMPARED = 16


@magics_class
class CompareMagics(Magics):
    """`%kf_compare`: the metric curves of several jobs in one view."""

    def __init__(self, shell: Any = None, core: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.core = core

    @ma.magic_arguments()
    @ma.argument("names", nargs="*", help="jobs to compare (two or more; one is allowed)")
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @ma.argument("--namespace", default=None, help="Kubernetes namespace")
    @line_magic
    def kf_compare(self, line: str) -> None:
        """Overlay the metric curves of jobs (finished, or running: their points so far), one
        chart per metric and one line per job, with a table of each job's last values. The view
        is static HTML: it stays in a saved notebook."""
        from ..errors import KFJupyterError, ValidationError
        from .core import _fail, _parse_args

        args = _parse_args(self.kf_compare, line)
        if args is None:
            return None
        names = list(dict.fromkeys(args.names))  # the same job twice is one line
        try:
            if not names:
                raise ValidationError(
                    "%kf_compare needs the names of the jobs to compare, for example "
                    "%kf_compare job-a job-b; list your jobs with %kf_jobs."
                )
            if len(names) > MAX_COMPARED:
                raise ValidationError(
                    f"%kf_compare overlays at most {MAX_COMPARED} jobs ({len(names)} given): a "
                    "chart with more lines cannot be read. Compare fewer jobs at a time."
                )
            self._show(names, args.backend, args.namespace)
        except KFJupyterError as exc:
            raise _fail(str(exc)) from None

    def _show(self, names: list[str], backend: str | None, namespace: str | None) -> None:
        from ..errors import JobNotFoundError, ValidationError
        from ..widgets.compare import compare_bundle, read_run

        client = self.core.client(backend, namespace)
        runs = []
        missing = []
        for name in names:
            try:
                runs.append(read_run(client, name))
            except JobNotFoundError:
                missing.append(name)
        if missing:
            raise ValidationError(
                f"No job named {', '.join(repr(m) for m in missing)} on the "
                f"{client.backend_name} backend. Check the names with %kf_jobs"
                + (" (or pass --backend)." if backend is None else ".")
            )
        bundle = compare_bundle(runs)
        if getattr(self.shell, "kernel", None) is None:
            print(bundle["text/plain"])
            return
        from IPython.display import display

        display(bundle, raw=True)
