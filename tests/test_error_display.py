"""Errors a new user meets in the first hour say what is wrong (issue 22).

- A failed job's error keeps the user's innermost frames and the exception when the message is
  long (JAX and NumPy print arrays) or the stack is deep: the message is trimmed instead.
- A mistyped runtime name or script file gets "Did you mean ...?".
- Lightning's `devices=N` / `num_nodes=N` that do not match the job's shape stop the submit, as
  do Accelerate's `notebook_launcher(..., num_processes=N)` in a cell, an `accelerate launch
  --num_processes N` command and a `ParallelismConfig` whose sizes do not make the job's processes.
- `--resources 'cpu=2,memory=2 GB'` (quoted, as in a shell) is read without the quotes and the
  spaced unit says what to write.

Fast: the real runner as a subprocess, the magics in a real InteractiveShell, the pure checks.
Slow: a notebook run by nbclient in a real kernel, its job on the local backend.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter import Runtime, TorchTrainer, build_trainjob, own_setup
from kf_jupyter.errors import RuntimeNotFoundError, ValidationError
from kf_jupyter.failure import (
    failure_from_dict,
    failure_from_pods,
    failure_text,
    parse_error_record,
)
from kf_jupyter.magics.cell import build_cell_function
from kf_jupyter.magics.core import KubeflowMagics
from kf_jupyter.own_setup import lightning_count_mismatch
from kf_jupyter.runtimes import resolve_runtime
from kf_jupyter.script import load_script

RUNNER = Path(__file__).resolve().parents[1] / "kf_jupyter" / "entrypoint.py"

# The cell as JupyterLab numbers it: line 1 is the magic, so `check(batch)` is line 6.
LONG_MESSAGE_CELL = """\
def check(batch):
    rows = "\\n".join(f"[{i:4d} {i + 1:4d} {i + 2:4d}]" for i in range(300))
    raise ValueError(f"batch has the wrong shape:\\n{rows}")

check([1, 2])
"""


def _run_in_runner(tmp_path: Path, cell: str, term: Path | None = None) -> str:
    fn = build_cell_function(cell)
    (tmp_path / "kf_func.py").write_text(fn.source)
    (tmp_path / "kf_args.json").write_text("{}")
    runner = tmp_path / "kf_entry.py"  # not from the package folder: its types.py would shadow
    runner.write_text(RUNNER.read_text())
    env = {**os.environ, "RANK": "1", "KF_JUPYTER_TERMINATION_LOG": str(term or "")}
    env.pop("KF_JUPYTER_RANK_LOG_DIR", None)
    done = subprocess.run(
        [sys.executable, str(runner), str(tmp_path / "kf_func.py"), fn.name,
         str(tmp_path / "kf_args.json"), "none"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    return done.stderr


def test_a_long_message_keeps_the_users_line_and_the_exception(tmp_path):
    stderr = _run_in_runner(tmp_path, LONG_MESSAGE_CELL)
    # The log keeps everything: all 300 rows of the message.
    assert "[ 299  300  301]" in stderr
    failure = failure_from_dict(parse_error_record(stderr.splitlines()[-1]))
    assert failure is not None
    text = failure_text(failure)
    lines = text.splitlines()
    assert len(lines) <= 41, text
    assert lines[0] == "Rank 1 failed: ValueError: batch has the wrong shape: \u2026"
    assert '  File "<training cell>", line 6, in kf_train_cell' in lines
    assert "    check([1, 2])" in lines
    assert '  File "<training cell>", line 4, in check' in lines
    assert "ValueError: batch has the wrong shape:" in lines
    assert "[   0    1    2]" in lines  # the start of the message
    assert any("more lines of the message" in ln for ln in lines)
    assert "[ 299  300  301]" not in text


def test_a_deep_library_stack_keeps_the_users_innermost_frame():
    tb = ["Traceback (most recent call last):"]
    tb += ['  File "<training cell>", line 9, in kf_train_cell', "    model.fit(x)"]
    for i in range(60):
        tb += [f'  File "/usr/lib/python3/site-packages/jax/_src/core{i}.py", line {i}, in f{i}']
        tb += [f"    return g{i}(x)"]
    tb += ["TypeError: mul got incompatible shapes for broadcasting: (3, 4), (5,)."]
    failure = failure_from_dict(
        {"source": "Rank 0", "exc_type": "TypeError", "message": "mul got ...", "traceback": tb}
    )
    assert failure is not None
    shown = failure.traceback  # what every view (monitor, lab panel, cell error) is given
    assert len(shown) <= 40
    assert shown[0] == "Traceback (most recent call last):"
    assert shown[1:3] == ['  File "<training cell>", line 9, in kf_train_cell', "    model.fit(x)"]
    assert shown[-3:] == [
        '  File "/usr/lib/python3/site-packages/jax/_src/core59.py", line 59, in f59',
        "    return g59(x)",
        "TypeError: mul got incompatible shapes for broadcasting: (3, 4), (5,).",
    ]
    assert any(re.fullmatch(r"  \.\.\. \(\d+ lines left out: .*\)", ln) for ln in shown)


def test_a_short_traceback_is_shown_whole():
    tb = [
        "Traceback (most recent call last):",
        '  File "<training cell>", line 2, in kf_train_cell',
        "    1 / 0",
        "ZeroDivisionError: division by zero",
    ]
    failure = failure_from_dict(
        {"source": "Rank 0", "exc_type": "ZeroDivisionError", "message": "division by zero",
         "traceback": tb}
    )  # fmt: skip
    assert failure is not None and failure.traceback == tb


def test_the_termination_message_keeps_the_users_line(tmp_path):
    """On a cluster the cause comes from the pod's termination message (at most 4096 bytes)."""
    term = tmp_path / "termination-log"
    term.write_text("")
    _run_in_runner(tmp_path, LONG_MESSAGE_CELL, term)
    text = term.read_text()
    assert 0 < len(text.encode()) <= 4096
    pod = {"status": {"containerStatuses": [{"state": {"terminated": {"message": text}}}]}}
    failure = failure_from_pods([pod])
    assert failure is not None
    assert '  File "<training cell>", line 6, in kf_train_cell' in failure.traceback
    assert "ValueError: batch has the wrong shape:" in failure.traceback


