"""Recognise a warm job's command as exactly the one kf-jupyter generated (issue 21).

A function job's command is `bash -c SCRIPT`, where SCRIPT (policies/base.py `script`) sets the
work directory, writes the shipped files and `exec`s the launcher (`torchrun` or `python3`). When
the script is exactly that text, what bash would do is known: write those files, owner-only, and
run the launcher with these arguments. `known_launch` reads the script back into that
(the files, the program and its argv) and re-renders it with the same generators
(`program.workdir`, `program.materialise`, `shlex.quote`): any other text, one byte off, is not
recognised, and the job's command runs through bash as before. The supervisor then hands the
launch to the warm pool itself (`direct.py`), without bash, the `sh` shim or the shim's
interpreter on the job's path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from shlex import quote
from typing import Any

from .... import program

#: Programs a launch may be handed over for (the warm pool's launch modes).
PROGRAMS = ("torchrun", "python3")
_SAFE = re.compile(r"[\w@%+=:,./-]+", re.ASCII)  # what shlex.quote leaves bare
_QUOTED = re.compile(r"'[^']*'(?:\"'\"'[^']*')*")  # what shlex.quote writes otherwise
_WORKDIR_WORD = re.compile(r'"\$kfj_dir/([\w.-]+)"', re.ASCII)
_PRINTF = re.compile(r"printf '%s' ")
_FILE_TARGET = re.compile(r' >"\$kfj_dir/([\w.-]+)"\n', re.ASCII)
_MATERIALISE_HEAD = 'kfj_umask="$(umask)"; umask 077\n'
_MATERIALISE_TAIL = 'umask "$kfj_umask"\n'


def _word(text: str, pos: int) -> tuple[str, int] | None:
    """One `shlex.quote` word at `pos`: (its value, where it ends), or None."""
    m = _QUOTED.match(text, pos)
    if m:
        value = m.group(0)[1:-1].replace("'\"'\"'", "'")
        return value, m.end()
    m = _SAFE.match(text, pos)
    if m:
        return m.group(0), m.end()
    return None


def known_launch(argv: list[str], env: Mapping[str, str]) -> tuple[dict[str, Any] | None, str]:
    """({"argv": [...], "files": [[path, text], ...]}, "") when `argv` is a script kf-jupyter
    generated for a launcher the warm pool serves, with the work directory of `env`
    (KF_JUPYTER_WORKDIR) put in; else (None, why not)."""
    if len(argv) != 3 or argv[:2] != ["bash", "-c"]:
        return None, "the job's command is not the `bash -c SCRIPT` kf-jupyter writes"
    workdir = str(env.get("KF_JUPYTER_WORKDIR") or "")
    if not workdir.startswith("/"):
        return None, "the job has no work directory of its own (KF_JUPYTER_WORKDIR)"
    script = argv[2]
    head = "set -e\n" + program.workdir()
    if not script.startswith(head):
        return None, "the job's script is not one kf-jupyter generated (its start differs)"
    pos = len(head)
    files: dict[str, str] = {}
    if script.startswith(_MATERIALISE_HEAD, pos):
        start = pos
        pos += len(_MATERIALISE_HEAD)
        while _PRINTF.match(script, pos):
            word = _word(script, pos + len("printf '%s' "))
            target = _FILE_TARGET.match(script, word[1]) if word else None
            if word is None or target is None:
                return None, "the job's script writes a file in a way kf-jupyter does not"
            files[target.group(1)] = word[0]
            pos = target.end()
        if not script.startswith(_MATERIALISE_TAIL, pos):
            return None, "the job's script writes its files in a way kf-jupyter does not"
        pos += len(_MATERIALISE_TAIL)
        source = files.get("kf_func.py")
        rendered = program.materialise(
            source, files.get("kf_args.json", ""), files.get("kf_entry.py")
        )
        if script[start:pos] != rendered:
            return None, "the job's script writes other files than kf-jupyter's"
    line = script[pos:]
    if not line.endswith("\n") or "\n" in line[:-1]:
        return None, "the job's script runs more than its launcher (e.g. it installs packages)"
    words: list[str] = []
    rendered_words: list[str] = []
    i, end = 0, len(line) - 1
    while i < end:
        m = _WORKDIR_WORD.match(line, i)
        if m:
            words.append(f"{workdir}/{m.group(1)}")
            rendered_words.append(m.group(0))
            i = m.end()
        else:
            word = _word(line, i)
            if word is None:
                return None, "the job's launch line is not one kf-jupyter generated"
            words.append(word[0])
            rendered_words.append(quote(word[0]))
            i = word[1]
        if i < end:
            if line[i] != " ":
                return None, "the job's launch line is not one kf-jupyter generated"
            i += 1
    if " ".join(rendered_words) + "\n" != line:
        return None, "the job's launch line is not one kf-jupyter generated"
    if len(words) < 2 or words[0] != "exec" or words[1] not in PROGRAMS:
        return None, "the job's script does not `exec torchrun` or `exec python3`"
    return (
        {
            "argv": words[1:],
            "files": [[f"{workdir}/{name}", text] for name, text in files.items()],
        },
        "",
    )
