"""The notebook's working folder, shipped with every job (issue 11: "workspace shipping").

At submit time the folder (the kernel's working directory, or the one given) is walked once:
`.gitignore` files (the folder's own, nested ones, and those of the enclosing git repository
down to the folder), `.kfignore` files (same syntax, read after `.gitignore` at each level) and
the built-in exclusions below decide what is shipped. The result is a `Snapshot`: the list of
files and their sizes. The backends then copy those files (locally, into the job folder) or pack
them into one tar.gz (on a cluster, a ConfigMap owned by the TrainJob); every rank starts in the
copy with it first on `sys.path` (the runner does that, see `entrypoint.py`).

The ignore rules are pure functions (`parse_ignore`, `is_ignored`); only `take_snapshot`,
`archive` and `copy_into` touch the disk.
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ValidationError

#: Default limit on the files shipped (their sizes added up, before compression).
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
#: Measured on the real API server (kube-apiserver 1.20): a ConfigMap's data + binaryData may
#: hold at most 1 MiB ("Too long: must have at most 1048576 bytes"); the archive is one value.
CONFIGMAP_MAX_BYTES = 1_048_576
#: A walk that meets more files than this stops (a home folder, a data lake) with an error.
MAX_FILES = 20_000
#: The variables the runner reads: the unpacked folder (local) or the archive (cluster).
ENV_DIR = "KF_JUPYTER_WORKSPACE"
#: Locally: the folder the ranks run in (the notebook's own, where their outputs land); the
#: snapshot in ENV_DIR still leads sys.path. Unset on a cluster: the ranks start in the snapshot.
ENV_RUN_DIR = "KF_JUPYTER_RUN_DIR"
ENV_ARCHIVE = "KF_JUPYTER_WORKSPACE_ARCHIVE"
#: Where the archive is mounted in the trainer container on a cluster, and its key.
ARCHIVE_KEY = "workspace.tar.gz"
MOUNT_DIR = "/var/run/kf-jupyter/workspace"
ARCHIVE_PATH = f"{MOUNT_DIR}/{ARCHIVE_KEY}"

#: Built-in exclusions (gitignore syntax), read before any `.gitignore`, so a `.kfignore` can
#: bring one back with `!pattern`. Hidden folders cover .git, .venv, .ipynb_checkpoints, caches;
#: credential files stay home (on a cluster the workspace is a ConfigMap, not a Secret).
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".*/",
    ".env",
    ".env.*",
    ".netrc",
    ".pypirc",
    ".git-credentials",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_ed25519*",
    ".DS_Store",
    "__pycache__/",
    "*.py[cod]",
    "node_modules/",
    "venv/",
    "*.egg-info/",
    "*.ipynb",
    "checkpoints/",
    "lightning_logs/",
    "wandb/",
    "mlruns/",
    "*.ckpt",
    "*.pt",
    "*.pth",
    "*.safetensors",
    "*.onnx",
)


@dataclass(frozen=True)
class Workspace:
    """What a job ships of the notebook's folder.

    path: the folder (default: the kernel's working directory when the job is submitted).
    max_bytes: limit on the files' total size before compression (default 4 MiB).
    exclude: extra gitignore-style patterns, applied after `.gitignore` and `.kfignore`.
    """

    path: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    exclude: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.path is not None and not isinstance(self.path, str | os.PathLike):
            raise ValidationError(f"Workspace path must be a folder path, got {self.path!r}.")
        if self.path is not None:
            object.__setattr__(self, "path", os.fspath(self.path))
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int):
            raise ValidationError(
                f"Workspace max_bytes must be a number of bytes, got {self.max_bytes!r}."
            )
        if self.max_bytes <= 0:
            raise ValidationError("Workspace max_bytes must be positive.")
        if isinstance(self.exclude, str):
            object.__setattr__(self, "exclude", (self.exclude,))
        object.__setattr__(self, "exclude", tuple(self.exclude))


def resolve(value: Any) -> Workspace | None:
    """RuntimeConfig.workspace as a Workspace (None/True: the default; False: no workspace)."""
    if value is None or value is True:
        return Workspace()
    if value is False:
        return None
    if isinstance(value, Workspace):
        return value
    if isinstance(value, str | os.PathLike):
        return Workspace(path=os.fspath(value))
    raise ValidationError(
        f"workspace must be a folder path, a Workspace(...), True (the notebook's folder) or "
        f"False (ship nothing), got {type(value).__name__}."
    )


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgKMG]i?[bB]?|[bB])?\s*$")
_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3}


def parse_size(text: str) -> int:
    """'4MiB', '500k', '2MB', '1048576' -> bytes (MiB/KiB/GiB are powers of 1024)."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValidationError(
            f"Invalid size {text!r}: write a number of bytes or one with a unit, e.g. 8MiB, "
            "500KiB, 2MB."
        )
    unit = (m.group(2) or "").lower()
    factor = 1024 ** ("kmg".index(unit[0]) + 1) if "i" in unit else _UNITS[unit[:1]]
    return int(float(m.group(1)) * factor)


