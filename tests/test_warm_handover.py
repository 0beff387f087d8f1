"""A warm launch handed to the pool by the supervisor itself (issue 21).

When a warm node's command is exactly the script kf-jupyter generated, the job's supervisor
writes its files and sends the launch to the pool directly: no `bash`, `sh` shim or shim
interpreter runs for it. These tests check what a user (or `ps`) can see: the job's events say
it was handed over directly and no such process is under the supervisor while the job runs; a
launch that cannot be handed over (an environment bash acts on) still runs warm through the
shim and its events say why; suspend and cancel still stop every process; the script is
recognised only when it is exactly kf-jupyter's; and the environment handed over is the one
real bash passes on.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import psutil
import pytest

from kf_jupyter import RuntimeConfig, TorchTrainer
from kf_jupyter.backends.local import direct
from kf_jupyter.backends.local.warm.launch import known_launch

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401
from .test_warm_orphans import warm_up


def tree_of_supervisor(out_dir: str, wait_for: str = "") -> str:
    """Rank 0 writes the command lines of every process under the job's supervisor, and the
    node's parent; with `wait_for`, every rank then waits for that file to exist."""
    import json
    import os
    import time

    import psutil

    job_dir = os.path.dirname(os.environ["KF_JUPYTER_RANK_LOG_DIR"])
    if os.environ.get("RANK") == "0":
        with open(os.path.join(job_dir, "status.json")) as fh:
            sup = psutil.Process(int(json.load(fh)["supervisor_pid"]))
        node = psutil.Process(os.getppid())
        under = []
        for p in sup.children(recursive=True):
            try:
                under.append(p.cmdline())
            except (psutil.ZombieProcess, psutil.NoSuchProcess):
                continue  # a process that has just ended (a zombie) is not in the tree
        record = {
            "under_supervisor": under,
            "node_pid": node.pid,
            "node_parent": " ".join(node.parent().cmdline()),
            "bash_env": os.environ.get("FROM_BASH_ENV"),
        }
        with open(os.path.join(out_dir, "tree.json"), "w") as fh:
            json.dump(record, fh)
    while wait_for and not os.path.exists(wait_for):
        time.sleep(0.05)
    return "ok"


def _events(client: Any, name: str) -> list[Any]:
    return list(client.get_job_events(name))


def test_a_warm_job_is_handed_to_the_pool_without_bash_or_the_shim(client, tmp_path):
    warm_up(client, TorchTrainer(func=tree_of_supervisor, func_args={"out_dir": str(tmp_path)},
                                 num_proc_per_node=2))  # fmt: skip
    (tmp_path / "tree.json").unlink()
    name = client.train(
        TorchTrainer(
            func=tree_of_supervisor, func_args={"out_dir": str(tmp_path)}, num_proc_per_node=2
        )
    )
    job = client.wait_for_job_status(name, timeout=180)
    assert job.status == "Complete" and job.warm is True
    tree = json.loads((tmp_path / "tree.json").read_text())
    # Nothing runs under the supervisor: the node is the pool's child, reached without bash,
    # the sh shim or `python -I -S shim.py`.
    assert tree["under_supervisor"] == [], tree
    assert "zygote.py" in tree["node_parent"]
    events = _events(client, name)
    warm = [e.message for e in events if e.reason == "WarmStart"]
    assert len(warm) == 1 and "handed over directly" in warm[0], warm
    assert f"pid {tree['node_pid']}" in warm[0]
    assert not [e for e in events if e.reason in ("WarmViaShim", "ColdStart")]
    status = json.loads((client.backend.job_dir(name) / "status.json").read_text())
    assert status["processes"]["node-0"]["pid"] == tree["node_pid"]
    assert status["processes"]["node-0"]["exit_code"] == 0
    # The same logs as a launch through bash: the node's log and one per rank.
    logs = sorted(p.name for p in (client.backend.job_dir(name) / "logs").iterdir())
    assert logs == ["node-0.log", "rank-0.log", "rank-1.log"]


