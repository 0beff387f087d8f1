"""Workspace shipping (issue 11): the notebook's folder travels with the job.

Fast: the ignore rules and the snapshot walk. Slow (real processes): a 2-node local job whose
every rank imports a module and reads a data file from the notebook's folder, through the Python
API and through the magic in a real InteractiveShell; a file edited after submit does not
change the running job; an over-limit workspace submits nothing.
"""

from __future__ import annotations

import io
import os
import tarfile
import textwrap
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter import JAXTrainer, RuntimeConfig, TorchTrainer
from kf_jupyter.errors import ValidationError
from kf_jupyter.magics.core import KubeflowMagics
from kf_jupyter.workspace import (
    Workspace,
    archive,
    is_ignored,
    parse_ignore,
    parse_size,
    take_snapshot,
)

from .test_local_support import client_fixture  # noqa: F401  (the `client` fixture)

DATAUTILS = '''\
"""A helper module next to the notebook."""

import os


class MyDataset:
    """Reads data.csv from the working folder."""

    def __init__(self, path="data.csv"):
        with open(path, encoding="utf-8") as fh:
            self.rows = [line.strip().split(",") for line in fh if line.strip()]

    def __len__(self):
        return len(self.rows)


def where():
    return os.path.dirname(os.path.abspath(__file__))
'''


