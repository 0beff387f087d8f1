"""The README's Python examples run as written."""

from __future__ import annotations

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
