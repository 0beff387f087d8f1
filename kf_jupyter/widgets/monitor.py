"""JobMonitor: the live view a training cell displays (status, logs of every rank, progress).

A reader thread consumes `client.iter_log_records(name, follow=True)` into a bounded `LogState`;
a flusher thread turns it into widget trait updates: the log view at most every
`log_interval` (0.25 s), the header, progress bar and metric chart at most every
`stats_interval` (1 s). Nothing calls `display()` or writes to an Output from a thread, so a
notebook run by nbclient/nbval gets no stray outputs, and the message rate stays under 10/s
whatever the log rate.

One exception, by design: a monitor that no cell waits for (`--no-wait`, `%kf_monitor`) is
given its output's `display_id`; when the job ends its flusher replaces that output with the
job's static view (`update_display`, see `JobMonitor.settle_display`). An update names the
output by its display id, not by the cell that is running: JupyterLab and Notebook 7 route it to
every output that showed that id, even in a cell that ended long ago (their kernel connection's
`_handleDisplayId`), so the saved notebook holds the finished view, never a widget whose model
a restarted kernel no longer has ("Error displaying widget: model not found"). The replacement
keeps the output's live MIME payload beside the static HTML (and drops only the widget view), so
with the lab extension the lab's live monitor goes on showing the ended job, as it did while the
job ran, and every other front end renders the static HTML. An update adds no output anywhere
(nbclient and nbval apply it to the outputs with that id, or ignore it).
"""

from __future__ import annotations

import html
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from .. import phases
from ..progress import progress_label
from ..types import COMPLETE, FAILED, RUNNING, TERMINAL, LogRecord, TrainJob
from .state import LogState
from .static import BADGE_COLOURS as _BADGE
from .static import MIME_TYPE, final_bundle, status_label

#: Shown beside the monitor's controls while a cell blocks on its job: the kernel is busy, so a
#: frontend without the lab extension's live monitor (VS Code, JupyterLab without the extension)
#: delivers widget clicks only when the cell ends.
SUSPEND_TIP = "Stop the job's processes (pods) and keep the job; Resume starts them again"
RESUME_TIP = "Start the job's processes again (same workspace and environment)"

BUSY_NOTE = (
    "<small class='kf-busy-note'>The kernel is busy with this cell, so these controls respond "
    "when it ends. To stop the job now: interrupt the kernel (&#9632;), then press Cancel.</small>"
)


#: The header's layout at every width (issue 22: in a narrow notebook its buttons were cut to
#: "R…" and "C…" and the waiting reason clipped away). The monitor is a size container:
#: - the header's HTML widget shrinks (ipywidgets keeps an HTML's content at its full width)
#:   and its name gives way first; the controls never shrink;
#: - below `NARROW_PX` the waiting reason leaves the header's row for a line of its own under
#:   it, whole (wrapped), instead of a cut-off end of the row;
#: - below `ICONS_PX` Suspend/Resume and Cancel show only their icons: their labels stay their
#:   accessible names (the text is still there, drawn at size 0), their tooltips say the rest.
NARROW_PX = 900
ICONS_PX = 520
HEADER_STYLE = (
    "<style>"
    ".kf-monitor{container:kf-monitor/inline-size}"
    ".kf-widget-header .widget-html,.kf-widget-header .widget-html-content"
    "{min-width:0;flex:1 1 auto;overflow:hidden}"
    ".kf-monitor .kf-waiting-line{display:none!important}"
    ".kf-waiting-line .widget-html-content{height:auto;line-height:1.4;white-space:normal}"
    f"@container kf-monitor (max-width:{NARROW_PX - 1}px){{"
    ".kf-widget-header .kf-waiting{display:none}"
    ".kf-monitor .kf-waiting-line{display:flex!important}}"
    f"@container kf-monitor (max-width:{ICONS_PX - 1}px){{"
    ".kf-widget-header .kf-icon-button{width:30px!important;padding:0;font-size:0;"
    "display:inline-flex;align-items:center;justify-content:center}"
    ".kf-widget-header .kf-icon-button i{font-size:var(--jp-widgets-font-size,13px);margin:0}"
    ".kf-widget-header .kf-rank-filter{width:128px!important}}"
    "</style>"
)


