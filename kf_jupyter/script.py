"""A whole Python program as the job's code: run as `__main__` with its own `sys.argv`.

`TorchTrainer(script="train.py", script_args=["--epochs", "3"])` (and `%torchtrain train.py --
--epochs 3`) ship the file's text the same way a function's source is shipped, and every rank
runs it as `python train.py --epochs 3` would. A training cell without a top-level `return` is
shipped as a `Script` too (see kf_jupyter/magics/cell.py).
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ValidationError

#: The FUNC_NAME that tells the runner to run the file as `__main__` (no function is called).
SCRIPT_FUNC_NAME = "__main__"
_PLACEHOLDER = re.compile(r"\$\{trialParameters\.([^}]*)\}")


@dataclass(frozen=True)
class Script:
    """A program's text and the name it runs under (`sys.argv[0]`, e.g. `train.py`)."""

    source: str
    name: str = "script.py"


def validate_script(script: Any) -> None:
    """`script` is a path (str or os.PathLike) or a `Script`."""
    if isinstance(script, Script):
        if not isinstance(script.source, str) or not isinstance(script.name, str):
            raise ValidationError("Script(source, name) takes two strings: the text and a name.")
        return
    if not isinstance(script, str | os.PathLike) or not os.fspath(script):
        raise ValidationError(
            f"script must be the path of a Python file (for example script='train.py'), got "
            f"{type(script).__name__}."
        )


def validate_script_args(args: Any) -> tuple[str, ...]:
    """`script_args` is a list of strings, as `sys.argv[1:]` is."""
    if args is None:
        return ()
    if isinstance(args, str) or not isinstance(args, Sequence):
        raise ValidationError(
            f"script_args must be a list of strings, as sys.argv[1:] is, for example "
            f"['--epochs', '3'], got {args!r}. (A single string is not split: each list item is "
            "one argument.)"
        )
    for a in args:
        if not isinstance(a, str):
            raise ValidationError(
                f"script_args holds {a!r}, a {type(a).__name__}; every argument is a string "
                f"(write {str(a)!r})."
            )
    return tuple(args)


def fill_parameters(args: Sequence[str], params: Mapping[str, str]) -> list[str]:
    """A sweep trial's arguments: each `${trialParameters.NAME}` (Katib's trial-template
    placeholder) replaced by the trial's value of NAME; other text is left as it is."""

    def value(m: re.Match[str]) -> str:
        return str(params.get(m.group(1), m.group(0)))

    return [_PLACEHOLDER.sub(value, a) for a in args]


def _similar_file(path: str) -> str:
    """` Did you mean 'train.py'?` for a file of the same folder with a close name, else ``."""
    from .errors import did_you_mean

    folder = os.path.dirname(path)
    try:
        names = [e.name for e in os.scandir(folder or ".") if e.is_file()]
    except OSError:
        return ""
    return did_you_mean(path, [os.path.join(folder, n) for n in names])


def load_script(script: str | os.PathLike[str] | Script) -> Script:
    """The program to ship: a `Script` as given, or a file read now (at submit time)."""
    if isinstance(script, Script):
        return script
    path = os.fspath(script)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise ValidationError(
            f"The script {path!r} does not exist (looked in {os.getcwd()!r})."
            f"{_similar_file(path)} Give its path relative to the notebook's folder, or an "
            "absolute path."
        ) from None
    except IsADirectoryError:
        raise ValidationError(f"The script {path!r} is a folder; give a Python file.") from None
    except OSError as exc:
        raise ValidationError(f"The script {path!r} cannot be read ({exc.strerror}).") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        text = raw.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        raise ValidationError(
            f"The script {path!r} is not Python source text ({exc}); save it as UTF-8."
        ) from None
    return Script(text, path)
