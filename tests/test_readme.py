"""The README's Python examples run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = [
    b
    for b in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    if not b.lstrip().startswith("%")
]


def test_readme_has_examples() -> None:
    assert BLOCKS, "README lost its Python example"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.strip().splitlines()[0][:40])
def test_readme_block_runs(block: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(block)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 0, proc.stderr


def test_documentation_list_names_each_doc_once() -> None:
    """The list under "## Documentation": every file of docs/ once, nothing else, no stray line."""
    text = README.read_text()
    section = text.split("## Documentation\n\n", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"^- `(docs/[\w-]+\.md)` — ", section, flags=re.M)
    docs = sorted(f"docs/{p.name}" for p in (README.parent / "docs").glob("*.md"))
    assert sorted(named) == docs, named
    for line in section.splitlines():  # each item, or an indented continuation of one
        assert line.startswith("- `docs/") or line.startswith("  "), line
    # a continuation continues the item above it (the stray line did not)
    items = re.split(r"^- ", section, flags=re.M)[1:]
    assert len(items) == len(named)


NUMBERS = {"five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11}


def test_the_number_of_tutorials_is_right() -> None:
    count = len(list((README.parent / "notebooks").glob("*.ipynb")))
    said = re.findall(r"\b(\w+) tutorial(?:s| notebooks)\b", README.read_text())
    said = [NUMBERS[w] for w in said if w in NUMBERS]
    assert said and set(said) == {count}, (said, count)


def test_no_install_from_an_index_that_does_not_have_it() -> None:
    """kf-jupyter is not on PyPI: the README installs the wheel it says how to build."""
    text = README.read_text()
    assert not re.search(r"pip install (-U )?kf[-_]jupyter\b", text)
    assert "pip install dist/kf_jupyter-" in text


@pytest.mark.slow
def test_the_wheel_commands_build_the_wheel_it_installs(tmp_path: Path) -> None:
    """The README's `pip wheel` line, run as written (into a temporary dist/)."""
    text = README.read_text()
    (build,) = re.findall(r"^\.venv/bin/python -m pip wheel .*$", text, flags=re.M)
    (wheel,) = re.findall(r"^pip install dist/(\S+\.whl)$", text, flags=re.M)
    root = README.parent
    if not (root / "kf_jupyter" / "labextension" / "package.json").exists():
        pytest.fail("the lab extension is not built: run bash scripts/setup.sh")
    argv = build.split()
    argv[0] = sys.executable
    argv[argv.index("dist")] = str(tmp_path / "dist")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (tmp_path / "dist").iterdir()] == [wheel]