def make_notebook_folder(root: Path) -> Path:
    """A notebook's folder: a module, a data file, an ignored folder, caches and a venv."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "datautils.py").write_text(DATAUTILS)
    (root / "data.csv").write_text("a,1\nb,2\nc,3\n")
    (root / "train.ipynb").write_text("{}")
    (root / ".gitignore").write_text("outputs/\n*.log\n")
    (root / "outputs").mkdir()
    (root / "outputs" / "big.bin").write_bytes(b"\0" * 10_000)
    (root / "run.log").write_text("log")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "datautils.cpython-311.pyc").write_bytes(b"x")
    (root / ".ipynb_checkpoints").mkdir()
    (root / ".ipynb_checkpoints" / "train-checkpoint.ipynb").write_text("{}")
    (root / "myenv").mkdir()
    (root / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / "myenv" / "lib.py").write_text("")
    return root


# ----------------------------------------------------------------------------- rules (fast)


@pytest.mark.parametrize(
    ("patterns", "path", "is_dir", "ignored"),
    [
        ("*.log", "a/b/x.log", False, True),
        ("*.log\n!keep.log", "a/keep.log", False, False),
        ("/build", "build", True, True),
        ("/build", "src/build", True, False),
        ("data/", "data", True, True),
        ("data/", "data", False, False),
        ("docs/*.md", "docs/a.md", False, True),
        ("docs/*.md", "docs/sub/a.md", False, False),
        ("**/logs", "x/y/logs", True, True),
        ("a/**/b", "a/x/y/b", False, True),
        ("a/**/b", "a/b", False, True),
        ("out/**", "out/x/y", False, True),
        ("x?.txt", "xa.txt", False, True),
        ("[ab].txt", "c.txt", False, False),
        ("\\#lit", "#lit", False, True),
        ("# comment\n\n", "comment", False, False),
    ],
)
def test_gitignore_rules(patterns, path, is_dir, ignored):
    assert is_ignored(parse_ignore(patterns), path, is_dir) is ignored


def test_nested_rules_apply_below_their_folder_only():
    rules = parse_ignore("*.csv") + parse_ignore("!keep.csv\n/local.txt", "sub")
    assert is_ignored(rules, "a.csv", False)
    assert not is_ignored(rules, "sub/keep.csv", False)
    assert is_ignored(rules, "keep.csv", False)
    assert is_ignored(rules, "sub/local.txt", False)
    assert not is_ignored(rules, "sub/deeper/local.txt", False)


def test_parse_size():
    assert parse_size("4MiB") == 4 * 1024**2
    assert parse_size("500k") == 500_000
    assert parse_size("1048576") == 1048576
    with pytest.raises(ValidationError, match="Invalid size"):
        parse_size("lots")


def test_snapshot_honours_gitignore_kfignore_and_skips_caches(tmp_path):
    root = make_notebook_folder(tmp_path / "nb")
    (root / "sub").mkdir()
    (root / "sub" / ".gitignore").write_text("*.tmp\n")
    (root / "sub" / "a.tmp").write_text("x")
    (root / "sub" / "b.py").write_text("x = 1\n")
    (root / ".kfignore").write_text("!run.log\nsecret.txt\n")
    (root / "secret.txt").write_text("no")
    snap = take_snapshot(Workspace(), str(root))
    names = sorted(f.path for f in snap.files)
    assert names == [
        ".gitignore",
        ".kfignore",
        "data.csv",
        "datautils.py",
        "run.log",
        "sub/.gitignore",
        "sub/b.py",
    ]
    assert "outputs/" in snap.skipped and "myenv/" in snap.skipped
    assert snap.summary()["file_count"] == 7


def test_enclosing_git_repository_gitignore_applies(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".gitignore").write_text("notebooks/scratch/\n*.parquet\n")
    nb = make_notebook_folder(repo / "notebooks")
    (nb / "scratch").mkdir()
    (nb / "scratch" / "x.py").write_text("")
    (nb / "table.parquet").write_bytes(b"PAR1")
    names = {f.path for f in take_snapshot(Workspace(), str(nb)).files}
    assert "datautils.py" in names
    assert "scratch/x.py" not in names and "table.parquet" not in names


def test_a_folder_the_repository_ignores_ships_its_own_files(tmp_path):
    """scripts/run.sh serves the tutorials from the ignored my-tutorials/: a module the user puts
    next to a notebook there travels with the job (its own .gitignore still applies)."""
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".gitignore").write_text("/my-tutorials/\n*.parquet\n")
    nb = make_notebook_folder(repo / "my-tutorials")
    (nb / "outputs" / "model.pt").write_bytes(b"x")
    names = {f.path for f in take_snapshot(Workspace(), str(nb)).files}
    assert {"datautils.py", "data.csv"} <= names
    assert "outputs/model.pt" not in names  # the folder's own .gitignore


def test_over_limit_is_one_clear_paragraph(tmp_path):
    root = make_notebook_folder(tmp_path / "nb")
    (root / "huge.csv").write_bytes(b"1" * 3000)
    with pytest.raises(ValidationError) as err:
        take_snapshot(Workspace(max_bytes=2000), str(root))
    msg = str(err.value)
    assert "more than the 2.0 KiB limit" in msg and str(root) in msg
    assert "huge.csv" in msg and ".kfignore" in msg and "--no-workspace" in msg
    assert "Nothing was submitted" in msg and "\n" not in msg


def test_archive_round_trip(tmp_path):
    import io
    import tarfile

    root = make_notebook_folder(tmp_path / "nb")
    snap = take_snapshot(Workspace(), str(root))
    with tarfile.open(fileobj=io.BytesIO(archive(snap)), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == sorted(f.path for f in snap.files)
        assert tar.extractfile("data.csv").read() == b"a,1\nb,2\nc,3\n"


@pytest.mark.parametrize("empty", [True, False])
def test_a_rank_that_loses_the_unpack_race_leaves_the_winners_folder(tmp_path, monkeypatch, empty):
    """Two ranks of one pod unpack the workspace at once. The loser must not replace the folder
    the winner already started in. With an empty workspace (a folder holding only notebooks)
    its rename did, and the winner's getcwd() failed ("Intel oneMKL FATAL ERROR: Cannot load
    libtorch_cpu.so" on importing torch, seen in a clean-clone CI run)."""
    from kf_jupyter import entrypoint

    root = tmp_path / "nb"
    root.mkdir()
    (root / "train.ipynb").write_text("{}")  # notebooks are never shipped
    if not empty:
        (root / "helpers.py").write_text("X = 1\n")
    snap = take_snapshot(Workspace(), str(root))
    assert (not snap.files) == empty
    packed = tmp_path / "workspace.tar.gz"
    packed.write_bytes(archive(snap))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "pod-tmp"))
    (tmp_path / "pod-tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    winner = entrypoint._kfj_unpack_workspace(str(packed))
    monkeypatch.chdir(winner)  # the first rank starts in it
    # the second rank looked before the first one's folder existed
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: False if p == winner else real_isdir(p))
    loser = entrypoint._kfj_unpack_workspace(str(packed))
    monkeypatch.setattr(os.path, "isdir", real_isdir)
    assert loser == winner
    assert os.getcwd() == winner  # still there for the first rank
    assert sorted(os.listdir(".")) == ([] if empty else ["helpers.py"])
    leftovers = [n for n in os.listdir(tmp_path / "pod-tmp") if n.startswith(".kf-jupyter")]
    assert leftovers == []


