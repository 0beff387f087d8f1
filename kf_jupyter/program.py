"""Turn a Python function into the container command, byte for byte.

The Kubeflow SDK embeds the source in an unquoted heredoc, so bash rewrites `$VAR`, backticks and
backslashes, and a line `EOM` ends it early. Here every payload (the source, the JSON arguments,
the runner) is one single-quoted shell word written with `printf '%s'`: a single-quoted word has
no expansions at all, and the only character that needs care, `'`, becomes `'\\''`. Any text
without a NUL byte (which no argv can hold) arrives exactly.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import shlex
import textwrap
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .config import mask_secrets
from .errors import ValidationError

#: Linux limits one argv string (MAX_ARG_STRLEN) to 128 KiB; bash -c takes the script as one.
MAX_SCRIPT_BYTES = 131_072 - 1


@dataclass(frozen=True)
class FunctionSource:
    """A function's dedented source and name."""

    source: str
    name: str


def function_source(func: Callable[..., Any]) -> FunctionSource:
    """The dedented source of a named function (a function defined in a notebook cell works)."""
    if not isinstance(func, types.FunctionType):
        raise ValidationError(
            f"func must be a plain Python function defined with 'def', got "
            f"{type(func).__name__}. Wrap the callable in a def."
        )
    if func.__name__ == "<lambda>":
        raise ValidationError(
            "func is a lambda; a job needs a function defined with 'def' so its source can be "
            "shipped. Write 'def train(...):' instead."
        )
    cached = getattr(func, "__kf_source__", None)
    if isinstance(cached, str):
        return FunctionSource(cached, func.__name__)
    try:
        src = inspect.getsource(func)
    except (OSError, TypeError):
        raise ValidationError(
            f"The source of function {func.__name__!r} cannot be found (it was probably "
            "defined with exec or in an interactive console that keeps no source). Define it "
            "in a file, a notebook cell, or use the %%torchtrain cell magics."
        ) from None
    src = textwrap.dedent(src)
    if func.__closure__:
        names = ", ".join(func.__code__.co_freevars)
        raise ValidationError(
            f"Function {func.__name__!r} uses variables of an enclosing function ({names}); "
            "those do not travel with the source. Define it at top level and pass values "
            "through func_args."
        )
    return FunctionSource(_with_futures(src, func), func.__name__)


def _with_futures(src: str, func: types.FunctionType) -> str:
    """`src` with `from __future__ import annotations` first when `func` was compiled under it.

    Its annotations are then strings, as where it was defined; without the import the job would
    evaluate them when it runs the `def` (a NameError for a type imported elsewhere).
    """
    import __future__

    if func.__code__.co_flags & __future__.annotations.compiler_flag:
        return "from __future__ import annotations\n" + src
    return src


def encode_args(func_args: dict[str, Any] | None) -> str:
    """func_args as JSON (the job decodes it and calls the function with **)."""
    try:
        return json.dumps(func_args or {}, allow_nan=True, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            f"func_args cannot be sent as JSON ({exc}); pass numbers, strings, lists and dicts."
        ) from None


#: A line that holds only a comment (the warm pool's agent.py drops the same lines).
COMMENT_LINE = r"(?m)^[ \t]*#.*\n"


@functools.lru_cache(maxsize=1)
def runner_source() -> str:
    """The text of the runner shipped in every job (kf_jupyter/entrypoint.py) without its
    comment-only lines: the runner travels in the job's command, whose one argument holds at
    most 128 KiB, so each byte of comment was a byte less for the training function's source
    (the same code: its syntax tree is unchanged). Read once per process: it is on every
    `train()`'s path, and the package's files do not change under a running kernel."""
    text = resources.files("kf_jupyter").joinpath("entrypoint.py").read_text(encoding="utf-8")
    return re.sub(COMMENT_LINE, "", text)


def quote(text: str) -> str:
    """One single-quoted shell word that stands for exactly `text` (no NUL allowed)."""
    if "\x00" in text:
        raise ValidationError(
            "The function source contains a NUL byte, which no process argument can carry. "
            "Remove it (write '\\x00' inside a string literal instead)."
        )
    return shlex.quote(text)


