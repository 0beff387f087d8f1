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

import functools
import io
import os
import re
import stat
import time
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
#: The archive's pax header with the workspace limit: the runner unpacks at most this much.
MAX_BYTES_PAX = "KF_JUPYTER.max_bytes"

#: Built-in exclusions (gitignore syntax), read before any `.gitignore`, so a `.kfignore` can
#: bring one back with `!pattern`. Hidden folders cover .git, .venv, .ipynb_checkpoints, caches,
#: and credential folders (.ssh, .aws, .kube, .docker, .gnupg, .config).
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".*/",
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
#: Credential files by name (gitignore syntax): never shipped unless a `.kfignore` brings one
#: back with `!name`. Files of any name whose content holds key material or a known token
#: format (`SECRET_PATTERNS`) are left out too.
CREDENTIAL_EXCLUDES: tuple[str, ...] = (
    # environment and tool credentials
    ".env", ".env.*", "*.env", ".envrc", ".netrc", "_netrc", ".pgpass", ".my.cnf", ".npmrc",
    ".pypirc", ".git-credentials", ".vault-token", ".s3cfg", ".boto",
    ".dockercfg", ".htpasswd", "htpasswd", ".terraformrc", "terraform.rc", "*.tfstate",
    "*.tfstate.*", "*.tfvars", ".databrickscfg", ".kaggle.json", "kaggle.json", ".huggingface",
    ".wandb", ".netrc.*",
    # shell and REPL histories (commands typed with passwords in them)
    ".*_history", "*_history", ".lesshst", ".viminfo",
    # keys and certificates with keys
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "id_xmss*", "*.pem", "*.key", "*.p12",
    "*.pfx", "*.ppk", "*.jks", "*.keystore", "*.kdbx", "*.gpg", "*.pgp", "*.asc", "*.p8",
    "*.der", "*.crt.key",
    # cluster and cloud credentials
    "kubeconfig", "kubeconfig.*", "*.kubeconfig", "credentials", "credentials.*",
    "*credentials*.json", "client_secret*.json", "service-account*.json",
    "service_account*.json", "*serviceaccount*.json", "application_default_credentials.json",
    "*-sa-key.json", "token.json", "*.token",
    # secrets files of common tools
    "secrets.toml", "secrets.yaml", "secrets.yml", "secrets.json", "secrets.env", "*.secret",
    "*.secrets", ".secrets", "secret.*",
)  # fmt: skip
#: Content that marks a file as a credential, whatever its name (checked on what is read).
SECRET_PATTERNS: tuple[tuple[str, re.Pattern[bytes]], ...] = tuple(
    (what, re.compile(rx))
    for what, rx in (
        ("a private key", rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
        ("a PuTTY private key", rb"PuTTY-User-Key-File-\d+:"),
        ("an AWS access key", rb"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"),
        ("a GitHub token", rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{60,})"),
        ("a GitLab token", rb"\bglpat-[A-Za-z0-9_\-]{20,}"),
        ("a Slack token", rb"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
        ("a Google API key", rb"\bAIza[0-9A-Za-z_\-]{35}\b"),
        ("a Hugging Face token", rb"\bhf_[A-Za-z]{34,}\b"),
        ("an OpenAI or Anthropic key", rb"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{32,}"),
        ("a Stripe key", rb"\b[rs]k_live_[0-9A-Za-z]{24,}"),
        ("an npm token", rb"\bnpm_[A-Za-z0-9]{36}\b"),
        ("a PyPI token", rb"\bpypi-AgE[A-Za-z0-9_\-]{50,}"),
        ("a kubeconfig credential", rb"(?m)^\s*(?:client-key-data:\s*\S{16,}|token:\s*eyJ[\w\-]+\.[\w\-]+\.)"),
        ("a Vault token", rb"\bhv[sb]\.[A-Za-z0-9_\-]{24,}"),
    )
)  # fmt: skip


def secret_kind(data: bytes) -> str:
    """What credential `data` looks like it holds ('' if none of `SECRET_PATTERNS` matches)."""
    for what, rx in SECRET_PATTERNS:
        if rx.search(data):
            return what
    return ""


class WorkspaceSecretWarning(UserWarning):
    """Files that look like credentials were left out of a job's workspace."""


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
    origin: str = ""


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


def parse_ignore(text: str, base: str = "", origin: str = "") -> list[Rule]:
    """The rules of one ignore file whose folder is `base` (relative, posix, '' for the top);
    `origin` names the file (for the dry run's reasons)."""
    # Every job parses the same default and .gitignore texts again: their rules (frozen, with
    # compiled patterns) are kept, keyed by the text itself, so an edited file is parsed anew.
    return list(_parse_ignore_cached(text, base, origin))


@functools.lru_cache(maxsize=256)
def _parse_ignore_cached(text: str, base: str, origin: str) -> tuple[Rule, ...]:
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
            Rule(
                base,
                re.compile(f"^{prefix}{body}$", re.DOTALL),
                negate,
                dir_only,
                raw.strip(),
                origin,
            )
        )
    return tuple(rules)


def is_ignored(rules: Sequence[Rule], path: str, is_dir: bool) -> bool:
    """Whether `path` (relative to the top, posix) is ignored: the last matching rule wins."""
    rule = deciding_rule(rules, path, is_dir)
    return rule is not None and not rule.negate


def deciding_rule(rules: Sequence[Rule], path: str, is_dir: bool) -> Rule | None:
    """The last rule that matches `path` (it decides), or None."""
    found = None
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
            found = rule
    return found


# ----------------------------------------------------------------------------- the snapshot


@dataclass(frozen=True)
class SnapshotFile:
    """One shipped file: its path in the workspace (posix) and size in bytes."""

    path: str
    size: int
    scan: bool = True  # its content is checked for credentials (False: a .kfignore `!` took it)


@dataclass(frozen=True)
class Snapshot:
    """The files of a workspace as listed at submit time (contents are read when shipped).

    skipped: what was left out (paths; folders end in '/'); reasons: (path, why) for each;
    credentials: the paths left out because they look like credentials (by name or content).
    """

    root: str
    files: tuple[SnapshotFile, ...]
    max_bytes: int
    skipped: tuple[str, ...] = field(default_factory=tuple)
    reasons: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    credentials: tuple[str, ...] = field(default_factory=tuple)

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
            "skipped_why": [f"{p}: {why}" for p, why in self.reasons[:100]],
            "credentials": list(self.credentials),
        }

    def secret_warning(self) -> str:
        """One line saying which files were left out as credentials ('' when none were)."""
        if not self.credentials:
            return ""
        why = dict(self.reasons)
        shown = ", ".join(f"{p} ({why.get(p, '')})" for p in self.credentials[:3])
        more = f" and {len(self.credentials) - 3} more" if len(self.credentials) > 3 else ""
        return (
            f"kf-jupyter: {len(self.credentials)} file(s) of the workspace {self.root} look like "
            f"credentials and are not shipped: {shown}{more}; a dry run lists every skipped "
            "file and why (pass credentials as secrets, not files)."
        )


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
    skip_set = {Path(os.path.expanduser(d)).resolve() for d in skip_dirs}
    # Paths are matched relative to the enclosing git repository, so its .gitignore files from
    # the top down to the workspace apply as git applies them.
    anchor = _git_root(root) or root
    top = root.relative_to(anchor).as_posix()
    top = "" if top == "." else top
    rules = parse_ignore("\n".join(DEFAULT_EXCLUDES), top, BUILTIN)
    rules += parse_ignore("\n".join(CREDENTIAL_EXCLUDES), top, CREDENTIAL_NAMES)
    if anchor != root:
        rules += parse_ignore(_read(anchor / ".git" / "info" / "exclude"), "", ".git/info/exclude")
        d = anchor
        for part in Path(top).parts:  # the repository's .gitignore files above the workspace
            base = d.relative_to(anchor).as_posix()
            rules += parse_ignore(
                _read(d / ".gitignore"), "" if base == "." else base, f"{base}/.gitignore"
            )
            d = d / part
    files: list[SnapshotFile] = []
    skipped: list[str] = []
    reasons: list[tuple[str, str]] = []
    credentials: list[str] = []
    total = 0

    def skip(shown: str, why: str, entry: str | None = None, credential: bool = False) -> None:
        skipped.append(entry or shown)
        reasons.append((shown, why))
        if credential:
            credentials.append(shown)

    def excluded(rules: list[Rule], rel: str, is_dir: bool) -> Rule | None:
        rule = deciding_rule(rules, rel, is_dir)
        return rule if rule is not None and not rule.negate else None

    def rule_why(rule: Rule) -> tuple[str, bool]:
        if rule.origin == CREDENTIAL_NAMES:
            return f"a credential file name ('{rule.text}')", True
        return f"excluded by '{rule.text}' ({rule.origin or 'built-in'})", False

    def rel_of(p: Path) -> str:
        return p.relative_to(anchor).as_posix()

    def walk(d: Path, rules: list[Rule]) -> None:
        nonlocal total
        base = rel_of(d) if d != anchor else ""
        for name in (".gitignore", ".kfignore"):
            text = _read(d / name)
            if text:
                origin = f"{base}/{name}" if base else name
                rules = [*rules, *parse_ignore(text, base, origin)]
        if d == root and ws.exclude:
            rules = [*rules, *parse_ignore("\n".join(ws.exclude), base, "Workspace(exclude=...)")]
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            shown = f"{rel_of(d) or '.'}/"
            skip(shown, f"cannot be read: {exc.strerror}", f"{shown} (cannot be read: {exc.strerror})")  # fmt: skip
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
                rule = excluded(rules, rel, True)
                if rule is not None:
                    why, cred = rule_why(rule)
                    skip(shown + "/", why, credential=cred)
                elif p.resolve() in skip_set:
                    skip(shown + "/", "the backend's own state folder")
                elif _is_virtualenv(p):
                    skip(shown + "/", "a virtual environment")
                else:
                    walk(p, rules)
                continue
            rule = deciding_rule(rules, rel, False)
            if rule is not None and not rule.negate:
                why, cred = rule_why(rule)
                skip(shown, why, credential=cred)
                continue
            # A `!` line of the user's own (.kfignore, .gitignore, exclude) ships it as it is.
            chosen = rule is not None and rule.origin not in (BUILTIN, CREDENTIAL_NAMES)
            if is_link:
                target = os.path.realpath(p)
                if not _inside(target, str(root)):
                    skip(shown, "a link out of the workspace (never followed)",
                         shown + " (link out of the workspace)")  # fmt: skip
                    continue
                trel = Path(target).relative_to(anchor).as_posix()
                hit = _excluded_on_the_way(rules, trel)
                if hit is not None and not chosen:
                    why, cred = rule_why(hit)
                    skip(shown, f"a link to {Path(target).relative_to(root).as_posix()}: {why}",
                         credential=cred)  # fmt: skip
                    continue
            try:
                st = os.stat(p)  # a link inside the workspace ships the file it points to
            except OSError:
                skip(shown, "a broken link", shown + " (broken link)")
                continue
            if not stat.S_ISREG(st.st_mode):
                what = "link to a folder" if is_link and stat.S_ISDIR(st.st_mode) else "not a file"
                skip(shown, f"{what}: only regular files ship", f"{shown} ({what})")
                continue
            if total + st.st_size > ws.max_bytes or len(files) >= MAX_FILES:
                files.append(SnapshotFile(shown, st.st_size))
                raise ValidationError(
                    _too_big(str(root), files, total + st.st_size, ws.max_bytes, True)
                )
            if not chosen:
                try:
                    data = read_shipped(str(root), shown, ws.max_bytes - total)
                except _NotShipped as exc:
                    skip(shown, str(exc))
                    continue
                kind = secret_kind(data)
                if kind:
                    skip(shown, f"looks like a credential: {kind}", credential=True)
                    continue
            files.append(SnapshotFile(shown, st.st_size, scan=not chosen))
            total += st.st_size
            if total > ws.max_bytes or len(files) > MAX_FILES:
                raise ValidationError(_too_big(str(root), files, total, ws.max_bytes, True))

    walk(root, rules)
    return Snapshot(
        str(root), tuple(files), ws.max_bytes, tuple(skipped), tuple(reasons), tuple(credentials)
    )


