"""`%%torchtrain --sweep ...` (issue 25): the flags, one-paragraph errors, the dry run's trial
list, and a real local sweep followed in a real IPython shell."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter.errors import ValidationError
from kf_jupyter.magics.compare import CompareMagics
from kf_jupyter.magics.core import KubeflowMagics
from kf_jupyter.magics.sweep import SweepMagics
from kf_jupyter.magics.sweepargs import parse_objective, parse_param


def test_parameters_parse_as_written():
    p = parse_param("lr=loguniform(1e-4, 1e-1)")
    assert (p.name, p.kind, p.values) == ("lr", "loguniform", [1e-4, 0.1])
    p = parse_param(" batch = choice(16, 32,'big', \"x y\") ")
    assert (p.name, p.kind, p.values) == ("batch", "choice", [16, 32, "big", "x y"])
    p = parse_param("dropout=uniform(0,0.5)")
    assert p.values == [0.0, 0.5]
    assert parse_objective("accuracy:max") == ("accuracy", "maximize")
    assert parse_objective("loss") == ("loss", "minimize")
    assert parse_objective(None) == ("loss", "minimize")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("lr", "is not NAME=DISTRIBUTION(VALUES)"),
        ("1lr=uniform(0,1)", "is not NAME=DISTRIBUTION(VALUES)"),
        ("lr=normal(0,1)", "unknown distribution 'normal'"),
        ("lr=uniform(1)", "takes two numbers"),
        ("lr=uniform(a,1)", "the minimum 'a' is not a number"),
        ("lr=uniform(1,1)", "must be below the maximum"),
        ("lr=loguniform(0,1)", "needs a minimum above 0"),
        ("b=choice()", "give at least one value"),
        ("b=choice(1,1)", "lists a value twice"),
        ("lr=uniform(0,inf)", "finite number"),
    ],
)
def test_bad_parameters_are_one_paragraph_naming_the_fix(text, says):
    with pytest.raises(ValidationError) as exc:
        parse_param(text)
    assert says in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("text", ["loss:up", ":min", "my loss:min"])
def test_bad_objective(text):
    with pytest.raises(ValidationError, match="--objective"):
        parse_objective(text)


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.chdir(tmp_path)
    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    sh.register_magics(CompareMagics(shell=sh, core=magics))
    sh.register_magics(SweepMagics(shell=sh, core=magics))
    sh.kf = magics  # type: ignore[attr-defined]
    yield sh
    for client in magics._clients.values():
        if client.backend_name == "local":
            for j in client.list_jobs():
                client.delete_job(j.name)


def _run(sh, capsys, text):
    result = sh.run_cell(text)
    out = capsys.readouterr()
    return result, out.out + out.err


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ("--trials 4", "--trials only apply to a sweep"),
        ("--sweep 'lr=uniform(0,1)' --sweep 'lr=choice(1,2)'", "names lr more than once"),
        ("--sweep 'lr=uniform(0,1)' --args lr", "both swept (--sweep) and passed"),
        ("--sweep 'lr=uniform(0,1)' --algorithm bayes", "--algorithm 'bayes': use random or grid"),
        ("--sweep 'lr=uniform(0,1)' --trials 0", "--trials 0"),
        ("--sweep 'lr=uniform(0,1)' --name x", "--name cannot be used with --sweep"),
        ("--sweep 'lr=choice(1,2)' --algorithm grid --seed 3", "a grid has no randomness"),
    ],
)
def test_bad_sweep_flags_fail_the_cell_in_one_paragraph(shell, capsys, flags, says):
    shell.user_ns["lr"] = 0.1
    result, text = _run(shell, capsys, f"%%torchtrain {flags}\nprint(lr)\n")
    assert not result.success
    assert says in text and "Traceback" not in text
    assert shell.kf.client("local").list_jobs() == []  # nothing was started


def test_dry_run_lists_the_trials_the_sweep_would_run(shell, capsys):
    cell = (
        "%%torchtrain --sweep 'lr=loguniform(1e-4,1e-1)' --sweep 'batch=choice(16,32)' "
        "--trials 6 --parallel 2 --objective loss:min --seed 7 --dry-run\n"
        "print(lr, batch)\n"
    )
    result, text = _run(shell, capsys, cell)
    assert result.success, text
    assert "6 trials, 2 at a time, minimize loss, random search, seed 7" in text
    lines = text.splitlines()
    table = lines[lines.index(next(x for x in lines if x.startswith("trial"))) :]
    assert table[0].split() == ["trial", "lr", "batch"] and len(table) == 7
    assert all(1e-4 <= float(r.split()[1]) <= 0.1 for r in table[1:])
    assert {r.split()[2] for r in table[1:]} <= {"16", "32"}
    # the same seed draws the same trials: what --dry-run shows is what runs
    _, again = _run(shell, capsys, cell)
    assert again == text
    assert shell.kf.client("local").list_jobs() == []


def test_grid_dry_run_without_trials_is_the_whole_grid(shell, capsys):
    cell = (
        "%%torchtrain --sweep 'a=choice(1,2,3)' --sweep 'b=choice(x,y)' --algorithm grid "
        "--dry-run\nprint(a, b)\n"
    )
    result, text = _run(shell, capsys, cell)
    assert result.success, text
    assert "6 trials, 1 at a time" in text and "grid search" in text
    rows = [line.split()[1:] for line in text.splitlines() if line[:1].isdigit()]
    assert rows == [["1", "x"], ["1", "y"], ["2", "x"], ["2", "y"], ["3", "x"], ["3", "y"]]


SWEEP = (
    "%%torchtrain --sweep 'scale=choice(1,4,2)' --algorithm grid --parallel 2 "
    "--objective loss:min -o sweep\n"
    "import kf_jupyter\n"
    "s = float(scale)\n"
    "if s == 4:\n"
    "    raise RuntimeError('trial diverged')\n"
    "for step in range(3):\n"
    "    kf_jupyter.report(step=step, loss=s / (step + 1))\n"
)


@pytest.mark.slow
def test_a_local_sweep_runs_follows_and_shows_the_best_completed_trial(shell, capsys):
    result, text = _run(shell, capsys, SWEEP)
    assert result.success, text  # one failed trial does not fail the sweep
    name = shell.user_ns["sweep"]
    # every trial's status as it changed, then the final table
    assert "Failed" in text and "Complete" in text
    final = text[text.index(f"Sweep {name}:") :]
    assert "3 trials" in final and "best" in final
    rows = {line.split()[0]: line.split() for line in final.splitlines()[2:] if line.strip()}
    by_scale = {r[1]: r for r in rows.values()}
    assert by_scale["1"][2] == "Complete" and by_scale["1"][-1] == "best"
    assert by_scale["1"][3] == "0.3333"  # min of 1/1, 1/2, 1/3
    assert by_scale["4"][2] == "Failed" and by_scale["4"][3] == "failed"
    assert by_scale["2"][2] == "Complete" and by_scale["2"][-1] != "best"
    # listed, shown again and deleted from the line magics
    _, listed = _run(shell, capsys, "%kf_sweeps")
    assert name in listed and "3/3" in listed
    _, shown = _run(shell, capsys, f"%kf_sweep {name}")
    assert f"Sweep {name}:" in shown and "best" in shown
    _, deleted = _run(shell, capsys, f"%kf_sweep_delete {name}")
    assert "Deleted" in deleted
    assert shell.kf.client("local").list_jobs() == []


# -- issue 39: a sweep's trials keep the program's arguments -----------------------------------

#: Katib's MNIST trial script's shape: argparse options, the metric printed as name=value.
KATIB_SCRIPT = """\
import argparse
import sys


