"""Reading a magic line: the program's arguments after ` -- `, and `-h` / `--help`. Pure."""

from __future__ import annotations

import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.utils.process import arg_split

_HELP = frozenset({"-h", "--help"})


def _separator(line: str) -> int:
    """Index of the first standalone `--` outside quotes, or -1."""
    quote = ""
    i = 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c == "\\":
            i += 2
            continue
        elif c in "'\"":
            quote = c
        elif (
            line.startswith("--", i)
            and (i == 0 or line[i - 1].isspace())
            and (i + 2 == len(line) or line[i + 2].isspace())
        ):
            return i
        i += 1
    return -1


def split_script_args(line: str) -> tuple[str, list[str]]:
    """(flags, sys.argv[1:]) of a magic line `FLAGS -- ARGS`; ARGS are split like a shell line."""
    at = _separator(line)
    if at < 0:
        return line, []
    try:
        return line[:at], shlex.split(line[at + 2 :])
    except ValueError as exc:
        raise UsageError(
            f"Cannot read the program's arguments after ' -- ' ({exc}): close the quotation "
            "mark, or escape a lone quote with a backslash."
        ) from None


def wants_help(line: str) -> bool:
    """The flags ask for help (`-h` or `--help`)."""
    try:
        return any(t in _HELP for t in arg_split(line, strict=False))
    except ValueError:
        return False


def print_help(magic: Any) -> None:
    """Print a magic's usage, flags and description (what `--help` does for a command)."""
    text = magic.parser.format_help()
    lines = [ln for ln in text.splitlines() if ln.strip() != "::"]
    while lines and not lines[0].strip():
        lines.pop(0)
    text = "\n".join(lines).rstrip()
    print(text + "\n  -h, --help            show this help (nothing is run)")