# -- did you mean ------------------------------------------------------------------------------


def test_a_mistyped_runtime_name_gets_did_you_mean():
    runtimes = [
        Runtime(name="torch-distributed", framework="torch", ml_policy="torch"),
        Runtime(name="jax-distributed", framework="jax", ml_policy="jax"),
    ]
    with pytest.raises(RuntimeNotFoundError) as err:
        resolve_runtime(TorchTrainer(func=print), runtimes, name="torch-distribted")
    assert "Did you mean 'torch-distributed'?" in str(err.value)
    with pytest.raises(RuntimeNotFoundError) as err:
        resolve_runtime(TorchTrainer(func=print), runtimes, name="tensorflow")
    assert "Did you mean" not in str(err.value)


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.chdir(tmp_path)
    sh = InteractiveShell.instance()
    sh.register_magics(KubeflowMagics(sh))
    yield sh
    InteractiveShell.clear_instance()


def _magic_error(shell, line: str, cell: str | None = None) -> str:
    with pytest.raises(Exception) as err:  # the magic's one-paragraph error
        if cell is None:
            shell.run_line_magic("torchtrain", line)
        else:
            shell.run_cell_magic("torchtrain", line, cell)
    return str(err.value)


def test_magics_say_did_you_mean_for_a_runtime_and_a_script(shell, tmp_path):
    (tmp_path / "train.py").write_text("print('hello')\n")
    msg = _magic_error(shell, "-n 1 --runtime torch-distribted --dry-run", "print(1)")
    assert "No training runtime named 'torch-distribted'. Did you mean 'torch-distributed'?" in msg
    msg = _magic_error(shell, "trian.py -n 1 --dry-run")
    assert "The script 'trian.py' does not exist" in msg and "Did you mean 'train.py'?" in msg
    with pytest.raises(ValidationError) as err:
        load_script(str(tmp_path / "trainn.py"))
    assert f"Did you mean {str(tmp_path / 'train.py')!r}?" in str(err.value)


# -- --resources ---------------------------------------------------------------------------


def test_quoted_resources_are_read_as_a_shell_reads_them(shell, capsys):
    shell.run_cell_magic("torchtrain", "-n 1 --resources 'cpu=2,memory=4Gi' --dry-run", "pass")
    shell.run_cell_magic("torchtrain", '-n 1 --env "NOTE=two words" --dry-run', "pass")
    out = capsys.readouterr().out
    assert re.search(r"limits:\n\s+cpu: '2'\n\s+memory: 4Gi", out), out
    assert re.search(r"name: NOTE\n\s+value: two words", out), out


def test_a_spaced_unit_says_what_to_write(shell):
    msg = _magic_error(shell, "-n 1 --resources 'cpu=2,memory=2 GB' --dry-run", "pass")
    assert "'cpu" not in msg
    assert msg.startswith("Invalid quantity '2 GB' for resource 'memory'")
    assert "Did you mean '2G' (powers of 1000) or '2Gi'" in msg