def main():
    parser = argparse.ArgumentParser(description="Katib-style trial")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    print("ARGV", sys.argv, flush=True)
    loss = 1.0 / args.epochs + args.lr
    print(f"epochs={args.epochs} batch={args.batch_size}")
    print(f"loss={loss}")


if __name__ == "__main__":
    main()
"""


def test_trial_argv_appends_the_options_the_program_defines():
    from kf_jupyter.magics.sweepargs import trial_argv
    from kf_jupyter.script import fill_parameters

    argv = trial_argv(KATIB_SCRIPT, ["--lr=0.5"], ("epochs", "batch_size"), function=False)
    assert argv.args == [
        "--lr=0.5",
        "--epochs=${trialParameters.epochs}",
        "--batch-size=${trialParameters.batch_size}",
    ]
    assert argv.unread == []
    trial = fill_parameters(argv.args, {"epochs": "3", "batch_size": "16"})
    assert trial == ["--lr=0.5", "--epochs=3", "--batch-size=16"]
    # placed by hand (Katib's trial template), nothing is added
    argv = trial_argv(KATIB_SCRIPT, ["--epochs", "${trialParameters.epochs}"], ("epochs",))
    assert argv.args == ["--epochs", "${trialParameters.epochs}"]
    # a cell that reads the parameter as its argument gets no option it would not parse
    argv = trial_argv("def kf_train_cell(lr):\n    print(float(lr))\n", ["-v"], ("lr",))
    assert argv.args == ["-v"] and argv.unread == []
    # a name nothing reads is said
    assert trial_argv("print(1)\n", [], ("lr",)).unread == ["lr"]


@pytest.mark.parametrize(
    ("after", "says"),
    [
        ("--epochs=1", "--epochs is both swept (--sweep epochs=...) and given after ' -- '"),
        ("--epochs 1", "--epochs is both swept"),
        ("--lr=${trialParameters.lr}", "'lr' is not swept"),
    ],
)
def test_swept_options_given_twice_fail_in_one_paragraph(shell, capsys, after, says):
    cell = f"%%torchtrain --sweep 'epochs=choice(1,2)' --dry-run -- {after}\n{KATIB_SCRIPT}"
    result, text = _run(shell, capsys, cell)
    assert not result.success
    assert says in text and "Traceback" not in text


def test_dry_run_shows_each_trials_argv(shell, capsys, tmp_path):
    cell = (
        "%%torchtrain --sweep 'epochs=choice(1,2)' --algorithm grid --dry-run -- "
        f"--batch-size=16 --lr 0.5\n{KATIB_SCRIPT}"
    )
    result, text = _run(shell, capsys, cell)
    assert result.success, text
    assert (
        "its sys.argv is cell.py --batch-size=16 --lr 0.5 '--epochs=${trialParameters.epochs}'"
        in text
    )
    (tmp_path / "katib.py").write_text(KATIB_SCRIPT)
    line = "%torchtrain katib.py --sweep 'epochs=choice(1,2)' --algorithm grid --dry-run -- --lr 1"
    result, text = _run(shell, capsys, line)
    assert result.success, text
    assert "Each trial runs katib.py" in text
    assert "its sys.argv is katib.py --lr 1 '--epochs=${trialParameters.epochs}'" in text


def _trial_argvs(shell, name: str) -> dict[str, str]:
    client = shell.kf.client("local")
    out = {}
    for job in client.list_jobs():
        if job.name.startswith(f"{name}-trial-"):
            lines = [ln for ln in client.get_job_logs(job.name) if "ARGV" in ln]
            out[job.name] = lines[0].split("ARGV ", 1)[1] if lines else ""
    return out


@pytest.mark.slow
def test_a_sweeps_trials_get_the_cells_arguments_and_the_swept_option(shell, capsys, tmp_path):
    cell = (
        "%%torchtrain --sweep 'epochs=choice(1,4)' --algorithm grid --parallel 2 -o sweep "
        f"-- --batch-size=16 --lr=0.5\n{KATIB_SCRIPT}"
    )
    result, text = _run(shell, capsys, cell)
    assert result.success, text
    argvs = sorted(_trial_argvs(shell, shell.user_ns["sweep"]).values())
    assert argvs == [
        "['cell.py', '--batch-size=16', '--lr=0.5', '--epochs=1']",
        "['cell.py', '--batch-size=16', '--lr=0.5', '--epochs=4']",
    ], text
    assert "0.75" in text  # the best trial's loss: 1/4 + 0.5, with the swept epochs parsed
    # the line form: the script file, its arguments and the swept option
    (tmp_path / "katib.py").write_text(KATIB_SCRIPT)
    line = "%torchtrain katib.py --sweep 'epochs=choice(2)' --algorithm grid -o sweep2 -- --lr=0.25"
    result, text = _run(shell, capsys, line)
    assert result.success, text
    assert list(_trial_argvs(shell, shell.user_ns["sweep2"]).values()) == [
        "['katib.py', '--lr=0.25', '--epochs=2']"
    ], text


@pytest.mark.slow
def test_a_failed_sweep_says_how_its_trials_ended_in_one_sentence(shell, capsys):
    cell = (
        "%%torchtrain --sweep 'x=choice(1,2)' --algorithm grid --objective accuracy:max -o sweep\n"
        "if x == '1':\n"
        "    raise RuntimeError('trial diverged')\n"
        "print('epoch=1')\n"
    )
    result, text = _run(shell, capsys, cell)
    assert not result.success
    name = shell.user_ns["sweep"]
    assert (
        f"Sweep {name} failed: No trial succeeded: of 2 trials, 1 failed and 1 reported no "
        "'accuracy' (a trial reports it by printing accuracy=VALUE or calling "
        "kf_jupyter.report(accuracy=...)). Its trials are in the table above"
    ) in " ".join(text.split()), text