def test_runtime_config_workspace_values():
    assert RuntimeConfig(workspace=False).workspace is False
    assert "workspace='/x'" in repr(RuntimeConfig(workspace="/x"))
    with pytest.raises(ValidationError, match="workspace must be"):
        RuntimeConfig(workspace=3)


# ----------------------------------------------------------------------------- local (real)


def uses_workspace(path):
    """Every rank: import the notebook's module, read its data file, report where it runs."""
    import os
    import sys
    import time

    while path and not os.path.exists(path):
        time.sleep(0.02)
    import datautils

    ds = datautils.MyDataset()
    rank = os.environ.get("JAX_PROCESS_ID") or os.environ.get("RANK")
    return {
        "rank": rank,
        "rows": len(ds),
        "first": ds.rows[0],
        "cwd": os.getcwd(),
        "module_dir": datautils.where(),
        "on_path": sys.path[0],
        "ignored_present": os.path.exists("outputs"),
    }


def every_rank(path):
    """Run uses_workspace on every rank and gather the answers on rank 0 through files."""
    import json
    import os
    import time

    rank = int(os.environ["JAX_PROCESS_ID"])
    n = int(os.environ["JAX_NUM_PROCESSES"])
    out = uses_workspace(path)
    with open(f"rank-{rank}.json", "w") as fh:  # in the shared local workspace copy
        json.dump(out, fh)
    if rank:
        return None
    deadline = time.time() + 60
    while not all(os.path.exists(f"rank-{i}.json") for i in range(n)):
        assert time.time() < deadline
        time.sleep(0.02)
    time.sleep(0.1)
    return [json.load(open(f"rank-{i}.json")) for i in range(n)]


def globals_for(func):
    return func.__globals__


@pytest.mark.slow
def test_two_node_local_job_imports_the_notebooks_module(client, tmp_path, monkeypatch):
    nb = make_notebook_folder(tmp_path / "nb")
    monkeypatch.chdir(nb)
    release = tmp_path / "release"
    src = (
        textwrap.dedent(__import__("inspect").getsource(uses_workspace))
        + "\n"
        + textwrap.dedent(__import__("inspect").getsource(every_rank))
    )
    ns: dict = {}
    exec(compile(src, str(tmp_path / "cell.py"), "exec"), ns)
    func = ns["every_rank"]
    func.__kf_source__ = src
    trainer = JAXTrainer(
        func=func, func_args={"path": str(release)}, num_nodes=2, initialize_distributed=False
    )
    name = client.train(trainer)
    # edited after submit: the job still sees the snapshot
    (nb / "data.csv").write_text("changed,9\n")
    (nb / "datautils.py").write_text("raise ImportError('edited after submit')\n")
    release.write_text("go")
    client.wait_for_job_status(name, timeout=120)
    out = client.get_job_result(name)
    ws = str(client.backend.jobs_dir / name / "workspace")
    assert [o["rank"] for o in out] == ["0", "1"]
    for o in out:
        # issue 23: the ranks run in the notebook's folder itself (what they write lands next
        # to the notebook, and they read its files as they are now), while their imports
        # still come from the submit-time copy
        assert o["rows"] == 1 and o["first"] == ["changed", "9"]
        assert o["cwd"] == str(nb) and o["module_dir"] == ws and o["on_path"] == ws
        assert o["ignored_present"] is True
    assert not (Path(ws) / "outputs").exists() and not (Path(ws) / "myenv").exists()
    assert (nb / "rank-0.json").exists() and (nb / "rank-1.json").exists()


