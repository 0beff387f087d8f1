"""Text and HTML renderings used by the magics: dry-run YAML, job and runtime tables."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..config import mask_secrets
from ..constants import LOCAL_UNSUPPORTED_ANNOTATION


def to_yaml(obj: Any) -> str:
    """YAML of a manifest or plan; multi-line strings in `|` block style; secrets masked."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        if "\n" in data:
            # PyYAML falls back to a quoted style itself when block style cannot be exact.
            return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
        return dumper.represent_scalar("tag:yaml.org,2002:str", data)

    _Dumper.add_representer(str, _str)
    text = yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return mask_secrets(text)


def age(created: datetime | None, now: datetime | None = None) -> str:
    """A short age like `42s`, `5m`, `3h`, `2d`."""
    if created is None:
        return "-"
    now = now or datetime.now(UTC)
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    secs = max(0, int((now - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table with aligned columns."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(str(c))) for w, c in zip(widths, row)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def html_table(headers: Sequence[str], rows: Sequence[Sequence[str]], raw_cols: int = 0) -> str:
    """An HTML table; cells are escaped except the last `raw_cols` columns (already HTML)."""
    head = "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in headers)
    body = []
    n = len(headers)
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            text = str(c) if i >= n - raw_cols else html.escape(str(c))
            cells.append(f"<td style='text-align:left'>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        "<table class='kf-jupyter-table'><thead><tr>"
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
    )


JOB_HEADERS = (
    "name",
    "framework",
    "backend",
    "status",
    "progress",
    "nodes",
    "age",
    "start",
    "gpus",
    "cause",
)


def gpu_text(gpus: Any) -> str:
    """Which devices each node holds: `node-0: GPU 0, 1 · node-1: GPU 2, 3` ('-' for none)."""
    parts = [
        f"{node}: GPU {', '.join(str(d.get('index')) for d in devs)}"
        for node, devs in (gpus or {}).items()
        if devs
    ]
    return " · ".join(parts) or "-"


def job_cause(job: Any, width: int = 80) -> str:
    """Why a failed job failed, in one line (`Rank 1: NameError: ...`); '' otherwise."""
    if job.status != "Failed":
        return ""
    failure = getattr(job, "failure", None)
    text = failure.headline() if failure is not None else (job.reason or "")
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def job_rows(jobs: Sequence[Any]) -> list[list[str]]:
    """Rows of the jobs table (name, framework, backend, status, progress, nodes, age,
    warm/cold start, GPUs per node, cause)."""
    from ..progress import progress_text, shape_text
    from ..widgets.static import status_label

    rows = []
    for j in sorted(jobs, key=lambda j: j.creation_time or datetime.min.replace(tzinfo=UTC)):
        nodes = shape_text(j.num_nodes, j.num_proc_per_node)
        progress = progress_text(getattr(j, "trainer_status", None), j.status) or "-"
        status = status_label(j)  # Cancelled, not Failed, for a job the user stopped
        if j.status == "Created" and j.reason:  # why it waits: Queued, Unschedulable, ...
            status = f"{j.status} ({j.reason})"
        warm = getattr(j, "warm", None)
        start = "-" if warm is None else ("warm" if warm else "cold")
        rows.append(
            [
                j.name,
                j.framework or "-",
                j.backend,
                status,
                progress,
                nodes,
                age(j.creation_time),
                start,
                gpu_text(getattr(j, "gpus", None)),
                job_cause(j),
            ]
        )
    return rows


def _mib(value: Any) -> str:
    return "-" if value is None else f"{int(value) / 2**20:.0f} MiB"


POOL_HEADERS = ("framework", "pid", "state", "launches", "forked ahead", "RSS", "held", "fds",
                "python")  # fmt: skip


def _ahead(p: dict[str, Any]) -> str:
    n = int(p.get("spare_processes") or 0)
    if not p.get("alive"):
        return "-"
    if not n:
        return "0"
    return f"{n} ({_mib(p.get('spare_pss_bytes'))})"


def pool_rows(pools: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Rows of the warm-pool table (POOL_HEADERS): `forked ahead` is how many processes the
    pool keeps forked ahead of a job (nodes and their ranks) and their memory (PSS); `held`
    is what counts against `warm_max_memory_mib` (`warm.pool.pool_bytes`: the pool process
    and those processes together, PSS; the pool's USS where PSS cannot be read)."""
    from ..backends.local.warm.pool import pool_bytes

    return [
        [
            str(p.get("framework", "?")),
            str(p.get("pid") or "-"),
            str(p.get("state", "?")) if p.get("alive") else "gone",
            str(p.get("launches", 0)),
            _ahead(p),
            _mib(p.get("rss_bytes")),
            _mib(pool_bytes(p)) if p.get("alive") else "-",
            "-" if p.get("fds") is None else str(p["fds"]),
            str(p.get("python", "")),
        ]
        for p in pools
    ]


def pool_learned_lines(pools: Sequence[dict[str, Any]], limit: int = 12) -> list[str]:
    """What each running pool imports and why: its framework's modules, the modules it learned
    from its jobs (and which job), and those it dropped (and why)."""
    out = []
    for p in pools:
        if not p.get("alive"):
            continue
        learned = p.get("learned") or {}
        mods = learned.get("modules") or {}
        line = f"  {p.get('framework', '?')} pool {p.get('pid')}: preloads "
        line += ", ".join(p.get("preload") or []) or "-"
        if not mods:
            line += "; nothing learned from jobs yet"
        out.append(line)
        jobs: dict[str, list[str]] = {}
        for name in sorted(mods, key=lambda n: (-float(mods[n].get("seconds") or 0), n)):
            jobs.setdefault(str(mods[name].get("job") or "?"), []).append(name)
        for job, names in jobs.items():
            shown = [
                f"{n} ({float(mods[n]['seconds']):.1f} s)" if mods[n].get("seconds") else n
                for n in names[:limit]
            ]
            more = f" and {len(names) - limit} more" if len(names) > limit else ""
            out.append(f"    learned from job {job}: " + ", ".join(shown) + more)
        for kind in ("bad", "skipped"):
            for name, why in sorted((learned.get(kind) or {}).items())[:limit]:
                out.append(f"    not imported: {name}: {why}")
    return out


RUNTIME_HEADERS = ("name", "framework", "policy", "nodes", "image", "note")


def runtime_rows(runtimes: Sequence[Any]) -> list[list[str]]:
    """Rows of the runtimes table."""
    return [
        [
            r.name,
            r.framework,
            r.ml_policy,
            str(r.num_nodes),
            r.image or "-",
            "deprecated"
            if r.deprecated
            else "cluster only"
            if r.annotations.get(LOCAL_UNSUPPORTED_ANNOTATION)
            else (
                "default"
                if r.is_default
                else (f"plugin {r.plugin}" if getattr(r, "plugin", None) else "")
            ),
        ]
        for r in runtimes
    ]