# -- Lightning's devices / num_nodes ---------------------------------------------------------

LIGHTNING = """
import lightning as L

def train():
    trainer = L.Trainer(devices={devices}, num_nodes={nodes}, max_epochs=1)
    trainer.fit(model)
"""


@pytest.mark.parametrize(
    ("devices", "nodes", "procs", "num_nodes", "wrong"),
    [
        ("4", "1", 2, 1, "devices"),
        ("[0, 1, 2]", "1", 2, 1, "devices"),
        ("2", "2", 2, 1, "num_nodes"),
        ("2", "1", 2, 1, None),
        ("'auto'", "1", 2, 1, None),
        ("-1", "1", 2, 1, None),
        ("n_gpus", "1", 2, 1, None),  # not a literal: not guessed
    ],
)
def test_lightning_counts_that_disagree_with_the_job(devices, nodes, procs, num_nodes, wrong):
    msg = lightning_count_mismatch(LIGHTNING.format(devices=devices, nodes=nodes), num_nodes, procs)
    if wrong is None:
        assert msg is None
    else:
        assert msg is not None and "Nothing was submitted" in msg
        assert (f"-p {procs}" if wrong == "devices" else f"-n {num_nodes}") in msg


def test_code_without_lightning_is_not_checked():
    src = "from transformers import Trainer\nTrainer(devices=8)\n"
    assert lightning_count_mismatch(src, 1, 2) is None


def test_a_lightning_cell_with_the_wrong_devices_is_not_submitted(shell):
    cell = "import lightning as L\ntrainer = L.Trainer(devices=4, max_epochs=1)\n"
    msg = _magic_error(shell, "-n 1 -p 2", cell)
    assert "asks Lightning for 4 devices per node (L.Trainer(devices=4, max_epochs=1))" in msg
    assert "-p 4, or devices=2" in msg
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.client import TrainerClient

    assert TrainerClient(LocalBackendConfig()).list_jobs() == []


def test_the_python_api_refuses_it_too():
    def train():
        import lightning as L

        L.Trainer(devices=4).fit(None)

    rt = Runtime(name="torch-distributed", framework="torch", ml_policy="torch")
    with pytest.raises(ValidationError, match="asks Lightning for 4 devices per node"):
        build_trainjob(TorchTrainer(func=train, num_nodes=1, num_proc_per_node=2), rt)
    build_trainjob(TorchTrainer(func=train, num_nodes=1, num_proc_per_node=4), rt)


# -- Accelerate: notebook_launcher, accelerate launch, ParallelismConfig ---------------------

# An Accelerate notebook as Hugging Face's examples write it: the training function, then
# notebook_launcher in the same cell.
ACCELERATE_CELL = """\
import torch
from accelerate import Accelerator, notebook_launcher


def training_function(lr, epochs):
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model, optimizer = accelerator.prepare(model, optimizer)
    for _ in range(epochs):
        optimizer.zero_grad()
        loss = model(torch.ones(8, 4)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
    accelerator.print(f"trained on {{accelerator.num_processes}} processes")


notebook_launcher(training_function, (1e-3, 2), {launch})
"""

TORCH_RT = Runtime(name="torch-distributed", framework="torch", ml_policy="torch")


def _no_jobs() -> bool:
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.client import TrainerClient

    return TrainerClient(LocalBackendConfig()).list_jobs() == []


@pytest.mark.parametrize("launch", ["num_processes=4", "4"])
def test_a_cell_whose_notebook_launcher_count_is_not_p_is_not_submitted(shell, launch):
    # Inside a job notebook_launcher runs the function in place on each of the job's processes
    # (the runner), so its count must be the job's processes per node.
    msg = _magic_error(shell, "-n 1 -p 2", ACCELERATE_CELL.format(launch=launch))
    assert msg.startswith(
        f"The code calls Accelerate's notebook_launcher(training_function, (1e-3, 2), {launch}), "
        "but the job has 1 node × 2 processes"
    ), msg
    assert "Run the cell with -p 4, or pass num_processes=2." in msg
    assert msg.endswith("Nothing was submitted.")
    assert "\n" not in msg
    assert _no_jobs()


@pytest.mark.parametrize(
    "launch",
    ["num_processes=2", "2", "num_processes=1", "num_processes=n_procs", "**launch_kwargs"],
)
def test_notebook_launcher_that_runs_in_place_or_is_computed_passes(shell, capsys, launch):
    cell = "n_procs = 2\nlaunch_kwargs = {}\n" + ACCELERATE_CELL.format(launch=launch)
    shell.run_cell_magic("torchtrain", "-n 1 -p 2 --dry-run", cell)
    assert "kind: TrainJob" in capsys.readouterr().out