def test_a_launch_bash_would_change_goes_through_the_shim_and_says_why(client, tmp_path):
    # BASH_ENV is a file bash runs before the script: only bash itself can do what it says.
    rc_file = tmp_path / "bashenv.sh"
    rc_file.write_text("export FROM_BASH_ENV=sourced\n")
    rc = RuntimeConfig(env={"BASH_ENV": str(rc_file)})
    make = lambda: TorchTrainer(  # noqa: E731
        func=tree_of_supervisor, func_args={"out_dir": str(tmp_path)}, num_proc_per_node=2
    )
    name = client.train(make(), runtime_config=rc)
    client.wait_for_job_status(name, timeout=300)
    name = client.train(make(), runtime_config=rc)
    job = client.wait_for_job_status(name, timeout=180)
    assert job.status == "Complete" and job.warm is True
    tree = json.loads((tmp_path / "tree.json").read_text())
    assert tree["bash_env"] == "sourced"  # bash ran it, as a cold start does
    events = _events(client, name)
    via = [e.message for e in events if e.reason == "WarmViaShim"]
    assert len(via) == 1 and "BASH_ENV" in via[0], via
    warm = [e.message for e in events if e.reason == "WarmStart"]
    assert len(warm) == 1 and "handed over directly" not in warm[0]


def test_suspend_and_cancel_stop_a_node_handed_over_directly(client, tmp_path):
    gate = tmp_path / "go"
    make = lambda: TorchTrainer(  # noqa: E731
        func=tree_of_supervisor,
        func_args={"out_dir": str(tmp_path), "wait_for": str(gate)},
        num_proc_per_node=2,
    )
    gate.touch()
    warm_up(client, make())
    gate.unlink()
    (tmp_path / "tree.json").unlink()
    name = client.train(make())
    end = time.monotonic() + 120
    while not (tmp_path / "tree.json").exists() and time.monotonic() < end:
        time.sleep(0.05)
    node = json.loads((tmp_path / "tree.json").read_text())["node_pid"]
    assert any("handed over directly" in e.message for e in _events(client, name))
    procs = [psutil.Process(node), *psutil.Process(node).children()]
    assert len(procs) == 3
    client.suspend_job(name)
    client.wait_for_job_status(name, status={"Suspended"}, timeout=60)
    left = psutil.wait_procs(procs, timeout=10)[1]
    assert not left, left
    (tmp_path / "tree.json").unlink()
    client.resume_job(name)
    end = time.monotonic() + 120
    while not (tmp_path / "tree.json").exists() and time.monotonic() < end:
        time.sleep(0.05)
    node = json.loads((tmp_path / "tree.json").read_text())["node_pid"]
    procs = [psutil.Process(node), *psutil.Process(node).children()]
    client.delete_job(name)
    assert not psutil.wait_procs(procs, timeout=10)[1]
    assert_no_orphans(name)


# ----------------------------------------------------------------------------- no job needed


def _script(client: Any, trainer: Any, rc: RuntimeConfig | None = None) -> list[str]:
    _, plan, _, _ = client.backend._prepare(trainer, None, rc, None)
    return list(plan.processes[0].argv)


def f(a: str = "x") -> str:
    text = 'it\'s "quoted" $HOME `date` \\ end'
    return a + text


def test_only_kf_jupyters_own_script_is_recognised(client):
    env = {"KF_JUPYTER_WORKDIR": "/w/node-0"}
    argv = _script(client, TorchTrainer(func=f, func_args={"a": "o'k $x"}, num_proc_per_node=2))
    launch, why = known_launch(argv, env)
    assert launch is not None, why
    assert launch["argv"] == [
        "torchrun",
        "/w/node-0/kf_entry.py",
        "/w/node-0/kf_func.py",
        "f",
        "/w/node-0/kf_args.json",
        "none",
    ]
    files = dict(launch["files"])
    assert sorted(files) == [
        "/w/node-0/kf_args.json",
        "/w/node-0/kf_entry.py",
        "/w/node-0/kf_func.py",
    ]
    assert "o'k $x" in files["/w/node-0/kf_args.json"]
    assert "$HOME `date`" in files["/w/node-0/kf_func.py"]
    script = argv[2]
    for changed, what in [
        (script.replace("exec torchrun", "exec torchrun $(id)"), "launch line"),
        (script.replace("exec torchrun", "exec mytorchrun"), "program"),
        (script.replace("exec torchrun", "torchrun"), "no exec"),
        (script.replace("set -e\n", "set -e\necho hi\n", 1), "start"),
        (script + "echo after\n", "launcher"),
        (script.replace('umask "$kfj_umask"\n', 'umask "$kfj_umask"\nrm -rf /tmp/x\n'), "launcher"),
        (script.replace("printf '%s' ", "printf '%s'  ", 1), "file"),
    ]:
        got, why = known_launch([argv[0], argv[1], changed], env)
        assert got is None and why, what
    assert known_launch(["sh", "-c", script], env)[0] is None
    assert known_launch(argv, {})[0] is None  # no work directory of its own
    with_packages = _script(
        client, TorchTrainer(func=f), RuntimeConfig(packages_to_install=["inflection"])
    )
    got, why = known_launch(with_packages, env)
    assert got is None and "installs packages" in why