def human(n: int) -> str:
    """Bytes as '1.5 MiB' / '12 KiB' / '300 B'."""
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


# ----------------------------------------------------------------------------- ignore rules


@dataclass(frozen=True)
class Rule:
    """One gitignore line: applies below `base` (a folder, '' for the top), maybe negated."""

    base: str
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    text: str


def _glob_to_regex(pat: str) -> str:
    out: list[str] = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            if pat.startswith("**", i):
                before_ok = i == 0 or pat[i - 1] == "/"
                after = pat[i + 2 : i + 3]
                if before_ok and after == "/":
                    out.append("(?:.*/)?")
                    i += 3
                    continue
                if before_ok and i + 2 == n:
                    out.append(".*")
                    i += 2
                    continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pat[i]))
        elif c == "[":
            j = pat.find("]", i + 2 if pat[i + 1 : i + 2] in ("!", "^", "]") else i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pat[i + 1 : j]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse_ignore(text: str, base: str = "") -> list[Rule]:
    """The rules of one ignore file whose folder is `base` (relative, posix, '' for the top)."""
    rules: list[Rule] = []
    for raw in text.splitlines():
        line = raw.rstrip("\n\r")
        # trailing spaces are ignored unless escaped
        while line.endswith(" ") and not line.endswith("\\ "):
            line = line[:-1]
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        body = _glob_to_regex(line)
        prefix = "" if anchored else "(?:.*/)?"
        rules.append(
            Rule(base, re.compile(f"^{prefix}{body}$", re.DOTALL), negate, dir_only, raw.strip())
        )
    return rules


def is_ignored(rules: Sequence[Rule], path: str, is_dir: bool) -> bool:
    """Whether `path` (relative to the top, posix) is ignored: the last matching rule wins."""
    ignored = False
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.base:
            if not path.startswith(rule.base + "/"):
                continue
            rel = path[len(rule.base) + 1 :]
        else:
            rel = path
        if rule.regex.match(rel):
            ignored = not rule.negate
    return ignored


# ----------------------------------------------------------------------------- the snapshot


@dataclass(frozen=True)
class SnapshotFile:
    """One shipped file: its path in the workspace (posix) and size in bytes."""

    path: str
    size: int


@dataclass(frozen=True)
class Snapshot:
    """The files of a workspace as listed at submit time (contents are read when shipped)."""

    root: str
    files: tuple[SnapshotFile, ...]
    max_bytes: int
    skipped: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_bytes(self) -> int:
        """The files' sizes added up."""
        return sum(f.size for f in self.files)

    def summary(self, limit: int = 200) -> dict[str, Any]:
        """A printable form for dry runs (first `limit` files)."""
        files = [f"{f.path} ({human(f.size)})" for f in self.files[:limit]]
        if len(self.files) > limit:
            files.append(f"... and {len(self.files) - limit} more")
        return {
            "folder": self.root,
            "files": files,
            "file_count": len(self.files),
            "bytes": self.total_bytes,
            "size": human(self.total_bytes),
            "limit": human(self.max_bytes),
            "skipped": list(self.skipped[:50]),
        }


def local_outputs(folder: str) -> str:
    """Where a local job's outputs go, as dry runs say it."""
    return (
        f"{folder}: the ranks run in this folder (imports come from the submit-time copy), so "
        "files they write to their working directory appear here as they are written"
    )


#: Where a cluster job's outputs go, as dry runs say it.
CLUSTER_OUTPUTS = (
    "the pod's copy of the folder: files the ranks write there go with the pod; write to a "
    "volume (RuntimePatch) or object storage to keep them"
)


def _too_big(root: str, files: list[SnapshotFile], total: int, limit: int, partial: bool) -> str:
    largest = sorted(files, key=lambda f: -f.size)[:5]
    names = ", ".join(f"{f.path} ({human(f.size)})" for f in largest)
    amount = f"more than {human(total)}" if partial else human(total)
    return (
        f"The workspace {root} (shipped with every job so the ranks can import its modules and "
        f"read its files) holds {amount} in {len(files)}{'+' if partial else ''} files, more "
        f"than the {human(limit)} limit. Largest: {names}. Exclude what the job does not need "
        "in a .kfignore file there (gitignore syntax, e.g. 'data/'), raise the limit "
        "(--workspace-limit 16MiB, or RuntimeConfig(workspace=Workspace(max_bytes=...))), ship "
        "another folder (--workspace DIR), or ship nothing (--no-workspace, or "
        "RuntimeConfig(workspace=False)). Nothing was submitted."
    )


def _git_root(root: Path) -> Path | None:
    for d in (root, *root.parents):
        if (d / ".git").exists():
            return d
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _is_virtualenv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir()


def take_snapshot(
    ws: Workspace, default_dir: str, skip_dirs: Iterable[str | os.PathLike[str]] = ()
) -> Snapshot:
    """List the files a job ships from `ws` (its path, else `default_dir`); check the limit.

    `skip_dirs` are folders never shipped (the local backend's state folder). Raises
    ValidationError when the folder is missing or the files exceed the limit.
    """
    root = Path(os.path.expanduser(ws.path or default_dir)).resolve()
    if not root.is_dir():
        raise ValidationError(
            f"The workspace folder {str(root)!r} does not exist or is not a folder. Give an "
            "existing folder (--workspace DIR, or RuntimeConfig(workspace=...)), or ship "
            "nothing (--no-workspace, or RuntimeConfig(workspace=False))."
        )
    skip = {Path(os.path.expanduser(d)).resolve() for d in skip_dirs}
    # Paths are matched relative to the enclosing git repository, so its .gitignore files from
    # the top down to the workspace apply as git applies them.
    anchor = _git_root(root) or root
    top = root.relative_to(anchor).as_posix()
    top = "" if top == "." else top
    rules = parse_ignore("\n".join(DEFAULT_EXCLUDES), top)
    if anchor != root:
        rules += parse_ignore(_read(anchor / ".git" / "info" / "exclude"), "")
        d = anchor
        for part in Path(top).parts:  # the repository's .gitignore files above the workspace
            base = d.relative_to(anchor).as_posix()
            rules += parse_ignore(_read(d / ".gitignore"), "" if base == "." else base)
            d = d / part
    files: list[SnapshotFile] = []
    skipped: list[str] = []
    total = 0

    def rel_of(p: Path) -> str:
        return p.relative_to(anchor).as_posix()

    def walk(d: Path, rules: list[Rule]) -> None:
        nonlocal total
        base = rel_of(d) if d != anchor else ""
        for name in (".gitignore", ".kfignore"):
            text = _read(d / name)
            if text:
                rules = [*rules, *parse_ignore(text, base)]
        if d == root and ws.exclude:
            rules = [*rules, *parse_ignore("\n".join(ws.exclude), base)]
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            skipped.append(f"{rel_of(d) or '.'}/ (cannot be read: {exc.strerror})")
            return
        for entry in entries:
            p = Path(entry.path)
            rel = rel_of(p)
            shown = p.relative_to(root).as_posix()
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_link = entry.is_symlink()
            except OSError:
                continue
            if is_dir:
                if is_ignored(rules, rel, True):
                    skipped.append(shown + "/")
                elif p.resolve() in skip or _is_virtualenv(p):
                    skipped.append(shown + "/")
                else:
                    walk(p, rules)
                continue
            if is_ignored(rules, rel, False):
                skipped.append(shown)
                continue
            try:
                st = os.stat(p)  # a symlink to a file ships the file it points to
            except OSError:
                skipped.append(shown + " (broken link)")
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append(shown + (" (link to a folder)" if is_link else " (not a file)"))
                continue
            files.append(SnapshotFile(shown, st.st_size))
            total += st.st_size
            if total > ws.max_bytes or len(files) > MAX_FILES:
                raise ValidationError(_too_big(str(root), files, total, ws.max_bytes, True))

    walk(root, rules)
    return Snapshot(str(root), tuple(files), ws.max_bytes, tuple(skipped))


def _check_unchanged_size(snap: Snapshot, total: int) -> None:
    if total > snap.max_bytes:
        raise ValidationError(_too_big(snap.root, [], total, snap.max_bytes, False))


def archive(snap: Snapshot) -> bytes:
    """The snapshot's files as one gzip-compressed tar (read now; modes kept, owners dropped)."""
    import tarfile

    buf = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=9) as tar:
        for f in snap.files:
            path = os.path.join(snap.root, f.path)
            with open(path, "rb") as fh:
                data = fh.read()
            total += len(data)
            info = tarfile.TarInfo(f.path)
            info.size = len(data)
            st = os.stat(path)
            info.mode = _private_mode(st.st_mode)
            info.mtime = int(st.st_mtime)
            tar.addfile(info, io.BytesIO(data))
    _check_unchanged_size(snap, total)
    return buf.getvalue()


