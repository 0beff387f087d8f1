"""A job's startup phase: what it is doing before its first line, read from its events.

Pure (no I/O): the local backend passes the events of the job's folder (its supervisor's, the
warm shim's and the ranks' own, see `entrypoint._kfj_phase`), the Kubernetes backend its pods'
states. The monitor (widget and lab) shows the phase from the job's record until the first log
line arrives ("… No output yet."); an ended or suspended job has none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

#: The per-rank events the runner writes, in the order a rank goes through them.
RANK_REASONS = (
    "RankStarted",
    "ImportingFramework",
    "ImportedFramework",
    "Rendezvous",
    "RendezvousDone",
)
_RANK_OBJECT = re.compile(r"^rank-(\d+)$")
_RANK_PREFIX = re.compile(r"^rank \d+: ")
_NODE_PREFIX = re.compile(r"^node-\d+: ")
#: Job states in which a phase can show (never after the job ended, nor while suspended).
ACTIVE = ("Created", "Running")


def _ranks_text(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}–{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}{'es' if word.endswith('s') else 's'}"


def local_phase(
    events: Iterable[Mapping[str, Any]], world_size: int, runner: bool = True, processes: int = 1
) -> str:
    """The phase of a local job's current run from its events (dicts with `reason`, `message`
    and `object`); "" when there is nothing to say.

    While its package environment is built first (the supervisor's InstallingPackages event,
    until InstalledPackages) the phase says that. Only the events since the last resume count
    (a resumed job starts its ranks again). A job
    that does not run kf-jupyter's runner (`runner=False`: a TrainerCommand) has no rank
    events: its phase says only that its `processes` were started, warm or cold.
    """
    run: list[Mapping[str, Any]] = []
    for e in events:
        if e.get("reason") == "Resumed":
            run = []
        else:
            run.append(e)
    installing = ""
    for e in run:
        if e.get("reason") == "InstallingPackages":
            installing = str(e.get("message") or "installing packages")
        elif e.get("reason") in ("InstalledPackages", "PackageInstallFailed"):
            installing = ""
    if installing:
        return f"Package environment: {installing}…"
    n = max(1, int(world_size or 1))
    ranks: dict[int, tuple[str, str]] = {}
    node_warm: dict[str, bool] = {}
    cold_why = ""
    for e in run:
        reason = str(e.get("reason", ""))
        obj = str(e.get("object", "") or "")
        message = str(e.get("message", ""))
        if reason in RANK_REASONS:
            m = _RANK_OBJECT.match(obj)
            if m:
                ranks[int(m.group(1))] = (reason, _RANK_PREFIX.sub("", message))
        elif reason in ("WarmStart", "ColdStart"):
            warm = reason == "WarmStart"
            if obj:
                node_warm[obj] = warm
            if not warm and not cold_why:
                cold_why = _NODE_PREFIX.sub("", message).removeprefix("every node starts cold: ")
    if node_warm and all(node_warm.values()) and not cold_why:
        warmth = "warm"
    elif cold_why:
        warmth = f"cold: {cold_why}"
    else:
        warmth = ""
    if not runner:
        started = any(e.get("reason") == "Running" for e in run)
        what = f"{'Started' if started else 'Starting'} {_plural(max(1, processes), 'process')}"
        return what + (f" ({warmth})" if warmth else "")
    waiting = [r for r, (reason, _) in ranks.items() if reason == "Rendezvous"]
    joined = [r for r, (reason, _) in ranks.items() if reason == "RendezvousDone"]
    importing: dict[str, list[int]] = {}
    for r, (reason, message) in ranks.items():
        if reason == "ImportingFramework":
            importing.setdefault(message, []).append(r)
    parts = []
    if waiting:
        there = len(waiting) + len(joined)
        parts.append(f"Waiting for all {_plural(n, 'rank')} at rendezvous ({there}/{n} there)")
    for what, who in sorted(importing.items(), key=lambda kv: min(kv[1])):
        parts.append(f"{_ranks_text(who)}: {what}…")
    if len(ranks) < n:
        notes = "; ".join(p for p in (warmth, f"{len(ranks)}/{n} up" if ranks else "") if p)
        parts.append(f"Starting {_plural(n, 'rank')}" + (f" ({notes})" if notes else ""))
    if not parts:
        if joined and len(joined) == n:
            parts.append(f"All {_plural(n, 'rank')} joined; running the program")
        else:
            parts.append("Running the program")
    return " · ".join(parts)