def _bash_env(env: dict[str, str], cwd: str) -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", "set -e\nexec env -0"], env=env, cwd=cwd, capture_output=True, check=True
    ).stdout.decode("utf-8", "surrogateescape")
    return dict(item.split("=", 1) for item in out.split("\0") if item)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"_": "/usr/bin/jupyter", "SHLVL": "2", "OLDPWD": "/"},
        {"PWD": "/nonexistent", "OLDPWD": "/nonexistent", "SHLVL": "07"},
        {"PPID": "1", "RANDOM": "3", "PS1": "$ ", "odd.name": "1", "TAB": "a\tb"},
    ],
)
def test_the_environment_handed_over_is_the_one_bash_passes_on(tmp_path, extra):
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    env = {**base, **extra}
    mine, why = direct.shell_env(env, str(tmp_path))
    assert mine is not None, why
    assert mine == _bash_env(env, str(tmp_path))


@pytest.mark.parametrize("var", ["BASH_ENV", "SHELLOPTS", "IFS", "BASH_FUNC_f%%", "PS4"])
def test_an_environment_bash_acts_on_is_left_to_bash(tmp_path, var):
    env = {"PATH": os.environ["PATH"], var: "x"}
    mine, why = direct.shell_env(env, str(tmp_path))
    assert mine is None and var in why


def test_the_files_are_written_as_the_script_writes_them(tmp_path):
    path = tmp_path / "kf_func.py"
    direct.write_files([[str(path), "print('é')\n"]])
    assert path.read_text(encoding="utf-8") == "print('é')\n"
    assert path.stat().st_mode & 0o777 == 0o600


def test_an_unrecognised_cold_job_needs_no_event(client, tmp_path):
    """A cold job (warm off) is never handed over and says nothing about it."""
    from kf_jupyter.options import Warm

    name = client.train(TorchTrainer(func=f), options=[Warm(False)])
    client.wait_for_job_status(name, timeout=300)
    assert not [e for e in client.get_job_events(name) if e.reason == "WarmViaShim"]


def odd_names() -> dict:
    import os

    return {k: os.environ.get(k) for k in ("A-B", "1X", "X.Y")}


@pytest.mark.reliability(
    scenario="kernel variables whose names are not shell identifiers (A-B, 1X, X.Y): the rank "
    "sees them cold, warm handed over directly and warm through bash and the sh shim",
    area="local",
)
def test_variables_sh_would_drop_reach_the_ranks_on_every_path(client, tmp_path, monkeypatch):
    """Failed before (issue 38): a warm launch through bash and the `#!/bin/sh` shim lost the
    kernel's variables whose names are not shell identifiers (dash drops them); a cold rank and
    one handed over directly kept them. Now all three paths see the same."""
    from kf_jupyter.options import Warm

    want = {"A-B": "1", "1X": "2", "X.Y": "a b=c"}
    for key, value in want.items():
        monkeypatch.setenv(key, value)
    rc_file = tmp_path / "bashenv.sh"
    rc_file.write_text(": nothing\n")
    via_shim = RuntimeConfig(env={"BASH_ENV": str(rc_file)})  # only bash can run it: the shim
    seen = {}
    for path, rc, options in [
        ("cold", None, [Warm(False)]),
        ("direct", None, None),
        ("shim", via_shim, None),
    ]:
        if options is None:
            warm_up(client, TorchTrainer(func=odd_names))
        name = client.train(TorchTrainer(func=odd_names), runtime_config=rc, options=options)
        job = client.wait_for_job_status(name, timeout=300)
        assert job.status == "Complete" and job.warm is (path != "cold"), (path, job)
        reasons = [e.reason for e in client.get_job_events(name)]
        assert ("WarmViaShim" in reasons) is (path == "shim"), (path, reasons)
        seen[path] = client.get_job_result(name)
    assert seen == {"cold": want, "direct": want, "shim": want}
