"""Every string that reaches HTML is escaped (issue 13, item 10).

A job controls its log file names (`logs/<img src=x onerror=...>.log` becomes a source), its
lines and its metric names; a user controls job names, runtimes and form fields. Each renderer
(the monitor's header, log view, failure box, chart and footer, `%kf_jobs` tables, the jobs
widget, the forms' messages) is fed hostile text, and the HTML it makes is parsed: only the
renderer's own tags and attributes may appear, and the text shows the hostile string as text.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kf_jupyter.magics.render import html_table
from kf_jupyter.types import FAILED, Step, TrainJob
from kf_jupyter.widgets.forms import _error_html
from kf_jupyter.widgets.monitor import JobMonitor
from kf_jupyter.widgets.state import LogState
from kf_jupyter.widgets.tables import JobsTable

TAGS = {"pre", "span", "b", "code", "small", "div", "svg", "rect", "text", "polyline", "table",
        "thead", "tbody", "tr", "th", "td", "ul", "li", "style", "figure", "figcaption"}  # fmt: skip
ATTRS = {
    "style",
    "class",
    "xmlns",
    "width",
    "height",
    "data-metric",
    "x",
    "y",
    "font-size",
    "fill",
    "stroke",
    "stroke-width",
    "points",
    "tabindex",
    "role",
    "aria-label",
    "aria-hidden",
    "stroke-opacity",
    "title",
}  # fmt: skip  (the log box's fixed accessibility attrs)
PAYLOADS = [
    "<img src=x onerror=alert(1)>",
    '"><script>alert(1)</script>',
    "' onmouseover='alert(1)",
    "</pre><iframe srcdoc=x>",
    "&lt;b&gt;",
    "<svg/onload=alert(1)>",
]
hostile = st.one_of(
    st.sampled_from(PAYLOADS),
    st.text(alphabet="<>\"'&=/ ;:!-abcimgsrcipt()x", min_size=1, max_size=30),
    st.text(min_size=1, max_size=20),
)


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[str]]] = []
        self.text: list[str] = []
        self.comments: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, [a for a, _ in attrs]))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)

    def handle_comment(self, data):
        self.comments.append(data)

    def handle_decl(self, decl):
        self.comments.append(decl)

    def unknown_decl(self, data):
        self.comments.append(data)

    def handle_pi(self, data):
        self.comments.append(data)


def assert_safe(markup: str, shows: str | None = None) -> None:
    """Only the renderer's own tags/attributes; `shows` appears in the text as it is."""
    p = _Collect()
    p.feed(markup)
    p.close()
    bad = [(t, a) for t, a in p.tags if t not in TAGS or set(a) - ATTRS]
    assert not bad, f"markup from the input became HTML: {bad} in {markup[:300]!r}"
    assert not p.comments, p.comments
    if shows is not None:
        assert shows.replace("\r", "") in "".join(p.text).replace("\r", ""), markup[:300]


class _FailingClient:
    backend_name = "local"

    def __init__(self, message: str) -> None:
        self.message = message

    def delete_job(self, name: str) -> None:
        raise RuntimeError(self.message)

    def get_job_logs(self, name: str, tail_lines: int = 0):
        return iter([self.message, f"[{self.message}] line"])

    def client(self, backend=None):
        return self


@pytest.mark.reliability(
    scenario="hostile text (log file names, lines, metric names, job/runtime names, errors) in "
    "every HTML renderer: monitor header/log/failure/chart/footer, %kf_jobs table, jobs widget, "
    "form messages; only the renderers' own tags appear",
    area="hostile",
)
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(x=hostile)
def test_every_renderer_escapes_hostile_text(x: str) -> None:
    # The log view and the chart (LogState: what the monitor and static renderings show).
    state = LogState()
    state.add(x, x)
    state.add("rank-0", x)
    state.flush_held()
    state.metrics[x] = [(0.0, 1.0), (1.0, 2.0)]
    # The view shows a line as a person reads it (kf_jupyter.logview: `\r` bars collapsed,
    # protocol lines hidden); what it shows must arrive as text.
    shown = [ln for src, ln in state.buffer if src == x]
    if shown:
        assert_safe(state.render_log_html(), shows=f"[{x}] {shown[0]}")
        assert_safe(state.render_log_html(only=x), shows=f"[{x}]")
    assert_safe(state.render_log_html())
    assert_safe(state.render_log_html(only=x))
    assert_safe(state.chart_svg())

    # The monitor widget: header, footer, log view, failure box, cancel error, detach note.
    client = _FailingClient(x)
    mon = JobMonitor(client, x, backend=x, runtime=x, records=[], poll_status=False)
    mon.state.add(x, x)
    mon.flush_log()
    job = TrainJob(name=x, status=FAILED, backend=x, steps=[Step(name=x, status=FAILED)])
    mon.finish(job)
    mon._on_cancel()
    for value in (mon.header.value, mon.footer.value, mon.log.value, mon.failure.value):
        assert_safe(value)
    mon.stop(detached=True)
    assert_safe(mon.header.value)

    # %kf_jobs / %kf_runtimes tables, the jobs widget, the forms' error list.
    assert_safe(html_table([x, "status"], [[x, x], ["a", x]]), shows=x)
    table = JobsTable(client, [[x, "Running"]])
    table.show_logs()
    assert_safe(table.output.value, shows=x)
    table.delete()
    assert_safe(table.output.value, shows=x)
    assert_safe(_error_html([x, f"field {x}"]), shows=x)