def _private_mode(mode: int) -> int:
    """Owner-only: 0700 when the owner may execute it, else 0600 (the job store is private)."""
    return 0o700 if mode & stat.S_IXUSR else 0o600


def copy_into(snap: Snapshot, dest: str | os.PathLike[str]) -> None:
    """Copy the snapshot's files into `dest` (created), as they are now, owner-only."""
    import shutil

    out = Path(dest)
    made: set[Path] = set()

    def folder(d: Path) -> None:
        if d in made:
            return
        if d != out:
            folder(d.parent)
        d.mkdir(mode=0o700, exist_ok=True)
        d.chmod(0o700)  # whatever the umask
        made.add(d)

    for f in snap.files:
        src = os.path.join(snap.root, f.path)
        target = out / f.path
        folder(target.parent)
        shutil.copyfile(src, target, follow_symlinks=True)
        shutil.copystat(src, target, follow_symlinks=True)  # times (and mode, tightened next)
        target.chmod(_private_mode(os.stat(src).st_mode))
    folder(out)


def snapshot_for(
    trainer: Any,
    runtime_config: Any,
    default_dir: str,
    skip_dirs: Iterable[str | os.PathLike[str]] = (),
) -> Snapshot | None:
    """The snapshot a job ships, or None (workspace=False, or the job runs its own command)."""
    if getattr(trainer, "func", None) is None and getattr(trainer, "script", None) is None:
        return None  # no kf-jupyter runner in the job: nothing would enter the workspace
    ws = resolve(getattr(runtime_config, "workspace", None))
    if ws is None:
        return None
    return take_snapshot(ws, default_dir, skip_dirs)