#: The environment variable holding index URL `i` of a job (see `index_env`).
INDEX_ENV = "KF_JUPYTER_PIP_INDEX_{}"


def index_env(index_urls: Sequence[str]) -> dict[str, str]:
    """The variables that carry the pip index URLs into the job (`KF_JUPYTER_PIP_INDEX_0`, ...).

    Index URLs may hold credentials, so they travel in the environment (owner-only in
    /proc/PID/environ; a SecretRef on a cluster) and never in a command line, which every local
    user can read (`ps`, /proc/PID/cmdline) and every reader of the TrainJob sees.
    """
    return {INDEX_ENV.format(i): url for i, url in enumerate(index_urls)}


def pip_prelude(packages: Sequence[str], index_urls: Sequence[object]) -> str:
    """Shell lines that install packages with pip (extras, several indexes, a missing pip).

    The index URLs are not in the text: pip reads them from PIP_INDEX_URL / PIP_EXTRA_INDEX_URL,
    set for the pip command only from the job's `index_env` variables (only their number is
    used here). Externally managed interpreters (PEP 668, Debian/Ubuntu images) are installed
    into as the Kubeflow SDK does, with PIP_BREAK_SYSTEM_PACKAGES=1 (see docs/decisions.md).
    Skipped when KF_JUPYTER_SKIP_INSTALL is set (the local backend provides the environment).
    It says on stdout that it installs (and, done, how long it took): on a cluster that is the
    job's first log line, so the user sees why the running pod is quiet (docs/decisions.md).
    On failure it prints one line and the tail of pip's log, and exits 1.
    """
    if not packages:
        return ""
    names = [INDEX_ENV.format(i) for i in range(len(index_urls))]
    idx = ""
    if names:
        idx += f'PIP_INDEX_URL="${{{names[0]}}}" '
    if len(names) > 1:
        idx += 'PIP_EXTRA_INDEX_URL="' + " ".join(f"${{{n}}}" for n in names[1:]) + '" '
    args = " ".join(quote(a) for a in packages)
    what = quote(
        "kf-jupyter: pip could not install " + " ".join(packages) + "; the end of pip's log:"
    )
    env = "PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_BREAK_SYSTEM_PACKAGES=1"
    pip = f"{env} {idx}python3 -m pip install --quiet --no-warn-script-location"
    # Where to: the interpreter's site-packages, else the user's (~/.local), else, when neither
    # is writable (non-root with a read-only or missing $HOME: restricted namespaces), a folder
    # in the job's work directory put on PYTHONPATH.
    target = '"$kfj_dir/site-packages"'
    n = len(packages)
    said = quote(
        f"kf-jupyter: installing {n} package{'s' if n != 1 else ''} "
        f"({mask_secrets(', '.join(packages))}) "
        "with pip..."
    )
    return (
        'if [ -z "${KF_JUPYTER_SKIP_INSTALL:-}" ]; then\n'
        # the install announces itself: on a cluster nothing else says why a running pod is
        # quiet (the job's phase reads "The pod is running" there), and this is its first line
        f"  printf '%s\\n' {said}\n"
        "  kfj_t0=$SECONDS\n"
        '  kfj_pip_log="$kfj_dir/pip.log"\n'
        f'  python3 -m pip --version >/dev/null 2>&1 || {env} python3 -m ensurepip --upgrade >"$kfj_pip_log" 2>&1 || true\n'
        f'  if {pip} {args} >>"$kfj_pip_log" 2>&1 || {pip} --user {args} >>"$kfj_pip_log" 2>&1; then :\n'
        f'  elif {pip} --target {target} {args} >>"$kfj_pip_log" 2>&1; then\n'
        f'    export PYTHONPATH={target[:-1]}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        "  else\n"
        f"    printf '%s\\n' {what} >&2\n"
        '    tail -n 25 "$kfj_pip_log" >&2\n'
        "    exit 1\n"
        "  fi\n"
        "  printf 'kf-jupyter: packages installed in %s s; starting the program\\n' "
        '"$((SECONDS - kfj_t0))"\n'
        "fi\n"
    )