def test_notebook_launcher_in_a_job_runs_the_function_in_place(monkeypatch, capsys):
    """The runner's notebook_launcher (Accelerate's own, wrapped) inside a rank of a job with 2
    processes per node: num_processes=2 calls the function in this process with its args and
    Accelerate's mixed precision; another count stops with what to change; 1 is Accelerate's
    own in-place run."""
    from accelerate.launchers import notebook_launcher as real

    from kf_jupyter import entrypoint

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    launcher = entrypoint._kfj_launch_in_place(real)
    calls = []

    def train(lr, epochs):
        calls.append((lr, epochs, os.environ.get("ACCELERATE_MIXED_PRECISION")))
        return "done"

    assert launcher(train, (1e-3, 2), num_processes=2, mixed_precision="bf16") == "done"
    assert calls == [(1e-3, 2, "bf16")]
    assert "ACCELERATE_MIXED_PRECISION" not in os.environ
    out = capsys.readouterr().out
    assert "notebook_launcher(num_processes=2) runs train in place" in out
    with pytest.raises(RuntimeError, match=r"run the cell with -p 3, or pass num_processes=2"):
        launcher(train, (1e-3, 2), 3)
    launcher(train, (0.5, 1), num_processes=1)
    assert calls[-1] == (0.5, 1, None)
    assert "Launching training on CPU" in capsys.readouterr().out  # Accelerate's own


def test_code_without_accelerate_is_not_checked():
    src = "def notebook_launcher(f, num_processes):\n    f()\n\nnotebook_launcher(print, 8)\n"
    assert own_setup.accelerate_count_mismatch(src, 1, 2) is None


def test_a_script_whose_parallelism_config_disagrees_is_not_submitted(shell, tmp_path, capsys):
    (tmp_path / "train.py").write_text(
        "from accelerate import Accelerator\n"
        "from accelerate.parallelism_config import ParallelismConfig\n\n"
        "pc = ParallelismConfig(dp_shard_size=2, tp_size=2)\n"
        "accelerator = Accelerator(parallelism_config=pc)\n"
    )
    msg = _magic_error(shell, "train.py -n 1 -p 2 -- --epochs 1")
    assert msg.startswith(
        "The code's ParallelismConfig(dp_shard_size=2, tp_size=2) multiplies to 4 processes, "
        "but the job runs 1 node × 2 processes = 2"
    ), msg
    assert "sizes whose product is 2, or a job of 4 processes" in msg
    assert _no_jobs()
    shell.run_line_magic("torchtrain", "train.py -n 1 -p 4 --dry-run")  # 4 = 2 x 2: agrees
    shell.run_line_magic("torchtrain", "train.py -n 2 -p 2 --dry-run")
    assert capsys.readouterr().out.count("kind: TrainJob") == 2


def test_parallelism_config_sized_by_the_jobs_env_is_not_guessed():
    src = "from accelerate import ParallelismConfig\nParallelismConfig(dp_shard_size=2)\n"
    assert own_setup.accelerate_count_mismatch(src, 1, 4) is not None
    assert (
        own_setup.accelerate_count_mismatch(src, 1, 4, frozenset({"PARALLELISM_CONFIG_TP_SIZE"}))
        is None
    )
    sp = "from accelerate import ParallelismConfig\nParallelismConfig(dp_shard_size=2, sp_size=4)\n"
    assert own_setup.accelerate_count_mismatch(sp, 1, 4) is None  # DeepSpeed SP: not compared


# The launch line of Accelerate's multi-node docs, with the Trainer's PET_* variables.
MULTI_NODE = (
    "accelerate launch --multi_gpu --num_processes {n} --num_machines {m} "
    "--machine_rank $PET_NODE_RANK --main_process_ip $PET_MASTER_ADDR "
    "--main_process_port $PET_MASTER_PORT train.py --epochs 3"
)


def _command_job(num_nodes: int, procs: int | None, *options: object) -> dict:
    trainer = TorchTrainer(num_nodes=num_nodes, num_proc_per_node=procs)
    return build_trainjob(trainer, TORCH_RT, options=list(options))


