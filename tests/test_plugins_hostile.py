"""Plugins that exit at import or take IPython's magic names (issue 38).

The plugin modules are in tests/plugin_broken_pkg (`exits`: argparse parses `sys.argv` at import
and exits; `raises`: a `BaseException` that is not an `Exception`; `shadows`: magics named
`time`, `writefile`, `run`, `load_ext`, `ls`). They are installed here as a real distribution
(`kf-ring-hostile`: a `.dist-info` with its `entry_points.txt` on `sys.path`), so the refusals
name the package as they would for one installed with pip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kf_jupyter import plugins

TESTS = Path(__file__).resolve().parent
PACKAGE = "kf-ring-hostile"
ENTRIES = {
    "exits": "kf_ring_broken.exits:plugin",
    "raises": "kf_ring_broken.raises:plugin",
    "ring": "kf_ring.plugin:plugin",
    "shadow-load-ext": "kf_ring_broken.shadows:load_ext_plugin",
    "shadow-ls": "kf_ring_broken.shadows:ls_plugin",
    "shadow-run": "kf_ring_broken.shadows:run_plugin",
    "shadow-time": "kf_ring_broken.shadows:time_plugin",
    "shadow-writefile": "kf_ring_broken.shadows:writefile_plugin",
}


def _install(root: Path, entries: dict[str, str]) -> list[str]:
    """A `kf-ring-hostile` distribution declaring `entries`; the sys.path entries it needs."""
    info = root / "kf_ring_hostile-0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.3\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entries.items())
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\n{lines}")
    return [str(root), str(TESTS / "plugin_broken_pkg"), str(TESTS / "plugin_pkg")]


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """Install `kf-ring-hostile` with the given entry points; the registry read from it."""

    def use(**entries: str) -> plugins.Registry:
        for p in _install(tmp_path / "site", entries):
            monkeypatch.syspath_prepend(p)
        real = plugins._entry_points

        def ours() -> list:
            return [ep for ep in real() if ep.dist is not None and ep.dist.name == PACKAGE]

        monkeypatch.setattr(plugins, "_entry_points", ours)
        return plugins.reload()

    yield use
    plugins.registry.cache_clear()
    for mod in [m for m in sys.modules if m.startswith("kf_ring")]:
        del sys.modules[mod]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("exits", "raised SystemExit: 2 (a plugin module must not exit or parse sys.argv"),
        ("raises", "raised Abort: the ring is not configured (a plugin module must not exit"),
    ],
)
def test_a_plugin_that_exits_at_import_is_refused_by_package(hostile, entry, says) -> None:
    reg = hostile(**{entry: ENTRIES[entry], "ring": ENTRIES["ring"]})
    assert [p.name for p in reg.plugins] == ["ring"]
    (problem,) = reg.problems
    assert problem.package == PACKAGE
    assert problem.message.startswith(f"kf-jupyter plugin {entry!r} (package {PACKAGE}, ")
    assert says in problem.message
    assert f"pip uninstall {PACKAGE}" in problem.message and "\n" not in problem.message
    assert plugins.trainer_for_magic("ringtrain") is not None  # the rest loaded


@pytest.mark.parametrize("magic", ["time", "writefile", "run", "load_ext"])
def test_a_plugin_may_not_take_an_ipython_magic_name(hostile, magic) -> None:
    import IPython  # noqa: F401 (imported, as in a kernel: the registry checks IPython's names)

    entry = f"shadow-{magic.replace('_', '-')}"
    reg = hostile(**{entry: ENTRIES[entry]})
    assert reg.plugins == [] and plugins.trainer_for_magic(magic) is None
    (problem,) = reg.problems
    assert f"kf-jupyter plugin {entry!r} (package {PACKAGE}" in problem.message
    assert f"its magic %%{magic} has the name of a magic IPython" in problem.message
    assert f"%{magic}, which it would silently replace" in problem.message
    assert "ask the plugin's authors to rename it" in problem.message


CODE = textwrap.dedent(
    """\
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "kf_jupyter")
    print("LOADED", sorted(shell.magics_manager.magics["cell"])[:0] == [])
    for name in ("time", "run", "load_ext", "ls"):
        fn = shell.find_line_magic(name)
        owner = getattr(fn, "__self__", fn)
        print("OWNER", name, type(owner).__module__.split(".")[0])
    print("CELL", shell.find_cell_magic("writefile").__self__.__class__.__name__)
    from kf_jupyter import TrainerClient
    names = [r.name for r in TrainerClient().list_runtimes()]
    print("RUNTIMES", "torch-distributed" in names, "ring-distributed" in names)
    result = shell.run_cell("%%torchtrain --dry-run\\nprint(1)\\n")
    print("DRYRUN", result.success)
    result = shell.run_cell("%%ringtrain -n 2 --dry-run\\nprint(1)\\n")
    print("RINGDRY", result.success)
    """
)


@pytest.mark.reliability(
    scenario="installed plugins that exit at import (argparse: SystemExit 2; another "
    "BaseException) or take IPython's magic names (%time, %%writefile, %run, %load_ext, %ls): "
    "%load_ext kf_jupyter, the runtime list and --dry-run work; one warning naming the package "
    "each; IPython's magics stay IPython's",
    area="hostile",
    tries=1,
)
def test_load_ext_runtimes_and_dry_run_survive_hostile_plugins(tmp_path) -> None:
    """In a fresh interpreter, as a notebook's kernel: `%load_ext kf_jupyter`, the runtime list
    and `--dry-run` work; each hostile plugin is one warning naming its package; IPython's magics
    stay IPython's."""
    path = _install(tmp_path / "site", ENTRIES)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), *path, os.environ.get("PYTHONPATH", "")]),
        "KF_JUPYTER_STATE_DIR": str(tmp_path / "state"),
    }
    out = subprocess.run(
        [sys.executable, "-c", CODE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "LOADED True" in out.stdout
    for name in ("time", "run", "load_ext", "ls"):
        assert f"OWNER {name} IPython" in out.stdout, out.stdout
    assert "CELL OSMagics" in out.stdout
    assert "RUNTIMES True True" in out.stdout
    assert "DRYRUN True" in out.stdout and "RINGDRY True" in out.stdout
    refused = [e for e in ENTRIES if e != "ring"]
    for entry in refused:
        assert f"kf-jupyter plugin {entry!r} (package {PACKAGE}" in out.stderr, entry
    assert out.stderr.count("kf-jupyter plugin ") == len(refused)
    assert "%ls, which it would silently replace" in out.stderr  # a shell alias, not a Magics
    assert "Traceback" not in out.stderr and "usage: kf-ring-exits" in out.stderr
