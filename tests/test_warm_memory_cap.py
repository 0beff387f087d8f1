"""The warm pools' memory cap follows the container's memory limit (cgroup v2 or v1) when there
is one (issue 34): a 2 GiB JupyterHub server gets 512 MiB of pools, not the default 4096 MiB."""

from __future__ import annotations

from pathlib import Path

import pytest

from kf_jupyter.backends.local.warm import pool as warm_pool


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"memory.max": "2147483648"}, 2 * 2**30),  # v2
        ({"memory.max": "max"}, None),  # v2, no limit
        ({"memory/memory.limit_in_bytes": "1073741824"}, 2**30),  # v1
        ({"memory/memory.limit_in_bytes": "9223372036854771712"}, None),  # v1, no limit
        ({}, None),  # no cgroup files at all
    ],
)
def test_the_cgroup_memory_limit_is_read_from_v2_or_v1(tmp_path, files, expected):
    for rel, text in files.items():
        _write(tmp_path, rel, text)
    assert warm_pool.cgroup_memory_limit_bytes(str(tmp_path)) == expected


def test_the_pools_cap_is_a_quarter_of_a_2_gib_container(tmp_path):
    _write(tmp_path / "limited", "memory.max", str(2 * 2**30))
    _write(tmp_path / "unlimited", "memory.max", "max")
    assert warm_pool.effective_max_memory_mib(4096, str(tmp_path / "limited")) == 512
    assert warm_pool.effective_max_memory_mib(300, str(tmp_path / "limited")) == 300
    assert warm_pool.effective_max_memory_mib(4096, str(tmp_path / "unlimited")) == 4096