def cancel_job(client: Any, name: str) -> None:
    """Stop a job, keeping its record and logs when the backend can (local `cancel_job`)."""
    cancel = getattr(getattr(client, "backend", None), "cancel_job", None)
    if callable(cancel):
        cancel(name)
    else:
        client.delete_job(name)


def failure_html(failure: Any) -> str:
    """The root cause box: `Rank 1 failed: NameError: ...` and the user's traceback."""
    what = failure.exc_type + (f": {failure.message}" if failure.message else "")
    body = "\n".join(html.escape(ln) for ln in failure.traceback[-40:])
    pre = f"<pre style='margin:0;white-space:pre-wrap'>{body}</pre>" if body else ""
    return (
        "<div class='kf-failure' style='border-left:4px solid #dc3545;padding-left:6px'>"
        f"<b>{html.escape(failure.source)} failed: {html.escape(what)}</b>{pre}</div>"
    )


def cancel_if_running(client: Any, name: str) -> tuple[bool, TrainJob | None]:
    """Cancel a job only if the backend still has it running; return (cancelled, job after).

    A job that already ended is left alone (a late Cancel never turns Complete into Cancelled);
    `job` is the backend's record afterwards (None when the backend deleted it).
    """
    from ..errors import JobNotFoundError

    job = client.get_job(name)
    if job.status in TERMINAL:
        return False, job
    cancel_job(client, name)
    try:
        return True, client.get_job(name)
    except JobNotFoundError:
        return True, None


def _mib(value: Any) -> str:
    return (
        "?" if value is None else f"{value / 1024:.1f} GiB" if value >= 1024 else f"{value:.0f} MiB"
    )


def gpu_html(held: dict[str, Any], usage: dict[str, Any]) -> str:
    """`GPUs: node-0: GPU 0 (uuid) 7% · 0.1/80.0 GiB` per device ('' when the job holds none)."""
    if not held:
        return ""
    parts = []
    for node, devs in held.items():
        cells = []
        for d in devs:
            cell = f"GPU {html.escape(str(d.get('index')))}"
            u = usage.get(d.get("uuid"))
            if u:
                util = u.get("utilization")
                cell += (
                    f" {'?' if util is None else f'{util:.0f}'}% · "
                    f"{_mib(u.get('memory_used_mib'))} / {_mib(u.get('memory_total_mib'))}"
                )
            cells.append(f"<span title='{html.escape(str(d.get('uuid')))}'>{cell}</span>")
        parts.append(f"<b>{html.escape(str(node))}</b>: " + ", ".join(cells))
    return "<small class='kf-gpus'>GPUs · " + " &nbsp;|&nbsp; ".join(parts) + "</small>"


