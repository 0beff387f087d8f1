"""Real code runs unchanged (issue 11): argv, scripts, `from __future__`, own set-up, --help.

Fast tests: through a real IPython InteractiveShell and the real generated `bash -c` command,
run by bash with the real runner and Python; only `torchrun`/`mpirun` are stand-ins that run
the command's one process (rank 0). The real frameworks are in test_scripts_local.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kf_jupyter import JAXTrainer, TorchTrainer, XGBoostTrainer, build_trainjob
from kf_jupyter.errors import ValidationError
from kf_jupyter.magics.cell import build_cell_function
from kf_jupyter.own_setup import setup_step
from kf_jupyter.runtimes import Runtime
from kf_jupyter.script import Script

from .test_magics import run, shell  # noqa: F401

ARGPARSE_CELL = '''\
"""A whole training script, as written for `torchrun train.py --epochs 2`."""
import argparse
import sys


def parse():
    p = argparse.ArgumentParser(description="toy")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--name", default="run")
    return p.parse_args()


class Config:
    pass


def main():
    args = parse()
    import pickle

    pickle.dumps(Config())  # a class of the script pickles (it lives in __main__)
    print("ARGV", sys.argv, "EPOCHS", args.epochs, "NAME", args.name, flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def launchers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`torchrun` / `mpirun` stand-ins: run the command's program once, as rank 0."""
    d = tmp_path_factory.mktemp("bin")
    for tool in ("torchrun", "mpirun"):
        p = d / tool
        p.write_text(
            "#!/bin/sh\n"  # mpirun's own options first (--hostfile FILE, -x NAME)
            'while [ "${1#-}" != "$1" ]; do case "$1" in --hostfile|-x) shift 2;; *) shift;; esac; done\n'
            'if [ "$1" = bash ]; then exec "$@"; fi\nexec python3 "$@"\n'
        )
        p.chmod(0o755)
    return d


