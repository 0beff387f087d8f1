"""Report lines with values no float can hold never stop a consumer (issue 13 item 9).

A `##kf-jupyter:report` line is written by user code (or by anything that prints the prefix):
a 400-digit integer, NaN, ±Infinity, strings, nested objects or broken JSON must be ignored by
the job monitor's state (widget), the monitor's reader thread, and the text-mode `%%torchtrain`
follower, and the charts drawn from what is kept must hold only finite coordinates. The server
passes lines through untouched (no parsing); the lab extension's parser is tested in Jest
(labextension/src/__tests__/metrics.test.ts).
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kf_jupyter.constants import REPORT_PREFIX
from kf_jupyter.report import finite_number, parse_report, report
from kf_jupyter.types import LogRecord
from kf_jupyter.widgets.monitor import JobMonitor
from kf_jupyter.widgets.state import LogState

from .test_widgets import FakeClient, comms  # noqa: F401  (fixture)

HUGE = 10**400

values = st.one_of(
    st.integers(),
    st.integers(min_value=10**300, max_value=10**420),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([HUGE, -HUGE, float("nan"), float("inf"), True, None, "1.5", "abc"]),
    st.text(max_size=10),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _line(step: object, progress: object, metrics: dict[str, object]) -> str:
    return REPORT_PREFIX + json.dumps({"step": step, "progress": progress, "metrics": metrics})


raw_tails = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            '{"step": 1, "metrics": {"loss": NaN}}',
            '{"step": 1, "metrics": {"loss": Infinity, "acc": -Infinity}}',
            '{"step": 1e999, "progress": 1e999, "metrics": {"loss": 1e999}}',
            '{"step": ' + "9" * 400 + ', "metrics": {"loss": ' + "9" * 400 + "}}",
            '{"step": ' + "9" * 5000 + "}",  # beyond Python's int digit limit: a ValueError
            '{"metrics": [1, 2]}',
            "[" * 100_000,  # too deep for the JSON parser
            "{",
            "null",
        ]
    ),
)

_COORD = re.compile(r"points='([^']*)'")


def _assert_finite_chart(svg: str) -> None:
    for pts in _COORD.findall(svg):
        for pair in pts.split():
            x, y = pair.split(",")
            assert float(x) == float(x) and abs(float(x)) < 1e6, pair
            assert float(y) == float(y) and abs(float(y)) < 1e6, pair


def test_finite_number() -> None:
    assert finite_number(HUGE) is None and finite_number(-HUGE) is None
    assert finite_number(float("nan")) is None and finite_number(float("-inf")) is None
    assert finite_number(True) is None and finite_number("1") is None
    assert finite_number(3) == 3.0 and finite_number(-0.5) == -0.5


@pytest.mark.reliability(
    scenario="report lines with 400-digit ints, NaN, inf, text, broken JSON: monitor state "
    "ignores them, charts stay finite",
    area="hostile",
)
@settings(max_examples=400, deadline=None)
@given(
    rows=st.lists(
        st.one_of(
            st.tuples(values, values, st.dictionaries(st.sampled_from(["loss", "acc"]), values)),
            raw_tails,
        ),
        min_size=1,
        max_size=12,
    )
)
def test_any_report_values_never_stop_the_monitor_state(rows: list) -> None:
    state = LogState(max_points=8)
    for row in rows:
        line = REPORT_PREFIX + row if isinstance(row, str) else _line(*row)
        assert state.add("rank-0", line) is False or parse_report(line) is None
    state.add("rank-0", "after")
    assert state.buffer[-1] == ("rank-0", "after")
    for series in state.metrics.values():
        assert all(finite_number(x) is not None and finite_number(y) is not None for x, y in series)
    assert state.progress is None or 0.0 <= state.progress <= 1.0
    _assert_finite_chart(state.chart_svg())


def test_extreme_but_finite_values_chart_finitely() -> None:
    state = LogState()
    state.add("rank-0", _line(0, None, {"loss": -1.7e308}))
    state.add("rank-0", _line(1, None, {"loss": 1.7e308}))
    _assert_finite_chart(state.chart_svg())


def test_the_monitor_reader_thread_survives_a_huge_number(comms: object) -> None:  # noqa: F811
    lines = [
        LogRecord("rank-0", _line(1, 0.5, {"loss": HUGE})),
        LogRecord("rank-0", REPORT_PREFIX + '{"step": 2, "metrics": {"loss": NaN}}'),
        LogRecord("rank-0", _line(3, 0.9, {"loss": 0.25})),
        LogRecord("rank-0", "still reading"),
    ]
    mon = JobMonitor(FakeClient(), "job-1", records=lines, poll_status=False).start()
    mon.join(timeout=30)
    assert mon.error is None, mon.error
    assert "still reading" in mon.log.value
    assert mon.state.metrics["loss"] == [(3.0, 0.25)]


def test_report_refuses_an_integer_too_large_with_a_clear_message() -> None:
    with pytest.raises(TypeError, match="too large for a float"):
        report(step=1, loss=HUGE)


# -- the text-mode follower of %%torchtrain, through a real IPython shell and a real job --------


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="text-mode %%torchtrain follows a job that reports a 400-digit int and NaN to the end",
    area="hostile",
)
def test_text_mode_follower_survives_huge_and_nan_reports(tmp_path, monkeypatch, capsys) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.magics.core import KubeflowMagics

    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    sh = InteractiveShell.instance()
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    cell = (
        "%%torchtrain -n 1 -p 1 --out job\n"
        f"print({REPORT_PREFIX!r} + '{{\"step\": 1, \"metrics\": {{\"loss\": ' + '9' * 400 + '}}}}')\n"
        f'print({REPORT_PREFIX!r} + \'{{"step": 2, "progress": NaN, "metrics": {{"loss": NaN}}}}\')\n'
        "print('line after the reports', flush=True)\n"
    )
    try:
        result = sh.run_cell(cell)
        out = capsys.readouterr()
        assert result.success, out.out + out.err
        assert "line after the reports" in out.out
        assert "Traceback" not in out.out + out.err
        assert sh.user_ns["job"].status == "Complete"
    finally:
        for client in magics._clients.values():
            if client.backend_name == "local":
                for j in client.list_jobs():
                    client.delete_job(j.name)
