"""Hostile magic lines through a real IPython InteractiveShell: whatever the flags, the cell ends
with nothing, a UsageError (bad flags) or one clear kf-jupyter paragraph — never a raw traceback.
Every training cell carries --dry-run, so nothing runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter.magics.core import KFMagicError, KubeflowMagics

SHELLISH = "$`;|&<>(){}[]'\"\\ \t=,.-_/:@%*?!~#^"
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
FLAGS = [
    "-n", "--num-nodes", "-p", "--num-proc-per-node", "--backend", "--namespace", "--runtime",
    "--name", "--image", "--packages", "--pip-index-url", "--env", "--resources", "--args",
    "--config", "--options", "--max-restarts", "--no-wait", "-o", "--out", "--timeout",
    "--cancel-on-interrupt", "--tail", "-f", "--follow", "--reset", "--", "-",
]  # fmt: skip
MAGICS = ["torchtrain", "mpitrain", "jaxtrain", "xgboosttrain"]
LINE_MAGICS = ["kf_backend", "kf_runtimes", "kf_jobs", "kf_logs", "kf_delete", "kf_config"]

value = st.one_of(
    # any character but line breaks (str.splitlines ends the magic line at them)
    st.text(alphabet=st.characters(codec="utf-8", exclude_characters=LINE_BREAKS), max_size=20),
    st.text(alphabet=SHELLISH + "abcXYZ019", max_size=20),
    st.sampled_from(["$(touch /tmp/kfj-canary)", "`id`", "a;b", "'", '"', "\\", "-1", "0",
                     "1e309", "nan", "local", "kubernetes", "K=V", "=", "cpu=-1", "gpu=x",
                     "../x", "A" * 300, "FOO=$(id)", "PET_NNODES=3", "http://u:p@h/s"]),
)  # fmt: skip
token = st.one_of(st.sampled_from(FLAGS), value)
flag_line = st.lists(token, max_size=8).map(lambda ts: " ".join(ts))


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("hostile-magics")
    mp = pytest.MonkeyPatch()
    mp.setenv("KF_JUPYTER_STATE_DIR", str(tmp / "state"))
    mp.setenv("KUBECONFIG", str(tmp / "no-kubeconfig"))
    mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    sh.kf = magics  # type: ignore[attr-defined]
    yield sh
    mp.undo()


def _shown(sh: Any, result: Any, capsys: Any) -> str:
    out = capsys.readouterr()
    return out.out + out.err


def _check(result: Any, shown: str, line: str) -> None:
    err = result.error_in_exec or result.error_before_exec
    assert err is None or isinstance(err, UsageError | KFMagicError), (
        f"{line!r} -> {type(err).__name__}: {err}"
    )
    assert "Traceback (most recent call last)" not in shown, (line, shown)
    if isinstance(err, KFMagicError):
        assert len(str(err)) > 20 and "\n\n" not in str(err)


@pytest.mark.reliability(
    scenario="arbitrary flag strings to %%torchtrain/%%mpitrain/%%jaxtrain/%%xgboosttrain "
    "--dry-run: a UsageError or one clear paragraph, never a raw traceback",
    area="hostile",
)
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(magic=st.sampled_from(MAGICS), line=flag_line)
def test_training_magic_flags_never_raise_a_raw_traceback(
    shell: Any, capsys: Any, magic: str, line: str
) -> None:
    # --dry-run first: after a standalone `--` the words are the program's arguments
    text = f"%%{magic} --dry-run {line}\nx = 1\nprint(x)\n"
    result = shell.run_cell(text, store_history=False)
    _check(result, _shown(shell, result, capsys), line)


@pytest.mark.reliability(
    scenario="arbitrary arguments to the line magics (%kf_backend, %kf_runtimes, %kf_jobs, "
    "%kf_logs, %kf_delete, %kf_config): a UsageError or a clear message",
    area="hostile",
)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(magic=st.sampled_from(LINE_MAGICS), line=flag_line)
def test_line_magic_arguments_never_raise_a_raw_traceback(
    shell: Any, capsys: Any, magic: str, line: str
) -> None:
    if magic == "kf_backend":
        line = f"local {line}"  # keep the session on the local backend for the next examples
    result = shell.run_cell(f"%{magic} {line}", store_history=False)
    _check(result, _shown(shell, result, capsys), line)
    shell.kf.backend = "local"


def test_state_dir_stays_inside_the_temp_dir(shell: Any) -> None:
    """The property tests above ran against a temp job store, never the user's."""
    import os

    assert Path(os.environ["KF_JUPYTER_STATE_DIR"]).name == "state"
