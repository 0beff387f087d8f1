"""The tutorials the nbval run tests: the committed ones, never the user's edits.

`python -m tests.committed_tutorials DEST` (scripts/test.sh) writes the tutorials of notebooks/
into DEST as git has them (the index: committed, or staged by a developer who means it), so
outputs, edits or cells a user saved into notebooks/ (JupyterLab autosaves; scripts/run.sh now
serves the copy in my-tutorials/ instead) neither fail the tests nor get run by nbval. Without
git (a clone without history, an unpacked archive) notebooks/ is taken as it is.
`KF_TEST_NOTEBOOKS=worktree` tests notebooks/ as it is on disk (a developer editing a tutorial).
Each difference is said in one line on stderr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _git(repo: Path, *args: str) -> bytes | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def _tracked(repo: Path) -> list[str] | None:
    """The tracked files under notebooks/, or None when `repo` is not the top of a git checkout."""
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top is None or Path(top.decode().strip()).resolve() != repo.resolve():
        return None
    listed = _git(repo, "ls-files", "-z", "--", "notebooks")
    if listed is None:
        return None
    return sorted(p for p in listed.decode().split("\0") if p)


def export(repo: Path, dest: Path) -> list[str]:
    """Write the tutorials to test into `dest`; return one note per difference from notebooks/."""
    src = repo / "notebooks"
    dest.mkdir(parents=True, exist_ok=True)
    tracked = None if os.environ.get("KF_TEST_NOTEBOOKS") == "worktree" else _tracked(repo)
    if tracked is None:
        for f in sorted(src.iterdir()):
            if not f.name.startswith("."):
                (shutil.copytree if f.is_dir() else shutil.copy2)(f, dest / f.name)
        return []
    notes: list[str] = []
    for rel in tracked:
        data = _git(repo, "show", f":{rel}")
        if data is None:
            raise SystemExit(f"committed_tutorials: git cannot read {rel}")
        out = dest / Path(rel).relative_to("notebooks")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        here = repo / rel
        if not here.is_file() or here.read_bytes() != data:
            notes.append(
                f"test: {rel} differs from the committed version: testing the committed one "
                "(yours is untouched; KF_TEST_NOTEBOOKS=worktree tests it instead)"
            )
    known = {Path(p).relative_to("notebooks").as_posix() for p in tracked}
    for f in sorted(src.rglob("*")):
        rel = f.relative_to(src).as_posix()
        if f.is_file() and rel not in known and not any(p.startswith(".") for p in Path(rel).parts):
            notes.append(f"test: notebooks/{rel} is not committed: not tested")
    return notes


def main(argv: list[str]) -> int:
    """Command line: `python -m tests.committed_tutorials DEST`."""
    if len(argv) != 1:
        print("usage: python -m tests.committed_tutorials DEST", file=sys.stderr)
        return 2
    for note in export(REPO, Path(argv[0])):
        print(note, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
