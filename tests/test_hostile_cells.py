"""Cell sources through the magics: the shipped function is byte for byte what the magics built
from the cell, and it runs; a real local job hashes its own shipped source."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter.magics.cell import build_cell_function
from kf_jupyter.magics.core import KubeflowMagics

HAZARDS = ["$HOME", "`id`", "\\", "'", '"', "EOM", "\r", "é漢🙂", "%s", "'\\''", "${x}", "\t"]

texts = st.lists(
    st.one_of(
        st.sampled_from(HAZARDS),
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    ),
    max_size=8,
).map("".join)


def cell_for(text: str) -> str:
    """A cell whose body holds `text` in a one-line literal and in a multi-line string."""
    return (
        f"one = {text!r}\n"
        f"many = '''{text.replace(chr(92), chr(92) * 2).replace(chr(39), chr(92) + chr(39)).replace(chr(13), chr(92) + 'r')}'''\n"
        "assert one == many, (one, many)\n"
        "return one\n"
    )


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_cell_function_keeps_the_cell_exactly(text: str) -> None:
    cf = build_cell_function(cell_for(text), ())
    ns: dict = {}
    exec(compile(cf.source, "<cell>", "exec"), ns)
    assert ns[cf.name]() == text


SHIP_HASH = (
    "import hashlib, sys\n"
    "src = open(sys._getframe().f_code.co_filename, 'rb').read()\n"
    "print('sha256', hashlib.sha256(src).hexdigest())\n"
)


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    sh = InteractiveShell.instance()
    magics = KubeflowMagics(shell=sh)
    magics.widgets = "off"
    sh.register_magics(magics)
    yield sh
    for client in magics._clients.values():
        for j in client.list_jobs():
            client.delete_job(j.name)


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="Cell source round trip through %%mpitrain, end to end (job hashes its own source)",
    area="hostile",
    tries=4,
)
@settings(
    max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=st.sampled_from(["$HOME `id` \\ ' \" EOM", "\r\né漢🙂 %s ${x}", "\nEOM\n", "plain"]))
def test_local_job_runs_exactly_the_cell(shell, capsys, text: str) -> None:
    body = SHIP_HASH + cell_for(text)
    expected = hashlib.sha256(build_cell_function(body, ()).source.encode()).hexdigest()
    shell.user_ns.pop("job", None)
    result = shell.run_cell(f"%%mpitrain -p 1 -o job\n{body}")
    out = capsys.readouterr().out
    assert result.success, out
    assert f"sha256 {expected}" in out
    assert shell.user_ns["job"].result == text