def run_command(command: list[str], launchers: Path, work: Path, env: dict | None = None):
    """Run a TrainJob's `bash -c SCRIPT` as a container would (python3 = this interpreter)."""
    path = f"{launchers}:{Path(sys.executable).parent}:/usr/bin:/bin"
    full = {"PATH": path, "KF_JUPYTER_WORKDIR": str(work), "HOME": str(work), **(env or {})}
    full["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    return subprocess.run(command, env=full, capture_output=True, text=True, timeout=120)


def dry_run_command(sh, capsys, cell: str) -> list[str]:
    """The TrainJob's command from a --dry-run (a cluster dry run may add the workspace's
    carrier as a second YAML document)."""
    result, out, err = run(sh, capsys, cell)
    assert result.success, out + err
    docs = [d for d in yaml.safe_load_all(out) if d]
    job = next(d for d in docs if d.get("kind") == "TrainJob")
    return job["spec"]["trainer"]["command"]


# -- 1. scripts that parse arguments ----------------------------------------------------------


@pytest.mark.parametrize("backend", ["local", "kubernetes"])
def test_argparse_cell_gets_only_its_own_argv(shell, capsys, launchers, tmp_path, backend):  # noqa: F811
    line = f'%%torchtrain -n 1 -p 2 --backend {backend} --dry-run -- --epochs 2 --name "my run"\n'
    command = dry_run_command(shell, capsys, line + ARGPARSE_CELL)
    assert " -- cell.py --epochs 2 --name 'my run'" in command[2]
    proc = run_command(command, launchers, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ARGV ['cell.py', '--epochs', '2', '--name', 'my run'] EPOCHS 2 NAME my run" in (
        proc.stdout
    )


def test_cell_without_return_runs_as_main_module(launchers, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cell.py").write_text("unrelated = 1\n")  # a file that happens to be there
    cf = build_cell_function(
        "import sys\nprint(__name__, sys.modules['__main__'].__dict__ is globals())\n"
        "print('FILE', __file__)\n"
    )
    assert cf.is_script and cf.script_source.startswith("\n")  # line 1 is the magic line
    trainer = TorchTrainer(script=Script(cf.script_source, "cell.py"))
    job = build_trainjob(trainer, Runtime("torch-distributed", "torch", "torch"))
    proc = run_command(job["spec"]["trainer"]["command"], launchers, tmp_path / "w")
    assert proc.returncode == 0, proc.stderr
    assert "__main__ True" in proc.stdout
    assert "kf_entry" not in proc.stdout
    assert f"FILE {tmp_path}/w/kf_func.py" in proc.stdout  # not the unrelated cell.py


SPAWN_CELL = """\
import multiprocessing as mp
import sys


class Box:
    def __init__(self, v):
        self.v = v


def work(box):
    return box.v * 2


if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:  # as mp.spawn-style examples do
        print("SPAWN", pool.map(work, [Box(1), Box(2)]), sys.argv, flush=True)
"""


def test_spawned_children_find_the_scripts_classes(launchers, tmp_path):
    cf = build_cell_function(SPAWN_CELL)
    trainer = TorchTrainer(script=Script(cf.script_source, "cell.py"), script_args=["--x"])
    job = build_trainjob(trainer, Runtime("torch-distributed", "torch", "torch"))
    proc = run_command(job["spec"]["trainer"]["command"], launchers, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "SPAWN [2, 4] ['cell.py', '--x']" in proc.stdout


def test_cell_with_return_is_still_a_function_and_gets_argv(shell, capsys, launchers, tmp_path):  # noqa: F811
    cell = (
        "%%torchtrain --dry-run -- -v\nimport sys\nprint('ARGV', sys.argv)\nreturn len(sys.argv)\n"
    )
    command = dry_run_command(shell, capsys, cell)
    assert "kf_train_cell" in command[2]
    proc = run_command(command, launchers, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ARGV ['cell.py', '-v']" in proc.stdout
    assert "##kf-jupyter:result 2" in proc.stdout


def test_function_without_script_args_sees_a_clean_argv(launchers, tmp_path):
    def show():
        import sys

        return sys.argv

    job = build_trainjob(TorchTrainer(func=show), Runtime("torch-distributed", "torch", "torch"))
    proc = run_command(job["spec"]["trainer"]["command"], launchers, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f'##kf-jupyter:result ["{tmp_path}/kf_func.py"]' in proc.stdout


def test_function_with_script_args_in_the_python_api(launchers, tmp_path):
    def show():
        import sys

        return sys.argv[1:]

    trainer = TorchTrainer(func=show, script_args=["--lr", "0.1", "$HOME `id`"])
    job = build_trainjob(trainer, Runtime("torch-distributed", "torch", "torch"))
    proc = run_command(job["spec"]["trainer"]["command"], launchers, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert '##kf-jupyter:result ["--lr", "0.1", "$HOME `id`"]' in proc.stdout


def test_sys_exit_in_a_script(launchers, tmp_path):
    rt = Runtime("torch-distributed", "torch", "torch")
    ok = build_trainjob(TorchTrainer(script=Script("import sys\nsys.exit(0)\n", "a.py")), rt)
    assert run_command(ok["spec"]["trainer"]["command"], launchers, tmp_path / "a").returncode == 0
    bad = build_trainjob(TorchTrainer(script=Script("raise SystemExit('bad input')\n", "b.py")), rt)
    proc = run_command(bad["spec"]["trainer"]["command"], launchers, tmp_path / "b")
    assert proc.returncode == 1 and "bad input" in proc.stderr
    # argparse's own error: exit status 2, its message names the program
    src = "import argparse\nargparse.ArgumentParser().parse_args()\n"
    job = build_trainjob(TorchTrainer(script=Script(src, "t.py"), script_args=["--nope"]), rt)
    proc = run_command(job["spec"]["trainer"]["command"], launchers, tmp_path / "c")
    assert proc.returncode == 2
    assert "t.py: error: unrecognized arguments: --nope" in proc.stderr
    assert "kf_args.json" not in proc.stderr


@pytest.mark.parametrize(
    ("bad", "match"),
    [("--epochs 3", "list of strings"), ([3], "every argument is a string"), (5, "list")],
)
def test_bad_script_args_are_clear(bad, match):
    with pytest.raises(ValidationError, match=match):
        TorchTrainer(script="train.py", script_args=bad)


def test_func_and_script_together_is_refused():
    with pytest.raises(ValidationError, match="either func"):
        TorchTrainer(func=print, script="train.py")


# -- 2. the line-magic form and script= --------------------------------------------------------


@pytest.mark.parametrize("magic", ["torchtrain", "mpitrain", "jaxtrain", "xgboosttrain"])
def test_line_magic_ships_the_file_byte_for_byte(
    shell,  # noqa: F811
    capsys,
    tmp_path,
    launchers,
    magic,
    monkeypatch,
):
    src = (
        "# é漢字 $HOME `id` '\\''\nimport sys\nimport helper_mod\n"
        "print('ARGV', sys.argv, 'HELPER', helper_mod.VALUE, __file__)\n"
    )
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "train.py"
    script.write_bytes(src.encode())
    (tmp_path / "scripts" / "helper_mod.py").write_text("VALUE = 42\n")  # next to the script
    (tmp_path / "cell.py").write_text("unrelated = 1\n")
    monkeypatch.chdir(tmp_path)  # the kernel's folder: the notebook's
    command = dry_run_command(
        shell, capsys, f"%{magic} scripts/train.py --dry-run -- --epochs 3 'a b'"
    )
    assert " __main__ " in command[2] and "-- scripts/train.py --epochs 3 " in command[2]
    work = tmp_path / f"w-{magic}"
    proc = run_command(command, launchers, work)
    assert proc.returncode == 0, proc.stderr
    shipped = next(work.rglob("kf_func.py"))
    assert shipped.read_bytes() == src.encode()
    # sys.argv[0] is the path as given; from the folder it names, __file__ is that file
    assert f"ARGV ['scripts/train.py', '--epochs', '3', 'a b'] HELPER 42 {script}" in proc.stdout


def test_script_is_read_at_submit_time_and_missing_file_is_clear(tmp_path):
    path = tmp_path / "t.py"
    path.write_text("print(1)\n")
    trainer = TorchTrainer(script=str(path))
    path.write_text("print(2)\n")  # edited after the trainer was made, before submitting
    job = build_trainjob(trainer, Runtime("torch-distributed", "torch", "torch"))
    assert "print(2)" in job["spec"]["trainer"]["command"][2]
    with pytest.raises(ValidationError, match="does not exist"):
        build_trainjob(
            TorchTrainer(script=str(tmp_path / "nope.py")),
            Runtime("torch-distributed", "torch", "torch"),
        )


def test_line_and_cell_forms_are_told_apart(shell, capsys):  # noqa: F811
    result, out, err = run(shell, capsys, "%torchtrain -n 2")
    assert not result.success and "needs a Python file" in out + err
    result, out, err = run(shell, capsys, "%%torchtrain train.py\nprint(1)\n")
    assert not result.success and "takes no script path" in out + err


# -- 3. from __future__ ----------------------------------------------------------------------

FUTURE_SCRIPT = """\
# a comment first
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Point:
    x: int
    nxt: Point | None = None   # a forward reference: needs the future import


print("POINT", Point(1, Point(2)).nxt.x)
"""


@pytest.mark.parametrize("backend", ["local", "kubernetes"])
@pytest.mark.parametrize("ending", ["", "return Point(3).x\n"])
def test_future_import_at_the_top_of_a_cell(shell, capsys, launchers, tmp_path, backend, ending):  # noqa: F811
    cell = f"%%torchtrain --backend {backend} --dry-run\n" + FUTURE_SCRIPT + ending
    command = dry_run_command(shell, capsys, cell)
    proc = run_command(command, launchers, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "POINT 2" in proc.stdout
    if ending:
        assert "##kf-jupyter:result 3" in proc.stdout


def test_hoisting_keeps_the_cells_line_numbers():
    body = '"""doc"""\nfrom __future__ import annotations\nimport os\nreturn os.sep\n'
    cf = build_cell_function(body)
    assert not cf.is_script
    lines = cf.source.split("\n")
    assert lines[0] == "from __future__ import annotations"  # the magic line's slot
    # JupyterLab line N of the cell (magic line = 1) is line N of the generated source
    assert lines[3 - 1] == "def kf_train_cell():" and lines[4 - 1] == "    import os"
    script = build_cell_function(body.replace("return os.sep", "print(os.sep)"))
    assert script.script_source.split("\n")[5 - 1] == "print(os.sep)"


def test_future_import_after_code_is_still_a_syntax_error_at_its_line():
    with pytest.raises(ValidationError) as info:
        build_cell_function("import os\nfrom __future__ import annotations\n")
    assert "must occur at the beginning" in str(info.value)
    assert "\n    from __future__ import annotations\n    ^" in str(info.value)


# -- 4. own framework set-up -----------------------------------------------------------------

KUBEFLOW_XGB = textwrap.dedent(
    """\
    import os
    import xgboost as xgb
    from xgboost import collective as coll
    from xgboost.tracker import RabitTracker

    rank = int(os.environ["DMLC_TASK_ID"])
    tracker = None
    if rank == 0:
        tracker = RabitTracker(host_ip="0.0.0.0", n_workers=2, port=29500)
        tracker.start()
    with coll.CommunicatorContext(dmlc_tracker_uri="x", dmlc_tracker_port=29500):
        pass
    """
)


@pytest.mark.parametrize(
    ("step", "source", "expected"),
    [
        ("xgboost", KUBEFLOW_XGB, "none"),
        ("xgboost", "import xgboost as xgb\nxgb.collective.init(dmlc_task_id='0')\n", "none"),
        ("xgboost", "import xgboost as xgb\nxgb.train({}, None)\n", "xgboost"),
        ("jax", "import jax\njax.distributed.initialize()\n", "jax-own"),
        ("jax", "from jax.distributed import initialize\ninitialize('h:1', 2, 0)\n", "jax-own"),
        ("jax", "import jax\nprint(jax.devices())\n", "jax"),
        ("none", KUBEFLOW_XGB, "none"),
    ],
)
def test_own_setup_is_detected(step, source, expected):
    assert setup_step(step, source) == expected


def test_generated_command_steps_aside_for_own_setup():
    rt_x = Runtime("xgboost-distributed", "xgboost", "xgboost")
    rt_j = Runtime("jax-distributed", "jax", "jax")

    def cmd(trainer, rt):
        return build_trainjob(trainer, rt)["spec"]["trainer"]["command"][2]

    assert '.json" none --' in cmd(XGBoostTrainer(script=Script(KUBEFLOW_XGB, "x.py")), rt_x)
    assert '.json" xgboost' in cmd(XGBoostTrainer(script=Script("print(1)\n", "x.py")), rt_x)
    assert '.json" none' in cmd(
        XGBoostTrainer(script=Script("print(1)\n", "x.py"), setup_collective=False), rt_x
    )
    own = "import jax\njax.distributed.initialize()\n"
    assert '.json" jax-own --' in cmd(JAXTrainer(script=Script(own, "j.py")), rt_j)
    assert '.json" none' in cmd(
        JAXTrainer(script=Script(own, "j.py"), initialize_distributed=False), rt_j
    )


@pytest.mark.parametrize(("magic", "word"), [("jaxtrain", "none"), ("xgboosttrain", "none")])
def test_no_setup_flag(shell, capsys, magic, word):  # noqa: F811
    command = dry_run_command(shell, capsys, f"%%{magic} --no-setup --dry-run\nprint(1)\n")
    assert f'.json" {word} -- cell.py' in command[2]
    result, out, err = run(shell, capsys, "%%torchtrain --no-setup --dry-run\nprint(1)\n")
    assert not result.success and "--no-setup" in out + err  # torch has no built-in set-up


# -- 5. --help -------------------------------------------------------------------------------


def _every_magic_line() -> list[str]:
    """`--help` / `-h` for every magic KubeflowMagics registers (new ones are covered too)."""
    from kf_jupyter.magics.core import KubeflowMagics

    lines = [f"%{name} --help" for name in KubeflowMagics.magics["line"]]
    lines += [f"%%{name} -h\nprint(1)\n" for name in KubeflowMagics.magics["cell"]]
    return [*lines, "%%xgboosttrain -n 2 --help\nprint(1)\n", "%kf_logs -h"]


@pytest.mark.parametrize("line", _every_magic_line())
def test_help_prints_the_usage(shell, capsys, line):  # noqa: F811
    result, out, err = run(shell, capsys, line)
    name = line.lstrip("%").split()[0]
    assert result.success, out + err
    assert "UsageError" not in out + err
    assert f"%{name}" in out and "usage" not in err.lower()
    assert "--" in out
    assert shell.kf.client("local").list_jobs() == []


def test_training_help_explains_both_forms(shell, capsys):  # noqa: F811
    _, out, _ = run(shell, capsys, "%%torchtrain --help\nprint(1)\n")
    assert "-p NUM_PROC_PER_NODE" in out and "script" in out
    assert "%torchtrain train.py" in out and " -- " in out
    _, out, _ = run(shell, capsys, "%%xgboosttrain --help\nprint(1)\n")
    assert "--no-setup" in out


@pytest.mark.parametrize(
    ("line", "flags", "argv"),
    [
        ("-n 2 -- --epochs 3", "-n 2 ", ["--epochs", "3"]),
        ("-n 2", "-n 2", []),
        ('--env "A= -- B" -- x', '--env "A= -- B" ', ["x"]),
        ("--env A=x--y -- 'a b' c\\ d", "--env A=x--y ", ["a b", "c d"]),
        ("-- --", "", ["--"]),
        ("--", "", []),
    ],
)
def test_separator_is_found_outside_quotes(line, flags, argv):
    from kf_jupyter.magics.lineargs import split_script_args

    assert split_script_args(line) == (flags, argv)


def test_args_become_globals_of_a_script_cell(shell, capsys, launchers, tmp_path):  # noqa: F811
    shell.user_ns["lr"] = 0.25
    cell = "%%torchtrain --args lr --dry-run\ndef show():\n    print('LR', lr)\nshow()\n"
    proc = run_command(dry_run_command(shell, capsys, cell), launchers, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "LR 0.25" in proc.stdout


def test_script_args_after_the_separator_are_not_flags(shell, capsys):  # noqa: F811
    # `--help` and `-n` after ` -- ` belong to the program, not the magic
    command = dry_run_command(shell, capsys, "%%torchtrain --dry-run -- --help -n 5\nprint(1)\n")
    assert "-- cell.py --help -n 5" in command[2]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    argv=st.lists(
        st.one_of(
            st.sampled_from(["--", "-h", "$HOME", "`id`", "'", '"', "\\", "a b", "", "\n", "é"]),
            st.text(
                alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
            ),
        ),
        max_size=6,
    )
)
def test_any_script_args_arrive_exactly(argv, launchers, tmp_path_factory):
    src = "import json, sys\nprint('ARGV=' + json.dumps(sys.argv))\n"
    trainer = TorchTrainer(script=Script(src, "p.py"), script_args=argv)
    job = build_trainjob(trainer, Runtime("torch-distributed", "torch", "torch"))
    proc = run_command(job["spec"]["trainer"]["command"], launchers, tmp_path_factory.mktemp("a"))
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.split("\n") if ln.startswith("ARGV="))
    assert json.loads(line[5:]) == ["p.py", *argv]


def test_python_api_function_defined_under_postponed_annotations(launchers, tmp_path, monkeypatch):
    # A function imported from the user's module, which uses postponed annotations: the
    # annotation names a type the job does not have (imported only for type checking).
    (tmp_path / "mytrain.py").write_text(
        "from __future__ import annotations\n"
        "\n"
        "def train(cfg: NotInTheJob | None = None) -> Result:\n"
        "    return train.__annotations__['cfg']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    train = importlib.import_module("mytrain").train
    job = build_trainjob(TorchTrainer(func=train), Runtime("torch-distributed", "torch", "torch"))
    proc = run_command(job["spec"]["trainer"]["command"], launchers, tmp_path / "w")
    assert proc.returncode == 0, proc.stderr
    assert '##kf-jupyter:result "NotInTheJob | None"' in proc.stdout


def test_script_jobs_keep_index_credentials_out_of_the_command():
    from kf_jupyter import RuntimeConfig

    rc = RuntimeConfig(
        packages_to_install=["numpy"], pip_index_urls=["https://u:s3cret@pypi.example.com/simple"]
    )
    trainer = TorchTrainer(script=Script("print(1)\n", "t.py"))
    job = build_trainjob(trainer, Runtime("torch-distributed", "torch", "torch"), rc)
    assert "s3cret" not in job["spec"]["trainer"]["command"][2]
    assert {"name": "KF_JUPYTER_PIP_INDEX_0", "value": rc.index_urls[0]} in job["spec"]["trainer"][
        "env"
    ]


def test_a_job_name_longer_than_any_file_name_is_simply_not_found(shell, capsys):  # noqa: F811
    # Found by the hostile-magics property once ` -- ` let its cells really run (a job store
    # existed): the store's stat() raised "File name too long" instead of "no such job".
    run(shell, capsys, "%%torchtrain --dry-run\nprint(1)\n")
    shell.kf.client("local").backend.jobs_dir.mkdir(parents=True, exist_ok=True)
    result, out, err = run(shell, capsys, "%kf_logs " + "A" * 300)
    assert not result.success and "No local job named" in out + err
    assert "File name too long" not in out + err


# -- 3. a script knows its own file (issue 39: Hydra, inspect) ---------------------------------

HYDRA_SCRIPT = '''\
"""Shaped like PyTorch's minGPT-ddp main.py: Hydra finds its config next to the script."""
import inspect
import os

import hydra
from omegaconf import DictConfig


def where():
    return inspect.getfile(where)


@hydra.main(version_base=None, config_path=".", config_name="gpt2_train_cfg")
def main(cfg: DictConfig):
    rank = os.environ.get("RANK", "0")
    print("RANK", rank, "EPOCHS", cfg.trainer_config.max_epochs, "CODE", where(), flush=True)


if __name__ == "__main__":
    main()
'''
HYDRA_CONFIG = "trainer_config:\n  max_epochs: 10\n  batch_size: 216\n"


def hydra_folder(root: Path) -> Path:
    """A notebook folder with the Hydra program and its config in `gpt/`."""
    (root / "gpt").mkdir(parents=True)
    (root / "gpt" / "main.py").write_text(HYDRA_SCRIPT)
    (root / "gpt" / "gpt2_train_cfg.yaml").write_text(HYDRA_CONFIG)
    return root / "gpt" / "main.py"


@pytest.mark.parametrize("backend", ["local", "kubernetes"])
def test_script_code_carries_its_own_path_for_hydra(
    shell,  # noqa: F811
    capsys,
    tmp_path,
    launchers,
    monkeypatch,
    backend,
):
    pytest.importorskip("hydra")
    script = hydra_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    command = dry_run_command(
        shell,
        capsys,
        f"%torchtrain gpt/main.py --backend {backend} --dry-run -- trainer_config.max_epochs=3",
    )
    proc = run_command(command, launchers, tmp_path / "work")
    assert proc.returncode == 0, proc.stderr
    # Hydra read gpt/gpt2_train_cfg.yaml (with the override), and the code's file is the script
    assert f"RANK 0 EPOCHS 3 CODE {script}" in proc.stdout
    # a failure in a script is still shown by the name it was given, not its full path
    (tmp_path / "gpt" / "broken.py").write_text("def f():\n    raise ValueError('bad')\n\n\nf()\n")
    command = dry_run_command(
        shell, capsys, f"%torchtrain gpt/broken.py --backend {backend} --dry-run"
    )
    proc = run_command(command, launchers, tmp_path / "work2")
    assert proc.returncode != 0
    assert 'File "gpt/broken.py", line 2, in f' in proc.stderr, proc.stderr