#: Printed when no directory the job may write to exists (see `workdir`).
NO_WRITABLE_DIR = (
    "kf-jupyter: this container has no writable directory for the job's files: $TMPDIR (or "
    "/tmp), $HOME, the working directory and /dev/shm are all read-only or missing. The pod "
    "probably runs with securityContext.readOnlyRootFilesystem: true (restricted namespaces "
    "often set it) and a $HOME it may not write. Mount a writable emptyDir volume (for example "
    "at /tmp) with a RuntimePatch that adds it to the pod's volumes and to container node's "
    "volumeMounts, or set TMPDIR in RuntimeConfig(env=...) to a writable mount, and run the "
    "job again."
)


def workdir(subdir: str = "") -> str:
    """Shell lines that set `$kfj_dir`, the job's work directory, and create it.

    KF_JUPYTER_WORKDIR when set (the local backend); else a fresh folder in the first writable
    of $TMPDIR (/tmp), $HOME, the working directory and /dev/shm. When $TMPDIR (/tmp) is not
    writable (a read-only root filesystem), TMPDIR is pointed into the work directory, so
    Python's tempfile, torchrun and pip find one. None writable: one paragraph, exit 1.
    """
    return (
        'kfj_dir="${KF_JUPYTER_WORKDIR:-}"\n'
        'if [ -z "$kfj_dir" ]; then\n'
        '  for kfj_base in "${TMPDIR:-/tmp}" "${HOME:-}" "$PWD" /dev/shm; do\n'
        '    [ -n "$kfj_base" ] && kfj_dir="$(mktemp -d "$kfj_base/kf-jupyter.XXXXXX" 2>/dev/null)" && break\n'
        '    kfj_dir=""\n'
        "  done\n"
        '  if [ -z "$kfj_dir" ]; then\n'
        f"    printf '%s\\n' {quote(NO_WRITABLE_DIR)} >&2\n"
        "    exit 1\n"
        "  fi\n"
        '  case "$kfj_dir" in\n'
        '    "${TMPDIR:-/tmp}"/*) ;;\n'
        '    *) mkdir -p "$kfj_dir/tmp" && export TMPDIR="$kfj_dir/tmp" ;;\n'
        "  esac\n"
        "fi\n" + (f'kfj_dir="$kfj_dir{subdir}"\n' if subdir else "") + 'mkdir -p "$kfj_dir"\n'
    )


def materialise(source: str | None, args_json: str, runner: str | None) -> str:
    """Shell lines that write the payloads into the job's work directory, exactly (after
    `workdir`, which sets `$kfj_dir`); `source=None` writes the runner only, `runner=None`
    the source and args only."""
    files = [("kf_func.py", source), ("kf_args.json", args_json)] if source is not None else []
    if runner is not None:
        files.append(("kf_entry.py", runner))
    return (
        # owner-only (the job store is private whatever the umask); the job keeps its umask
        'kfj_umask="$(umask)"; umask 077\n'
        + "".join(f"printf '%s' {quote(text)} >\"$kfj_dir/{name}\"\n" for name, text in files)
        + 'umask "$kfj_umask"\n'
    )


def runner_invocation(
    func_name: str, setup: str, argv0: str = "", argv: Sequence[str] = ()
) -> list[str]:
    """The runner's arguments after the script path (shell words, already quoted).

    With `argv0` or `argv`, `-- ARGV0 ARG...` follows: the program's `sys.argv` (ARGV0 defaults
    to the shipped file's path, as `python kf_func.py ARG...` would give).
    """
    words = [
        '"$kfj_dir/kf_entry.py"',
        '"$kfj_dir/kf_func.py"',
        quote(func_name),
        '"$kfj_dir/kf_args.json"',
        quote(setup),
    ]
    if argv0 or argv:
        words += ["--", quote(argv0) if argv0 else '"$kfj_dir/kf_func.py"']
        words += [quote(a) for a in argv]
    return words


def check_size(script: str) -> str:
    """Refuse a script larger than one argv string can be."""
    size = len(script.encode("utf-8", "surrogateescape"))
    if size > MAX_SCRIPT_BYTES:
        raise ValidationError(
            f"The generated command is {size} bytes, more than the {MAX_SCRIPT_BYTES} one "
            "process argument can hold. Move large data out of the function (read it from a "
            "file or a volume) and keep the function's source small."
        )
    return script