@pytest.mark.slow
def test_workspace_dir_and_no_workspace(client, tmp_path, monkeypatch):
    nb = make_notebook_folder(tmp_path / "nb")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    def where_am_i():
        import os

        return sorted(os.listdir("."))

    t = JAXTrainer(func=where_am_i, num_nodes=1, initialize_distributed=False)
    name = client.train(t, runtime_config=RuntimeConfig(workspace=str(nb)))
    client.wait_for_job_status(name, timeout=60)
    assert "datautils.py" in client.get_job_result(name)
    name = client.train(t, runtime_config=RuntimeConfig(workspace=False))
    client.wait_for_job_status(name, timeout=60)
    assert not (client.backend.jobs_dir / name / "workspace").exists()


def test_over_limit_local_submits_nothing(client, tmp_path, monkeypatch):
    nb = make_notebook_folder(tmp_path / "nb")
    (nb / "big.csv").write_bytes(os.urandom(5 * 1024 * 1024))
    monkeypatch.chdir(nb)
    t = TorchTrainer(func=uses_workspace, func_args={"path": ""}, num_nodes=2)
    with pytest.raises(ValidationError, match=r"more than the 4\.0 MiB limit") as err:
        client.train(t)
    assert "big.csv (5.0 MiB)" in str(err.value)
    assert client.list_jobs() == []
    assert not client.backend.jobs_dir.exists() or not any(client.backend.jobs_dir.iterdir())
    # the same folder ships when the limit is raised, or with big.csv ignored
    plan = client.dry_run(t, runtime_config=RuntimeConfig(workspace=Workspace(max_bytes=8 << 20)))
    assert "big.csv (5.0 MiB)" in plan["workspace"]["files"]
    (nb / ".kfignore").write_text("big.csv\n")
    plan = client.dry_run(t)
    assert "big.csv" in plan["workspace"]["skipped"]
    assert any(f.startswith("datautils.py (") for f in plan["workspace"]["files"])


@pytest.mark.slow
def test_magic_in_real_shell_two_torch_nodes(tmp_path, monkeypatch, capsys):
    """%%torchtrain -n 2 in a real InteractiveShell whose cwd is the notebook's folder."""
    nb = make_notebook_folder(tmp_path / "nb")
    monkeypatch.chdir(nb)
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    sh = InteractiveShell.instance()
    try:
        magics = KubeflowMagics(shell=sh)
        sh.register_magics(magics)
        cell = textwrap.dedent(
            """\
            import os
            import torch.distributed as dist
            from datautils import MyDataset
            ds = MyDataset()
            dist.init_process_group("gloo")
            t = torch.tensor([len(ds)])
            dist.all_reduce(t)
            print(f"rank {dist.get_rank()} rows {len(ds)} total {int(t)} in {os.getcwd()}")
            dist.destroy_process_group()
            """
        ).replace("t = torch", "import torch\nt = torch")
        sh.run_cell_magic("torchtrain", "-n 2 -p 1 --timeout 240", cell)
        out = capsys.readouterr()
        text = out.out + out.err
        assert "rank 0 rows 3 total 6" in text and "rank 1 rows 3 total 6" in text, text
        assert f"in {nb}" in text  # the ranks run in the notebook's folder
        # dry run lists what ships
        sh.run_cell_magic("torchtrain", "-n 2 --dry-run", "print(1)")
        text = capsys.readouterr().out
        assert (
            "datautils.py" in text
            and "data.csv" in text
            and "outputs" not in text.split("skipped")[0]
        )
        assert f"# outputs: {nb}: the ranks run in this folder" in text
        sh.run_cell_magic("torchtrain", "-n 2 --dry-run --no-workspace", "print(1)")
        assert "datautils.py" not in capsys.readouterr().out
    finally:
        from kf_jupyter import TrainerClient
        from kf_jupyter.backends.local.config import LocalBackendConfig

        c = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
        for job in c.list_jobs():
            c.delete_job(job.name)
        InteractiveShell.clear_instance()


