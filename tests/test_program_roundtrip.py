"""The function's source arrives byte for byte, whatever it contains.

Each case builds the real command (`bash -c SCRIPT`) and runs it with bash, with stand-in
`torchrun`/`python3` that do nothing, then compares the file the script wrote with the source.
The Kubeflow SDK's unquoted heredoc fails this for `$VAR`, backticks, backslashes and `EOM`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kf_jupyter import program
from kf_jupyter.policies import Payload, get_policy
from kf_jupyter.policies.mpi import MPIPolicy
from kf_jupyter.trainers import TorchTrainer

BASH = shutil.which("bash") or "/bin/bash"
HAZARDS = [
    "$HOME",
    "${PATH}",
    "$(id)",
    "`id`",
    "\\",
    "\\n",
    "'",
    '"',
    "'\\''",
    "EOM",
    "\nEOM\n",
    "\nEOF\n",
    "KFJ_EOF",
    "\r\n",
    "\r",
    "%s",
    "%%",
    "!",
    "*",
    "~",
    "\t",
    "é漢字🙂",
    "\u202e",
    "\x7f",
    "\x01",
    "\nprintf '%s' 'x' > /tmp/pwn\n",
]

sources = st.lists(
    st.one_of(
        st.sampled_from(HAZARDS),
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    ),
    max_size=12,
).map("".join)


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("shim")
    for tool in ("torchrun", "python3", "mpirun"):
        p = d / tool
        p.write_text("#!/bin/sh\nexit 0\n")
        p.chmod(0o755)
    return d


def _run(script: str, workdir: Path, shim: Path) -> subprocess.CompletedProcess:
    env = {"PATH": f"{shim}:/usr/bin:/bin", "KF_JUPYTER_WORKDIR": str(workdir)}
    return subprocess.run([BASH, "-c", script], env=env, capture_output=True, timeout=30)


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(source=sources, arg=sources)
def test_any_source_arrives_exactly(source: str, arg: str, shim: Path, tmp_path: Path) -> None:
    work = tmp_path / f"w{abs(hash((source, arg)))}"
    args_json = program.encode_args({"text": arg})
    payload = Payload(source, "train", args_json, "RUNNER\n'$x'`y`\n")
    script = get_policy("torch").script(TorchTrainer(), payload)
    proc = _run(script, work, shim)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert (work / "kf_func.py").read_bytes() == source.encode("utf-8")
    assert json.loads((work / "kf_args.json").read_bytes()) == {"text": arg}
    assert (work / "kf_entry.py").read_bytes() == b"RUNNER\n'$x'`y`\n"


@pytest.mark.parametrize("policy", ["mpi", "jax", "xgboost", "plain"])
def test_every_policy_ships_exactly(policy: str, shim: Path, tmp_path: Path) -> None:
    source = "".join(HAZARDS)
    script = get_policy(policy).script(TorchTrainer(), Payload(source, "f", "{}", "R"))
    work = tmp_path / policy
    proc = _run(script, work, shim)
    assert proc.returncode == 0, proc.stderr
    written = list(work.rglob("kf_func.py")) or [work / "kf_func.py"]
    if policy == "mpi":  # the stand-in mpirun does not start ranks: run the script as rank 0
        proc = subprocess.run(
            [BASH, "-c", script, MPIPolicy.RANK_ARG0],
            env={"PATH": f"{shim}:/usr/bin:/bin", "KF_JUPYTER_WORKDIR": str(work)},
            capture_output=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        written = [work / "rank-0" / "kf_func.py"]
    assert written[0].read_bytes() == source.encode()


def test_hazardous_function_runs_with_real_python(tmp_path: Path) -> None:
    """End to end: the runner loads the shipped source and calls it with the JSON arguments."""
    source = (
        "def train(greeting):\n"
        "    text = '''$HOME `id` \\\\ \"q\" 'single'\n"
        "EOM\n"
        "é'''\n"
        "    print(greeting + '|' + text)\n"
        "    return {'len': len(text)}\n"
    )
    payload = Payload(
        source, "train", program.encode_args({"greeting": "$USER"}), program.runner_source()
    )
    script = get_policy("plain").script(TorchTrainer(), payload)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["KF_JUPYTER_WORKDIR"] = str(tmp_path)
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    expected_text = "$HOME `id` \\ \"q\" 'single'\nEOM\né"
    assert proc.stdout.startswith("$USER|" + expected_text)
    assert f'##kf-jupyter:result {{"len": {len(expected_text)}}}' in proc.stdout


def test_nul_byte_is_refused() -> None:
    with pytest.raises(Exception) as info:
        program.quote("a\x00b")
    assert "NUL" in str(info.value)


def test_oversized_script_is_refused() -> None:
    big = "x = '" + "a" * 140_000 + "'\n"
    with pytest.raises(Exception) as info:
        get_policy("torch").script(TorchTrainer(), Payload(big, "f", "{}", "R"))
    assert "more than the" in str(info.value)


def test_the_sdk_heredoc_would_fail_this(shim: Path, tmp_path: Path) -> None:
    """The check has teeth: the Kubeflow SDK's unquoted heredoc rewrites `$HOME` and stops at EOM."""
    source = "a = '$HOME'\nEOM\nb = 1\n"
    sdk_style = (
        f"read -r -d '' SCRIPT << EOM\n{source}\nEOM\nprintf '%s' \"$SCRIPT\" > {tmp_path}/out.py"
    )
    subprocess.run([BASH, "-c", sdk_style], env={"HOME": "/root", "PATH": "/usr/bin:/bin"})
    assert (tmp_path / "out.py").read_bytes() != source.encode()


def test_the_shipped_runner_is_the_runner_without_its_comment_lines() -> None:
    """The runner travels in the job's command (one argument, at most 128 KiB), so its comment
    lines, a byte less each for the function's source, stay home: what a job runs has the same
    syntax tree as kf_jupyter/entrypoint.py, and the warm pool precompiled exactly those bytes
    (a warm rank that missed them compiled the runner again, 5-30 ms)."""
    import ast

    from kf_jupyter.backends.local.warm import agent

    full = (Path(program.__file__).parent / "entrypoint.py").read_text(encoding="utf-8")
    shipped = program.runner_source()
    assert len(shipped) < len(full) - 3000
    assert "\n#" not in shipped and "\n    # " not in shipped
    assert ast.dump(ast.parse(shipped)) == ast.dump(ast.parse(full))
    agent._COMPILED.clear()
    agent._precompile_runner()
    assert list(agent._COMPILED) == [shipped.encode("utf-8")]