def test_accelerate_launch_in_a_trainer_command_must_match_the_job():
    from kf_jupyter.options import TrainerArgs, TrainerCommand

    bash = TrainerCommand(["bash", "-c", MULTI_NODE.format(n=8, m=2)])
    with pytest.raises(ValidationError) as err:
        _command_job(2, 2, bash)
    msg = str(err.value)
    assert msg.startswith(
        "The command runs `accelerate launch --num_processes 8 --num_machines 2`: Accelerate's "
        "--num_processes counts the processes of all nodes, 8, but the job runs 2 nodes × 2 "
        "processes = 4"
    ), msg
    assert "Make them agree: --num_processes 4, or -p 4 (num_proc_per_node=4)." in msg
    # the same launcher as command + args, with --num-processes=N spelled with dashes
    with pytest.raises(ValidationError, match="counts the processes of all nodes, 4, but"):
        _command_job(
            1,
            2,
            TrainerCommand(["accelerate", "launch"]),
            TrainerArgs(["--mixed_precision", "no", "--num-processes=4", "train.py"]),
        )
    with pytest.raises(ValidationError, match=r"has 1 node \(-n 1, num_nodes=1\); Accelerate wo"):
        _command_job(1, 2, TrainerCommand(["bash", "-c", MULTI_NODE.format(n=2, m=2)]))


@pytest.mark.parametrize(
    "command",
    [
        ["bash", "-c", MULTI_NODE.format(n=4, m=2)],  # 2 nodes x 2 processes: agrees
        [
            "bash",
            "-c",
            MULTI_NODE.format(n="$((PET_NNODES * PET_NPROC_PER_NODE))", m="$PET_NNODES"),
        ],
        ["accelerate", "launch", "--config_file", "fsdp.yaml", "train.py"],  # the file decides
        ["accelerate", "launch", "--num_machines", "2", "train.py", "--num_processes", "7"],
        ["python", "train.py", "--num_processes", "7"],  # not accelerate launch
    ],
)
def test_accelerate_launch_that_agrees_or_is_computed_passes(command):
    from kf_jupyter.options import TrainerCommand

    job = _command_job(2, 2, TrainerCommand(command))
    assert job["spec"]["trainer"]["command"] == command


def test_accelerate_launch_is_not_compared_with_an_auto_process_count():
    from kf_jupyter.options import TrainerCommand

    # No -p and no GPU: the Trainer's `auto` is 1, and accelerate launch decides for itself.
    _command_job(1, None, TrainerCommand(["accelerate", "launch", "--num_processes", "4", "t.py"]))


@pytest.mark.slow
def test_a_notebook_launcher_cell_runs_unchanged_in_a_job(shell, tmp_path):
    """An Accelerate notebook as written for a laptop (notebook_launcher(fn, args,
    num_processes=2)) run with -p 2: each of the job's 2 processes runs the function in place,
    Accelerate trains on the job's 2 processes, and nothing is launched twice (a real job)."""
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.backends.local.warm.pool import stop_all
    from kf_jupyter.client import TrainerClient

    cell = ACCELERATE_CELL.format(launch="num_processes=2")
    try:
        shell.run_cell_magic("torchtrain", "-n 1 -p 2 --no-wait -o job", cell)
        job = shell.user_ns["job"]
        assert job.wait(timeout=300).status == "Complete"
        logs = "\n".join(TrainerClient(LocalBackendConfig()).get_job_logs(job.name))
        assert logs.count("trained on 2 processes") == 1, logs  # accelerator.print: rank 0
        assert logs.count("runs training_function in place") == 1, logs
        assert "Launching training" not in logs, logs  # Accelerate's own launch never ran
    finally:
        stop_all(tmp_path / "state")


# -- in a real kernel ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_cell_error_with_a_long_message_shows_the_users_line_in_a_real_kernel(tmp_path):
    from nbclient import NotebookClient

    from .test_magics_notebooks import _nb

    nb = _nb(
        "%load_ext kf_jupyter",
        ("%%torchtrain -n 1 -p 1\n" + LONG_MESSAGE_CELL, ["raises-exception"]),
    )
    env_before = dict(os.environ)
    os.environ["KF_JUPYTER_STATE_DIR"] = str(tmp_path / "state")
    os.environ["KUBECONFIG"] = str(tmp_path / "no-kubeconfig")
    try:
        NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    err = next(o for o in nb.cells[1].outputs if o.output_type == "error")
    text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(err.traceback))
    lines = text.splitlines()
    assert re.fullmatch(
        r"kf-jupyter: Job torch-\w+ failed\. Rank 0 failed: ValueError: batch has the wrong "
        r"shape: \u2026",
        lines[0],
    ), text
    # The user's own frames, by the cell's line numbers, and the exception with its start.
    assert re.search(
        r'  File "(<training cell>|cell\.py)", line 6, in (kf_train_cell|<module>)', text
    ), text
    assert "    check([1, 2])" in lines
    assert "ValueError: batch has the wrong shape:" in lines
    assert "[ 299  300  301]" not in text
    assert len(lines) <= 45, text
    assert lines[-1].startswith("Full logs: %kf_logs torch-")
