"""The cell output of a job: the live bundle while it runs, the static rendering after it ended,
and the colour palette shared with the lab extension (fast: no kernel, no browser)."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from kf_jupyter.types import COMPLETE, FAILED, TrainJob
from kf_jupyter.widgets.state import PALETTE, LogState, source_colour, source_colour_index
from kf_jupyter.widgets.static import (
    MIME_TYPE,
    final_bundle,
    live_bundle,
    status_label,
)
from tests.test_html_escaping import hostile

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Failure:
    """The shape h12-fail adds to kf_jupyter/types.py (read with getattr)."""

    source: str
    exc_type: str
    message: str
    traceback: list[str] = field(default_factory=list)


def _state() -> LogState:
    st = LogState()
    for s in range(5):
        rec = {"step": s, "progress": (s + 1) / 5, "metrics": {"loss": 1.0 / (s + 1)}}
        st.add("rank-0", "##kf-jupyter:report " + json.dumps(rec))
    for i in range(30):
        st.add("rank-0", f"rank 0 line {i}")
        st.add("rank-1", f"rank 1 line {i} <b>not bold</b>")
    st.add("rank-0", '##kf-jupyter:result {"ok": 1}')
    st.add("rank-1", "##kf-jupyter:other protocol line")
    return st


def _job(status: str = COMPLETE, reason: str = "AllJobsCompleted", message: str = "") -> TrainJob:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    return TrainJob(
        name="torch-1a2b3c4d",
        status=status,
        backend="local",
        reason=reason,
        message=message,
        creation_time=t0,
        completion_time=t0 + timedelta(seconds=75),
    )


def test_palette_and_colour_rule_match_the_lab_extension():
    ts = (ROOT / "labextension" / "src" / "palette.ts").read_text()
    body = ts.split("PALETTE: readonly string[] = [", 1)[1].split("]", 1)[0]
    assert tuple(re.findall(r"'(#[0-9a-f]{6})'", body)) == PALETTE
    # the same vectors as labextension/src/__tests__/live.test.ts
    for source, index in [
        ("rank-0", 0),
        ("rank-1", 1),
        ("rank-9", 1),
        ("node-3", 3),
        ("launcher", 2),
        ("", 0),
    ]:
        assert source_colour_index(source) == index, source
    assert source_colour("rank-1") == PALETTE[1]


def test_colours_depend_on_the_rank_not_on_arrival_order():
    a, b = LogState(), LogState()
    a.add("rank-1", "x")
    a.add("rank-0", "y")
    b.add("rank-0", "y")
    b.add("rank-1", "x")
    assert a.render_log_html() != b.render_log_html()  # order differs
    for st in (a, b):
        html = st.render_log_html()
        assert f"<span class='kf-src-1' style='color:{PALETTE[1]}'>[rank-1]</span>" in html


def test_live_bundle_carries_the_job_the_widget_and_a_fallback():
    data = live_bundle(
        "torch-1a2b3c4d", "kubernetes", "team-a", "torch-distributed", True, "abc123"
    )
    assert data[MIME_TYPE] == {
        "version": 1,
        "name": "torch-1a2b3c4d",
        "backend": "kubernetes",
        "namespace": "team-a",
        "runtime": "torch-distributed",
        "waiting": True,
        "api": "kf-jupyter/api",
    }
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == "abc123"
    # the fallback says what works where nothing live renders it
    assert "interrupt the kernel" in data["text/html"]
    assert "%kf_delete torch-1a2b3c4d" in data["text/html"]
    assert data["text/plain"] == "Job torch-1a2b3c4d (kubernetes / team-a): running"


def test_static_rendering_of_a_complete_job():
    pointer = "<code>/x</code>"
    data = final_bundle(_state(), _job(), "torch-1a2b3c4d", "local", log_pointer=pointer)
    html = data["text/html"]
    assert MIME_TYPE not in data and "application/vnd.jupyter.widget-view+json" not in data
    assert "data-status='Complete'" in html and "took 1:15" in html
    assert "width:100%" in html  # progress bar at 100 %
    assert "src='data:image/svg+xml;base64," in html and "alt='loss: 0.2 (step 4)'" in html
    assert "<script" not in html.lower()
    # the last lines of every rank, escaped, coloured as everywhere else; no protocol lines
    assert "rank 0 line 29" in html and "rank 1 line 29" in html and "rank 0 line 5<" not in html
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html
    assert f"color:{PALETTE[1]}'>[rank-1]</span>" in html
    assert "##kf-jupyter" not in html and "##kf-jupyter" not in data["text/plain"]
    assert pointer in html
    assert "Last 12 lines of every process" in html
    assert "overflow-wrap:break-word" in html and "word-break:normal" in html
    assert data["text/plain"].splitlines()[0] == "Job torch-1a2b3c4d (local): Complete, took 1:15"


def test_static_rendering_shows_the_failure_cause_first():
    job = _job(FAILED, "FailedJobs", "rank-1 exited with code 1")
    object.__setattr__(
        job,
        "failure",
        Failure("Rank 1", "NameError", "name 'x' is not defined", ["  File cell, line 3", "    x"]),
    )
    html = final_bundle(_state(), job, "torch-1a2b3c4d", "local")["text/html"]
    cause = html.index("Rank 1 failed: NameError: name &#x27;x&#x27; is not defined")
    assert cause < html.index("rank 1 line 29")
    assert "File cell, line 3" in html
    # without h12-fail's Failure: the job's message
    plain = final_bundle(_state(), _job(FAILED, "FailedJobs", "rank-1 exited"), "j", "local")
    assert "rank-1 exited" in plain["text/html"] and "rank-1 exited" in plain["text/plain"]


def test_cancelled_is_what_the_backend_recorded_and_hides_the_launcher_dump():
    assert status_label(_job(FAILED, "Cancelled")) == "Cancelled"
    assert status_label(_job(FAILED, "FailedJobs")) == "Failed"
    assert status_label(_job(COMPLETE)) == "Complete"
    st = _state()
    st.add("node-0", "torch.distributed.elastic.multiprocessing.api.SignalException: got 15")
    data = final_bundle(st, _job(FAILED, "Cancelled", "cancelled"), "j", "local")
    assert "data-status='Cancelled'" in data["text/html"]
    assert "SignalException" not in data["text/html"] + data["text/plain"]
    assert "rank 1 line 29" in data["text/html"]
    # a failed job keeps every source's lines
    failed = final_bundle(st, _job(FAILED, "FailedJobs", "boom"), "j", "local")
    assert "SignalException" in failed["text/html"]


def test_static_rendering_stays_short_with_many_ranks():
    st = LogState()
    for i in range(30):
        for r in range(16):
            st.add(f"rank-{r}", f"rank {r} line {i}")
    text = final_bundle(st, _job(), "j", "local")["text/html"]
    assert "Last 3 lines of every process" in text
    assert text.count("[rank-") == 16 * 3 and "rank 15 line 29" in text


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(x=hostile)
def test_live_and_static_renderings_escape_hostile_text(x: str) -> None:
    """Hostile job names, sources, lines, metric names and messages stay text (issue 13's
    escaping check, applied to this module's renderers)."""
    from tests import test_html_escaping as esc

    tags = esc.TAGS | {"img", "br"}
    attrs = esc.ATTRS | {"data-job", "data-status", "alt", "title", "src"}
    st = LogState()
    st.add(x, x)
    st.add("rank-0", "##kf-jupyter:report " + json.dumps({"step": 1, "metrics": {x: 1.0}}))
    job = TrainJob(name="j", status=FAILED, backend="local", reason=x, message=x)
    object.__setattr__(job, "failure", Failure(x, x, x, [x]))
    for markup in (
        final_bundle(st, job, x, x, x, x, f"<code>{html.escape(x)}</code>", label=x)["text/html"],
        live_bundle(x, x, x, x, True, None)["text/html"],
    ):
        p = esc._Collect()
        p.feed(markup)
        p.close()
        bad = [(t, a) for t, a in p.tags if t not in tags or set(a) - attrs]
        assert not bad, f"markup from the input became HTML: {bad}"
        assert x.replace("\r", "") in "".join(p.text).replace("\r", "")


BAR_18 = " 47%|████▋     | 18/38 [00:18<00:12]"
BAR_19 = " 50%|█████     | 19/38 [00:19<00:11]"
BAR_DONE = "100%|██████████| 38/38 [00:38<00:00]"


def test_a_print_while_a_bar_is_drawn_is_a_clean_line_in_the_widget_and_static_views() -> None:
    """Issue 22: `print()` while tqdm's bar is drawn ends the bar's terminal line, so the line
    came as `...[00:19<00:11]rank 0 step 19 loss`; the kernel's widget log and the static
    output showed the bar's fragment in front of the printed text (the lab already split it)."""
    st = LogState()
    st.add("rank-0", "starting")
    assert not st.add("rank-0", "\r" + BAR_18)  # an update: the live line, not printed
    assert st.add("rank-0", BAR_19 + "rank 0 step 19 loss 0.5")
    assert st.printed == ["rank 0 step 19 loss 0.5"]  # the text view prints it clean
    assert list(st.tails["rank-0"]) == ["starting", "rank 0 step 19 loss 0.5", BAR_19]
    view = html.unescape(re.sub(r"<[^>]+>", "", st.render_log_html()))
    assert "[rank-0] rank 0 step 19 loss 0.5" in view
    assert "[00:19<00:11]rank 0" not in view
    assert view.rstrip().endswith(BAR_19)  # the bar stays the rank's last (live) line
    # the bar's last state ends its line: shown once, where the bar was
    assert st.add("rank-0", BAR_DONE)
    assert list(st.tails["rank-0"]) == ["starting", "rank 0 step 19 loss 0.5", BAR_DONE]
    job = TrainJob(name="j", status=COMPLETE, backend="local")
    static = final_bundle(st, job, "j", "local")
    assert "[00:19<00:11]rank 0" not in html.unescape(static["text/html"])
    assert "rank 0 step 19 loss 0.5" in html.unescape(static["text/html"])
    # an ordinary line after an ordinary line is untouched
    assert st.add("rank-0", "plain | line 100%")
    assert st.printed == ["plain | line 100%"]


def test_a_print_while_a_bar_is_drawn_is_clean_in_the_text_log() -> None:
    """`%kf_logs` and the server's full log (logview.readable) print the line clean too."""
    from kf_jupyter.logview import readable
    from kf_jupyter.types import LogRecord

    recs = [
        LogRecord("rank-0", "\r" + BAR_18),
        LogRecord("rank-0", BAR_19 + "rank 0 step 19 loss 0.5"),
        LogRecord("rank-1", "other"),
        LogRecord("rank-0", "\r" + BAR_19),
        LogRecord("rank-0", BAR_DONE),
        LogRecord("rank-0", "plain | line 100%"),
    ]
    assert [(r.source, r.line) for r in readable(recs)] == [
        ("rank-0", "rank 0 step 19 loss 0.5"),
        ("rank-1", "other"),
        ("rank-0", BAR_DONE),
        ("rank-0", "plain | line 100%"),
    ]


def _tqdm_state(n: int, rate: float) -> str:
    """A real tqdm bar state (tqdm's own formatter), as tqdm writes it to a log file; its
    first state (n=0) has no rate yet (`[00:00<?, ?it/s]`)."""
    from tqdm import tqdm

    return tqdm.format_meter(n, 300, n / rate if n else 0, prefix="epoch 1 rank 0", ncols=None)


def test_a_print_after_a_tqdm_bar_of_another_width_is_clean_everywhere() -> None:
    """A print that arrives in one read with tqdm's next state: the bar the views last showed
    (tqdm's first state, `[00:00<?, ?it/s]`, or `9.87it/s`) and the state on the printed line
    (`10.12it/s`, `12.34s/it`) differ in width, so cutting at the shown bar's width left a
    fragment (`...0/300 [00:00<00:03, 9`) in front of the printed text or ate its start. The bar ends at its `]`: the widget, the text log and the static view print
    the line clean, and the bar stays the rank's live line."""
    from kf_jupyter.logview import after_bar, readable
    from kf_jupyter.types import LogRecord

    shown = _tqdm_state(0, 1.0)
    for n, rate in ((40, 10.12), (40, 9.99), (41, 0.081), (299, 123.45)):
        nxt = _tqdm_state(n, rate)
        assert after_bar(shown, nxt + "rank 0 step 40 loss") == "rank 0 step 40 loss", nxt
        assert after_bar(shown, nxt + "[rank 0] step 40") == "[rank 0] step 40", nxt
        assert after_bar(shown, nxt) is None  # the bar's own next line: nothing printed
    nxt = _tqdm_state(40, 10.12)
    assert len(nxt) != len(shown)
    assert after_bar(_tqdm_state(39, 9.87), _tqdm_state(41, 0.081) + "x") == "x"
    st = LogState()
    assert not st.add("rank-0", "\r" + shown)
    assert st.add("rank-0", nxt + "rank 0 step 40 loss")
    assert st.printed == ["rank 0 step 40 loss"]
    assert list(st.tails["rank-0"]) == ["rank 0 step 40 loss", nxt]
    recs = [LogRecord("rank-0", "\r" + shown), LogRecord("rank-0", nxt + "rank 0 step 40 loss")]
    assert [r.line for r in readable(recs)] == ["rank 0 step 40 loss"]


def test_a_print_after_a_bar_read_in_one_piece_is_clean_everywhere(tmp_path: Path) -> None:
    """A log read in one piece (a job panel opened later, a finished job, a follower that read
    a whole second at once) has the bar's updates and the print on one raw line:
    `\\r<bar>\\r<bar>rank 0 step 24 loss`. Every view showed its last segment, fragment and
    all; a terminal line is now the printed text alone (the bar shows again at its next update),
    read through the local backend's log reader as every view reads it."""
    from kf_jupyter.backends.local.logs import tail_lines_of
    from kf_jupyter.logview import after_bar, printed_after_bar, terminal_line

    raw = "\r" + _tqdm_state(0, 1.0) + "\r" + _tqdm_state(20, 44.6) + "\r"
    raw += _tqdm_state(24, 47.1) + "rank 0 step 24 loss"
    assert printed_after_bar(None, raw) == (_tqdm_state(24, 47.1), "rank 0 step 24 loss")
    assert terminal_line(raw) == "rank 0 step 24 loss"
    done = "\r" + _tqdm_state(5, 9.0) + "\r" + _tqdm_state(300, 9.0)
    assert terminal_line(done) == _tqdm_state(300, 9.0)  # the bar's own last state: kept
    assert terminal_line("plain | line 100%") == "plain | line 100%"
    # a bar without tqdm's [...] block that grows is not a bar and a print
    grows = "".join(f"\r{i}/6 |{'#' * (i + 1)}" for i in range(7))
    assert terminal_line(grows) == "6/6 |#######"
    assert after_bar("5/6 |######", "6/6 |#######") is None
    assert after_bar("5/6 |######", "6/6 |######rank 0 step 6") == "rank 0 step 6"
    log = tmp_path / "rank.log"
    log.write_text(f"starting\n{raw}\n{done}\nafter\n", encoding="utf-8")
    lines = tail_lines_of(str(log), 10)
    assert lines == ["starting", "rank 0 step 24 loss", _tqdm_state(300, 9.0), "after"]


def test_a_followed_bar_stays_live_across_a_print(tmp_path: Path) -> None:
    """A follower that reads a print made while a bar is drawn (`\\r<bar>\\r<bar>rank 0 step
    24 loss` in one read) sends the printed text and then the bar's state as an update, so
    every live view keeps the rank's bar on screen: before, the bar blinked out at each print
    until tqdm's next redraw, and a job whose ranks print together showed no bar at all for
    up to tqdm's refresh interval (what the lab's browser test met on a loaded CI machine)."""
    from kf_jupyter.backends.local.logs import iter_records
    from kf_jupyter.logview import UPDATE, readable

    log = tmp_path / "rank-0.log"
    log.write_text("starting\n\r" + _tqdm_state(0, 1.0), encoding="utf-8")
    done = False
    records = iter_records(str(tmp_path), follow=True, is_done=lambda: done)
    got = [next(records), next(records)]
    assert [r.line for r in got] == ["starting", UPDATE + _tqdm_state(0, 1.0)]
    with log.open("a", encoding="utf-8") as fh:
        fh.write("\r" + _tqdm_state(20, 44.6) + "\r" + _tqdm_state(24, 47.1))
        fh.write("rank 0 step 24 loss\n")
    done = True
    got += list(records)
    assert [r.line for r in got[2:]] == ["rank 0 step 24 loss", UPDATE + _tqdm_state(24, 47.1)]
    st = LogState()
    assert [st.add(rec.source, rec.line) for rec in got] == [True, False, True, False]
    assert list(st.tails["rank-0"]) == ["starting", "rank 0 step 24 loss", _tqdm_state(24, 47.1)]
    assert [r.line for r in readable(got)] == ["starting", "rank 0 step 24 loss"]


def test_a_settled_monitor_is_its_static_view_and_only_the_last_few_stay(monkeypatch) -> None:
    """Issue 22: when a job ends, the monitor's widget model (which a page that was away still
    shows from its saved live output) becomes the static view; its other models are closed,
    and only the last KEEP_SETTLED settled views stay open."""
    from kf_jupyter.widgets import monitor as mon

    monkeypatch.setattr(mon, "KEEP_SETTLED", 2)
    monkeypatch.setattr(mon, "_SETTLED", mon.deque())
    monitors = []
    for i in range(3):
        m = mon.JobMonitor(None, f"job-{i}", backend="local", records=[], poll_status=False)
        m.state.add("rank-0", f"line of job {i}")
        filt = m.rank_filter
        m.settle(m.final_bundle(TrainJob(name=f"job-{i}", status=COMPLETE, backend="local")))
        assert filt.comm is None  # the live controls' models are closed
        (view,) = m.widget.children
        assert "kf-monitor-static" in view.value and f"line of job {i}" in view.value
        monitors.append(m)
    assert monitors[0].widget.comm is None  # the oldest was closed: two stay
    assert monitors[1].widget.comm is not None and monitors[2].widget.comm is not None