BUILTIN = "built-in exclusions"
CREDENTIAL_NAMES = "credential file names"


class _NotShipped(Exception):
    """A listed file that must not be shipped after all (a link out, not a regular file)."""


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:
        return False


def _excluded_on_the_way(rules: Sequence[Rule], rel: str) -> Rule | None:
    """The rule that excludes `rel` (a file) or one of the folders above it, or None (a
    credential rule first: a link to `.ssh/id_rsa` is a link to a key, not to a hidden folder)."""
    parts = rel.split("/")
    found = [deciding_rule(rules, "/".join(parts[:i]), True) for i in range(1, len(parts))]
    found.append(deciding_rule(rules, rel, False))
    hits = [r for r in found if r is not None and not r.negate]
    hits.sort(key=lambda r: r.origin != CREDENTIAL_NAMES)
    return hits[0] if hits else None


def read_shipped(root: str, rel: str, budget: int) -> bytes:
    """The content of workspace file `rel`, read now: a regular file inside `root` only (a link
    is resolved and must stay inside; no device, FIFO or /proc file), at most `budget` bytes
    actually read (ValidationError past it, whatever its listed size said)."""
    real = os.path.realpath(os.path.join(root, rel))
    if not _inside(real, root):
        raise _NotShipped("a link out of the workspace (never followed)")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _NotShipped(f"cannot be read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotShipped("not a file: only regular files ship")
        chunks: list[bytes] = []
        got = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            got += len(chunk)
            if got > budget:
                raise ValidationError(
                    f"The workspace file {rel} reads as more than the {human(max(budget, 0))} "
                    "left under the workspace limit (its listed size was smaller: it grew, or it "
                    "is a special file). Exclude it in a .kfignore file, or raise the limit. "
                    "Nothing was submitted."
                )
            chunks.append(chunk)
    finally:
        os.close(fd)


def _check_unchanged_size(snap: Snapshot, total: int) -> None:
    if total > snap.max_bytes:
        raise ValidationError(_too_big(snap.root, [], total, snap.max_bytes, False))


def archive(snap: Snapshot) -> bytes:
    """The snapshot's files as one gzip-compressed tar (read now; modes kept, owners dropped)."""
    import tarfile

    buf = io.BytesIO()
    total = 0
    with tarfile.open(
        fileobj=buf,
        mode="w:gz",
        compresslevel=9,
        format=tarfile.PAX_FORMAT,
        # the pod-side unpack's bound (no global header in an empty archive: it would not open)
        pax_headers={MAX_BYTES_PAX: str(snap.max_bytes)} if snap.files else None,
    ) as tar:
        for f in _shipped(snap):
            path = os.path.join(snap.root, f.path)
            data = f.data
            total += len(data)
            info = tarfile.TarInfo(f.path)
            info.size = len(data)
            st = _stat_now(path)
            info.mode = _private_mode(st.st_mode) if st is not None else 0o600
            info.mtime = int(st.st_mtime if st is not None else time.time())
            tar.addfile(info, io.BytesIO(data))
    _check_unchanged_size(snap, total)
    return buf.getvalue()


def _stat_now(path: str) -> os.stat_result | None:
    """The file's stat now; None when it was removed since it was read (what was read ships,
    owner-only, as a file removed during a copy should not fail the job)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _private_mode(mode: int) -> int:
    """Owner-only: 0700 when the owner may execute it, else 0600 (the job store is private)."""
    return 0o700 if mode & stat.S_IXUSR else 0o600


def copy_into(snap: Snapshot, dest: str | os.PathLike[str]) -> None:
    """Copy the snapshot's files into `dest` (created), as they are now, owner-only."""

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

    for f in _shipped(snap):
        src = os.path.join(snap.root, f.path)
        target = out / f.path
        folder(target.parent)
        st = _stat_now(src)
        mode = _private_mode(st.st_mode) if st is not None else 0o600
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(f.data)
        os.chmod(target, mode)  # whatever the umask
        if st is not None:
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    folder(out)


@dataclass(frozen=True)
class _Read:
    path: str
    data: bytes


def _shipped(snap: Snapshot) -> Iterable[_Read]:
    """The snapshot's files read now, within the limit on the bytes actually read; a file that
    has become a link out, a special file, or a credential since the listing is left out (with
    the one-line warning)."""
    import warnings

    left = snap.max_bytes
    late: list[str] = []
    for f in snap.files:
        try:
            data = read_shipped(snap.root, f.path, left)
        except _NotShipped:
            late.append(f.path)
            continue
        if f.scan and secret_kind(data):
            late.append(f.path)
            continue
        left -= len(data)
        yield _Read(f.path, data)
    if late:
        warnings.warn(
            f"kf-jupyter: {len(late)} workspace file(s) changed since they were listed and are "
            "not shipped (removed, or a link out, a special file or a credential now): "
            f"{', '.join(late[:5])}",
            WorkspaceSecretWarning,
            stacklevel=3,
        )


def snapshot_for(
    trainer: Any,
    runtime_config: Any,
    default_dir: str,
    skip_dirs: Iterable[str | os.PathLike[str]] = (),
) -> Snapshot | None:
    """The snapshot a job ships, or None (workspace=False, or the job runs its own command).

    Files that look like credentials are left out with one `WorkspaceSecretWarning` line.
    """
    if getattr(trainer, "func", None) is None and getattr(trainer, "script", None) is None:
        return None  # no kf-jupyter runner in the job: nothing would enter the workspace
    ws = resolve(getattr(runtime_config, "workspace", None))
    if ws is None:
        return None
    snap = take_snapshot(ws, default_dir, skip_dirs)
    warning = snap.secret_warning()
    if warning:
        import warnings

        warnings.warn(warning, WorkspaceSecretWarning, stacklevel=3)
    return snap