def test_exclude_patterns_and_magic_flags(tmp_path, monkeypatch, capsys):
    nb = make_notebook_folder(tmp_path / "nb")
    (nb / "data").mkdir()
    (nb / "data" / "x.csv").write_text("1\n")
    names = {f.path for f in take_snapshot(Workspace(exclude=("data/",)), str(nb)).files}
    assert "datautils.py" in names and "data/x.csv" not in names

    other = make_notebook_folder(tmp_path / "other")
    (other / "only_here.py").write_text("")
    monkeypatch.chdir(nb)
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    sh = InteractiveShell.instance()
    try:
        sh.register_magics(KubeflowMagics(shell=sh))
        sh.run_cell(f"%%jaxtrain --dry-run --workspace {other}\nprint(1)\n")
        out = capsys.readouterr().out
        assert f"# workspace: {other} -> " in out and "only_here.py" in out
        result = sh.run_cell("%%jaxtrain --dry-run --workspace-limit 100\nprint(1)\n")
        out = capsys.readouterr()
        assert not result.success and "more than the 100 B limit" in out.out + out.err
        result = sh.run_cell("%%jaxtrain --dry-run --no-workspace --workspace x\nprint(1)\n")
        out = capsys.readouterr()
        assert not result.success and "--no-workspace cannot be combined" in out.out + out.err
        assert not (tmp_path / "state" / "jobs").exists()
    finally:
        InteractiveShell.clear_instance()


def test_local_copy_is_owner_only_and_keeps_executables(tmp_path):
    from kf_jupyter.workspace import copy_into

    nb = make_notebook_folder(tmp_path / "nb")
    (nb / "run.sh").write_text("#!/bin/sh\n")
    (nb / "run.sh").chmod(0o755)
    (nb / "sub").mkdir(mode=0o777)
    (nb / "sub" / "m.py").write_text("")
    (nb / "sub" / "m.py").chmod(0o666)
    old = os.umask(0)
    try:
        copy_into(take_snapshot(Workspace(), str(nb)), tmp_path / "copy")
    finally:
        os.umask(old)
    mode = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "copy").rglob("*")}
    assert mode["run.sh"] == 0o700 and mode["m.py"] == 0o600 and mode["sub"] == 0o700
    assert (tmp_path / "copy").stat().st_mode & 0o777 == 0o700


def test_files_removed_while_the_workspace_is_copied_do_not_fail_the_job(tmp_path, monkeypatch):
    """Another process removes files of the notebook's folder while a job's copy is made (its
    own jobs' folders, a training run's checkpoints): one removed before it is read is left out
    with the warning, one removed right after it was read ships as read. Before: a raw
    FileNotFoundError from train()."""
    import warnings

    from kf_jupyter import workspace
    from kf_jupyter.workspace import WorkspaceSecretWarning, copy_into

    nb = make_notebook_folder(tmp_path / "nb")
    for name in ("gone_before.py", "gone_after.py", "kept.py"):
        (nb / name).write_text(f"NAME = {name!r}\n")
    snap = take_snapshot(Workspace(), str(nb))
    (nb / "gone_before.py").unlink()
    real = workspace.read_shipped

    def read_then_removed(root: str, rel: str, budget: int) -> bytes:
        data = real(root, rel, budget)
        if rel == "gone_after.py":
            os.unlink(os.path.join(root, rel))
        return data

    monkeypatch.setattr(workspace, "read_shipped", read_then_removed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        copy_into(snap, tmp_path / "copy")
    shipped = {p.name for p in (tmp_path / "copy").rglob("*.py")}
    assert {"gone_after.py", "kept.py"} <= shipped and "gone_before.py" not in shipped
    assert (tmp_path / "copy" / "gone_after.py").read_text() == "NAME = 'gone_after.py'\n"
    assert (tmp_path / "copy" / "gone_after.py").stat().st_mode & 0o777 == 0o600
    said = [str(w.message) for w in caught if issubclass(w.category, WorkspaceSecretWarning)]
    assert said and "removed" in said[0] and "gone_before.py" in said[0]
    # the cluster's archive of the same snapshot, with the same removals
    (nb / "gone_after.py").write_text("NAME = 'gone_after.py'\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        packed = workspace.archive(snap)
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
        names = tar.getnames()
        assert "gone_after.py" in names and "gone_before.py" not in names
        assert tar.getmember("gone_after.py").mode == 0o600