def _fmt_elapsed(seconds: float) -> str:
    s = int(max(0, seconds))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class JobMonitor:
    """Live monitor of one job; `.widget` is the ipywidgets box to display.

    `records` replaces the client's log stream (tests and benchmarks feed their own).
    """

    def __init__(
        self,
        client: Any,
        name: str,
        backend: str = "",
        runtime: str = "",
        buffer_lines: int = 400,
        log_interval: float = 0.25,
        stats_interval: float = 1.0,
        records: Iterable[LogRecord] | None = None,
        poll_status: bool = True,
    ) -> None:
        import ipywidgets as w

        self.client = client
        self.name = name
        self.backend = backend or getattr(client, "backend_name", "")
        self.runtime = runtime
        self.state = LogState(buffer_lines=buffer_lines)
        self.log_interval = log_interval
        self.stats_interval = stats_interval
        self.status = "Created"
        self.started = time.time()
        self.ended: float | None = None
        self._records = records
        self._poll_status = poll_status
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reader_done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._filter: str | None = None
        self._sources_shown: tuple[str, ...] = ()
        self.error: BaseException | None = None
        self.waiting = ""  # why a Created/Suspended job is not running (reason: message)

        self.header = w.HTML(self._header_html(), layout=w.Layout(flex="1 1 auto", min_width="0"))
        # a description labels the select (axe: select-name), as the lab monitor's aria-label
        self.rank_filter = w.Dropdown(
            options=[("all ranks", "")],
            value="",
            description="Show",
            style={"description_width": "initial"},
            layout=w.Layout(width="180px", flex="none"),
        ).add_class("kf-rank-filter")
        # never shrunk (they were cut to "R…" and "C…"): icons only when narrow (HEADER_STYLE)
        self.cancel_button = w.Button(
            description="Cancel",
            button_style="danger",
            icon="stop",
            tooltip="Stop the job (its record and logs stay)",
            layout=w.Layout(width="86px", flex="none"),
        ).add_class("kf-icon-button")
        self.suspend_button = w.Button(
            description="Suspend",
            icon="pause",
            tooltip=SUSPEND_TIP,
            layout=w.Layout(width="98px", flex="none"),
        ).add_class("kf-icon-button")
        self.note = w.HTML("", layout=w.Layout(display="none"))
        self.progress = w.FloatProgress(
            value=0.0, min=0.0, max=1.0, layout=w.Layout(display="none", width="98%")
        )
        self.chart = w.HTML("")
        self.gpus = w.HTML("", layout=w.Layout(display="none"))
        self.failure = w.HTML("", layout=w.Layout(display="none"))
        self.phase_line = w.HTML("", layout=w.Layout(display="none"))
        #: the waiting reason on a line of its own, shown only where the header has no room
        self.waiting_line = w.HTML("", layout=w.Layout(display="none")).add_class("kf-waiting-line")
        self.log = w.HTML(self.state.render_log_html())
        self.footer = w.HTML(self._footer_html())
        self.widget = w.VBox(
            [
                w.HBox(
                    [self.header, self.rank_filter, self.suspend_button, self.cancel_button],
                    layout=w.Layout(align_items="center"),
                ).add_class("kf-widget-header"),
                self.waiting_line,
                self.note,
                self.progress,
                self.chart,
                self.gpus,
                self.failure,
                self.phase_line,
                self.log,
                self.footer,
            ]
        ).add_class("kf-monitor")
        self.rank_filter.observe(self._on_filter, names="value")
        self.cancel_button.on_click(self._on_cancel)
        self.suspend_button.on_click(self._on_suspend)
        self.job: TrainJob | None = None
        #: The display id of the output showing this monitor when no cell waits for the job:
        #: the flusher then replaces that output with the static view when the job ends.
        self.display_id: str | None = None
        #: The live MIME payload that output carries (kept in its replacement, see the module's
        #: docstring); None when the output had none.
        self.live_payload: dict[str, Any] | None = None

    def set_waiting(self, waiting: bool) -> None:
        """Say (or stop saying) that the kernel is busy with the cell following this job."""
        self.note.value = BUSY_NOTE if waiting else ""
        self.note.layout.display = "" if waiting else "none"

    def final_bundle(self, job: TrainJob, namespace: str | None = None) -> dict[str, Any]:
        """The static rendering that replaces this monitor once the job ended."""
        with self._lock:
            path = self.log_path()
            pointer = (
                f"<code>{html.escape(path)}</code> or <code>%kf_logs {html.escape(self.name)}</code>"
                if path
                else ""
            )
            return final_bundle(
                self.state,
                job,
                self.name,
                self.backend,
                namespace if namespace is not None else getattr(job, "namespace", None),
                self.runtime,
                pointer,
                started=self.started,
            )

    # -- rendering ----------------------------------------------------------------------------

    def _header_html(self) -> str:
        end = self.ended or time.time()
        colour = _BADGE.get(self.status, "#6c757d")
        rt = f" · runtime {html.escape(self.runtime)}" if self.runtime else ""
        where = f"{html.escape(self.name)} · {html.escape(self.backend)}{rt}"
        # One row at every width: the name and where it runs give way (cut with an ellipsis,
        # whole in the title), the status and elapsed time keep their size (HEADER_STYLE lets
        # the HTML widget shrink at all).
        return (
            f"{HEADER_STYLE}<div class='kf-head-row' style='display:flex;gap:4px;"
            "align-items:baseline;white-space:nowrap;min-width:0'>"
            f"<span class='kf-head-where' title='{where}' style='overflow:hidden;"
            f"text-overflow:ellipsis;min-width:3em'><b>{html.escape(self.name)}</b> · "
            f"{html.escape(self.backend)}{rt}</span><span style='flex:none'> · "
            f"<span class='kf-status'{self._waiting_title()} style='background:{colour};"
            f"color:white;padding:1px 6px;border-radius:8px'>{html.escape(self.status)}</span> · "
            f"<span class='kf-elapsed'>{_fmt_elapsed(end - self.started)}</span></span>"
            f"{self._waiting_html()}</div>"
        )

    def _sync_waiting_line(self) -> None:
        """The waiting reason's own line (shown by HEADER_STYLE only in a narrow monitor)."""
        shown = bool(self.waiting and self.status in ("Created", "Suspended"))
        value = (
            f"<small class='kf-waiting-own' role='status'>{html.escape(self.waiting)}</small>"
            if shown
            else ""
        )
        if value != self.waiting_line.value:
            with self.waiting_line.hold_sync():
                self.waiting_line.value = value
                self.waiting_line.layout.display = "" if shown else "none"

    def _waiting_title(self) -> str:
        """The waiting reason as the status badge's tooltip too (a narrow header cuts the
        reason itself short)."""
        if not (self.waiting and self.status in ("Created", "Suspended")):
            return ""
        return f" title='{html.escape(self.waiting)}'"

    def _waiting_html(self) -> str:
        """Why a Created or Suspended job does not run, on the header's own row: it gives way
        first (cut with an ellipsis, never below 5em), whole in its tooltip and as its text
        for assistive technology."""
        if not (self.waiting and self.status in ("Created", "Suspended")):
            return ""
        text = html.escape(self.waiting)
        return (
            f"<small class='kf-waiting' title='{text}' style='overflow:hidden;"
            f"text-overflow:ellipsis;min-width:5em;flex:0 4 auto'>· {text}</small>"
        )

    def _footer_html(self) -> str:
        path = self.log_path()
        where = (
            f"full log on disk: <code>{html.escape(path)}</code>"
            if path
            else f"full log: <code>%kf_logs {html.escape(self.name)}</code>"
        )
        return f"<small>{where} · view keeps the last {self.state.buffer.maxlen} lines</small>"

    def log_path(self) -> str | None:
        """Where the full log is on disk (local backend), if the backend says."""
        backend = getattr(self.client, "backend", None)
        fn = getattr(backend, "job_dir", None)
        if not callable(fn):
            return None
        try:
            return str(fn(self.name) / "logs")
        except Exception:
            return None

    def _on_filter(self, change: dict[str, Any]) -> None:
        self._filter = change["new"] or None
        with self._lock:
            self.log.value = self.state.render_log_html(self._filter)

    def _on_cancel(self, _button: Any = None) -> None:
        self.cancel_button.disabled = True
        try:
            cancelled, job = cancel_if_running(self.client, self.name)
        except Exception as exc:  # shown in the monitor, never raised into the frontend
            self.failure.value = f"<b>Cancel failed:</b> {html.escape(str(exc))}"
            self.failure.layout.display = ""
            self.cancel_button.disabled = False
            return
        if job is None:  # the backend deleted it (Kubernetes)
            self.stop()
            self._set_status("Deleted")
            return
        self._apply_job(job)
        self.status = status_label(job)  # the backend's record, even after a detach
        if not cancelled:
            self.failure.value = (
                f"<small>Job {html.escape(self.name)} had already ended "
                f"({html.escape(self.status)}); nothing was cancelled.</small>"
            )
            self.failure.layout.display = ""
        self.header.value = self._header_html()

    def _on_suspend(self, _button: Any = None) -> None:
        resume = self.status == "Suspended"
        try:
            if resume:
                self.client.resume_job(self.name)
            else:
                self.client.suspend_job(self.name)
        except Exception as exc:  # shown, never raised into the frontend
            self.failure.value = (
                f"<b>{'Resume' if resume else 'Suspend'} failed:</b> {html.escape(str(exc))}"
            )
            self.failure.layout.display = ""
            return
        self._poll()
        self.header.value = self._header_html()
        self._sync_waiting_line()
        self._sync_suspend_button()

    def _sync_suspend_button(self) -> None:
        """Suspend while it can run, Resume while suspended, disabled once it has ended."""
        ended = self.status in ("Complete", "Failed", "Cancelled")
        resume = self.status == "Suspended"
        with self.suspend_button.hold_sync():
            self.suspend_button.description = "Resume" if resume else "Suspend"
            self.suspend_button.icon = "play" if resume else "pause"
            self.suspend_button.tooltip = RESUME_TIP if resume else SUSPEND_TIP
            self.suspend_button.disabled = ended

    # -- threads -----------------------------------------------------------------------------

    def start(self) -> JobMonitor:
        """Start following (reader and flusher threads; both are daemons)."""
        reader = threading.Thread(
            target=self._read, name=f"kf-monitor-read-{self.name}", daemon=True
        )
        flusher = threading.Thread(
            target=self._flush_loop, name=f"kf-monitor-flush-{self.name}", daemon=True
        )
        self._threads = [reader, flusher]
        reader.start()
        flusher.start()
        return self

    def _stream(self) -> Iterator[LogRecord]:
        if self._records is not None:
            return iter(self._records)
        return iter(self.client.iter_log_records(self.name, follow=True))

    def _read(self) -> None:
        try:
            for rec in self._stream():
                if self._stop.is_set():
                    break
                with self._lock:
                    self.state.add(rec.source, rec.line)
        except Exception as exc:
            self.error = exc
        finally:
            self._reader_done.set()

    def _flush_loop(self) -> None:
        next_stats = 0.0
        next_poll = 0.0
        while True:
            done = self._reader_done.is_set() or self._stop.is_set()
            now = time.monotonic()
            if self._poll_status and now >= next_poll and not done:
                next_poll = now + 2.0
                self._poll()
            self.flush_log()
            if now >= next_stats or done:
                next_stats = now + self.stats_interval
                self.flush_stats()
            if done:
                if self.display_id is not None and not self._stop.is_set():
                    self.settle_display()
                return
            self._reader_done.wait(self.log_interval)

    def _ended_job(self, tries: int = 15, pause: float = 2.0) -> TrainJob | None:
        """The job once the backend records it ended (its log stream may end a moment
        before); None if it does not within `tries`, or it is gone."""
        for i in range(tries):
            if self._stop.is_set():
                return None
            try:
                job = self.client.get_job(self.name)
            except Exception:
                return None
            if job.status in TERMINAL:
                return job
            if i + 1 < tries:
                self._stop.wait(pause)
        return None

    def settle_display(self) -> None:
        """For a monitor no cell waits for: once the job ended, show its final state, replace
        the output (`display_id`) with the static view, and settle the widget into it too.
        Runs on the flusher thread; `update_display` names the output by its id (see the
        module's docstring), so it lands where the monitor is, whichever cell runs now."""
        job = self._ended_job()
        if job is None or self._stop.is_set():
            return
        try:
            from IPython.display import update_display

            self.finish(job)
            bundle = self.final_bundle(job)
            shown = {MIME_TYPE: self.live_payload, **bundle} if self.live_payload else bundle
            update_display(shown, raw=True, display_id=self.display_id)
            self.settle(bundle)
        except Exception as exc:  # never raise on a daemon thread; keep it for inspection
            self.error = exc

    def _poll(self) -> None:
        try:
            job = self.client.get_job(self.name)
        except Exception:
            return
        self._apply_job(job)
        self._poll_gpus(job)

    def _poll_gpus(self, job: TrainJob) -> None:
        """Which devices each node holds, with their utilisation and memory while it runs
        (local backend, when nvidia-smi answers)."""
        held = getattr(job, "gpus", None) or {}
        usage: dict[str, Any] = {}
        fn = getattr(getattr(self.client, "backend", None), "gpu_usage", None)
        if held and job.status == RUNNING and callable(fn):
            try:
                usage = fn(self.name) or {}
            except Exception:
                usage = {}
        value = gpu_html(held, usage)
        if value != self.gpus.value:
            self.gpus.value = value
            self.gpus.layout.display = "" if value else "none"

    def _apply_job(self, job: TrainJob) -> None:
        if job.creation_time is not None:
            created = job.creation_time
            if created.tzinfo is None:
                created = created.replace(tzinfo=UTC)
            self.started = created.timestamp()
        if job.completion_time is not None:
            done = job.completion_time
            if done.tzinfo is None:
                done = done.replace(tzinfo=UTC)
            self.ended = done.timestamp()
        with self._lock:
            self.state.apply_trainer_status(getattr(job, "trainer_status", None))
        self.waiting = ": ".join(p for p in (job.reason, job.message) if p)
        self.job = job
        if self.status != "Detached":
            self.status = status_label(job)
        if job.status in (COMPLETE, FAILED):
            if self.ended is None:
                self.ended = datetime.now(UTC).timestamp()
            self.cancel_button.disabled = True  # an ended job has nothing to cancel

    def flush_log(self) -> None:
        """Send the log view if it changed (one message)."""
        with self._lock:
            if not self.state.log_dirty:
                return
            self.state.log_dirty = False
            value = self.state.render_log_html(self._filter)
            sources = tuple(self.state.sources)
        self.log.value = value
        if sources != self._sources_shown:
            self._sources_shown = sources
            current = self.rank_filter.value
            self.rank_filter.options = [("all ranks", ""), *((s, s) for s in sources)]
            self.rank_filter.value = current if current in sources else ""

    def flush_stats(self) -> None:
        """Send the header (status, elapsed), progress bar and chart (one message each, if changed)."""
        with self._lock:
            dirty = self.state.stats_dirty
            self.state.stats_dirty = False
            progress = self.state.progress
            eta = self.state.eta_seconds
            chart = self.state.chart_svg() if dirty and self.state.metrics else None
        header = self._header_html()
        if header != self.header.value:
            self.header.value = header
            self._sync_suspend_button()
        self._sync_phase()
        # the label follows the status too: no ETA once the job is suspended or has ended
        label = (
            progress_label(round(progress * 100), eta, self.status) if progress is not None else ""
        )
        if progress is not None and (dirty or label != self.progress.description):
            with self.progress.hold_sync():
                self.progress.value = progress
                self.progress.description = label
                self.progress.layout.display = ""
        if chart is not None:
            self.chart.value = chart

    def _phase_text(self) -> str:
        """The job's startup phase (from its record: kf_jupyter/phases.py) while it has not
        printed yet; "" once a line (or a report) arrived, and always once it is not Created
        or Running."""
        job = self.job
        phase = getattr(job, "phase", "") if job is not None else ""
        if not phase or self.status not in phases.ACTIVE or job.status not in phases.ACTIVE:
            return ""
        with self._lock:
            quiet = not self.state.buffer and self.state.progress is None
        return f"{phase}. No output yet." if quiet else ""

    def _sync_phase(self) -> None:
        """Show (or hide) the phase line above the log, and the waiting reason's own line; one
        message each, only when it changed."""
        self._sync_waiting_line()
        text = self._phase_text()
        value = (
            f"<div class='kf-phase' role='status' style='font-size:12px;font-style:italic'>"
            f"{html.escape(text)}</div>"
            if text
            else ""
        )
        if value != self.phase_line.value:
            with self.phase_line.hold_sync():
                self.phase_line.value = value
                self.phase_line.layout.display = "" if value else "none"

    def _set_status(self, status: str) -> None:
        self.status = status
        if self.ended is None and status != "Detached":
            self.ended = time.time()
        self.header.value = self._header_html()
        self._sync_phase()

    def stop(self, detached: bool = False) -> None:
        """Stop following (the job is not touched); `detached` marks the header so."""
        self._stop.set()
        self._reader_done.set()
        for t in self._threads:
            if t is not threading.current_thread() and t.name.startswith("kf-monitor-flush"):
                t.join(timeout=2)
        if detached:
            self.status = "Detached"
            self._sync_phase()
            self.header.value = self._header_html() + (
                f" · reattach with <code>%kf_logs {html.escape(self.name)} -f</code>"
            )

    def close(self) -> None:
        """Stop following and close every widget model of this monitor, so the kernel and the
        front end let go of them (and of the log buffer their callbacks hold): for a monitor
        whose output the static rendering replaced. A saved notebook then carries no state for
        it."""
        self.stop()
        close_widget_tree(self.widget)

    def settle(self, bundle: dict[str, Any]) -> None:
        """Stop following; the monitor's outer widget becomes the job's static view (`bundle`,
        from `final_bundle`) and every other model of it is closed.

        The cell's display shows the static bundle itself; this is for a page that was away
        when the job ended (closed, or reloaded before it saved): its notebook still holds the
        live output, whose widget view then renders the finished view instead of a monitor
        that stopped moving or "model not found", as the lab extension's view does. Only the
        last `KEEP_SETTLED` such views stay (two small models each, no log buffer).
        """
        import ipywidgets as w

        self.stop()
        old = list(self.widget.children)
        self.widget.children = [w.HTML(bundle.get("text/html", ""))]
        for child in old:
            close_widget_tree(child)
        _SETTLED.append(self.widget)
        while len(_SETTLED) > KEEP_SETTLED:
            close_widget_tree(_SETTLED.popleft())

    def join(self, timeout: float | None = None) -> None:
        """Wait for the log stream to end and the last flush to be sent."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            t.join(left)

    def finish(self, job: TrainJob) -> None:
        """Show the final status; on failure put the failing rank's last lines in front."""
        self._apply_job(job)
        with self._lock:
            self.state.flush_held()
        self.flush_log()
        self.flush_stats()
        self.header.value = self._header_html()
        failure = getattr(job, "failure", None)
        if job.status == FAILED and failure is not None:
            self.failure.value = failure_html(failure)
            self.failure.layout.display = ""
        elif job.status == FAILED:
            with self._lock:
                source, lines = self.state.failure_tail(job)
            if lines:
                body = "\n".join(html.escape(ln) for ln in lines)
                self.failure.value = (
                    f"<div style='border-left:4px solid #dc3545;padding-left:6px'><b>{html.escape(source)}"
                    f" failed — last lines:</b><pre style='margin:0'>{body}</pre></div>"
                )
                self.failure.layout.display = ""


#: How many ended jobs' widgets stay open as their static view (see `JobMonitor.settle`).
KEEP_SETTLED = 20
_SETTLED: deque[Any] = deque()


def close_widget_tree(widget: Any) -> None:
    """Close a widget, its children and their layout and style models (ipywidgets' `close()`
    closes one model only; the others would stay registered for the kernel's life)."""
    import ipywidgets as w

    todo, seen = [widget], set()
    while todo:
        cur = todo.pop()
        if id(cur) in seen or not isinstance(cur, w.Widget):
            continue
        seen.add(id(cur))
        todo.extend(getattr(cur, "children", ()) or ())
        todo.extend(getattr(cur, name, None) for name in ("layout", "style"))
        cur.close()
