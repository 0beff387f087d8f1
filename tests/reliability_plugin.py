"""pytest plugin behind docs/reliability.md: per-scenario outcome and how often it was tried.

Tests opt in with ``@pytest.mark.reliability(scenario="...", area="kubernetes|server|hostile|
local")`` (registered in pyproject.toml). Loaded with ``-p tests.reliability_plugin`` by
``bench/reliability_report.py``; it counts, per test, the hypothesis examples run (by wrapping
the test's inner function, as hypothesis' own pytest plugin does), or else the ``tries=`` the
marker declares, and writes one JSON record per test to ``$KF_RELIABILITY_JSON``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

AREAS = ("kubernetes", "server", "hostile", "local")
_RECORDS: dict[str, dict[str, Any]] = {}


def _marker(item: pytest.Item) -> pytest.Mark | None:
    return item.get_closest_marker("reliability")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """Count hypothesis examples of a reliability test while it runs."""
    mark = _marker(item)
    rec = _RECORDS.setdefault(item.nodeid, {"examples": 0}) if mark else None
    inner_holder = getattr(getattr(item, "obj", None), "hypothesis", None)
    original = getattr(inner_holder, "inner_test", None)
    if rec is not None and original is not None:

        def counted(*args: Any, **kwargs: Any) -> Any:
            rec["examples"] += 1
            return original(*args, **kwargs)

        inner_holder.inner_test = counted
    t0 = time.monotonic()
    try:
        yield
    finally:
        if rec is not None:
            rec["seconds"] = rec.get("seconds", 0.0) + time.monotonic() - t0
        if original is not None:
            inner_holder.inner_test = original


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the outcome of each phase (a failed set-up counts as a failure)."""
    rec = _RECORDS.get(report.nodeid)
    if rec is None:
        return
    if report.when == "call" or report.outcome != "passed":
        if report.skipped:
            rec["outcome"] = "skipped"
            rec["reason"] = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
        elif report.failed:
            rec["outcome"] = "failed"
            rec["reason"] = str(report.longreprtext).strip().splitlines()[-1][:300]
        elif "outcome" not in rec:
            rec["outcome"] = "passed"
    for key, value in report.user_properties:
        rec.setdefault("figures", {})[key] = value


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Record the scenario of every selected reliability test (even if it never runs)."""
    for item in items:
        mark = _marker(item)
        if mark is None:
            continue
        area = mark.kwargs.get("area", "")
        if area not in AREAS:
            raise pytest.UsageError(f"{item.nodeid}: reliability area must be one of {AREAS}")
        rec = _RECORDS.setdefault(item.nodeid, {"examples": 0})
        rec.update(
            nodeid=item.nodeid,
            scenario=mark.kwargs.get("scenario", item.name),
            area=area,
            tries=int(mark.kwargs.get("tries", 1)),
            slow=item.get_closest_marker("slow") is not None,
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write the records."""
    out = os.environ.get("KF_RELIABILITY_JSON")
    if out:
        for rec in _RECORDS.values():
            rec.setdefault("outcome", "not run")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(sorted(_RECORDS.values(), key=lambda r: r.get("nodeid", "")), f, indent=1)
