"""Failures show their cause first; logs hold only what a person reads (issue 12, issue 11).

Fast tests run the real runner and the local backend with plain processes; the framework tests
(torch, MPI, JAX, XGBoost) are slow.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kf_jupyter import JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer
from kf_jupyter.constants import ERROR_PREFIX
from kf_jupyter.errors import JobFailedError
from kf_jupyter.failure import failure_from_pods, parse_error_record
from kf_jupyter.logview import collapse_cr, is_banner, log_lines, readable
from kf_jupyter.magics.cell import build_cell_function
from kf_jupyter.magics.render import job_cause
from kf_jupyter.types import Failure, LogRecord
from kf_jupyter.widgets.state import LogState

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401

RUNNER = Path(__file__).resolve().parents[1] / "kf_jupyter" / "entrypoint.py"

# What torchrun 2.13 prints at the top of every job with more than one process per node.
OMP_BANNER = [
    "W1201 10:03:00.179000 9785 torch/distributed/run.py:874] ",
    "W1201 10:03:00.179000 9785 torch/distributed/run.py:874] *****************************************",
    "W1201 10:03:00.179000 9785 torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment "
    "variable for each process to be 1 in default, to avoid your system being overloaded, please "
    "further tune the variable for optimal performance in your application as needed. ",
    "W1201 10:03:00.179000 9785 torch/distributed/run.py:874] *****************************************",
]


def _run_cell_in_runner(
    tmp_path: Path, cell_body: str, rank: int = 1
) -> subprocess.CompletedProcess:
    fn = build_cell_function(cell_body)
    (tmp_path / "kf_func.py").write_text(fn.source)
    (tmp_path / "kf_args.json").write_text("{}")
    shutil_runner = tmp_path / "kf_entry.py"
    shutil_runner.write_text(RUNNER.read_text())
    env = {**os.environ, "RANK": str(rank), "KF_JUPYTER_TERMINATION_LOG": ""}
    env.pop("KF_JUPYTER_RANK_LOG_DIR", None)
    return subprocess.run(
        [sys.executable, str(shutil_runner), str(tmp_path / "kf_func.py"), fn.name,
         str(tmp_path / "kf_args.json"), "none"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


# -- the runner ------------------------------------------------------------------------------


def test_runner_shows_the_users_frames_with_cell_line_numbers_and_records_the_cause(tmp_path):
    # As in JupyterLab: line 1 is the magic, so `helper()` is line 5 and `1 / 0` line 4.
    cell = "x = 1\ndef helper():\n    return 1 / 0\nhelper()\n"
    done = _run_cell_in_runner(tmp_path, cell, rank=1)
    assert done.returncode == 1
    shown = [ln for ln in done.stderr.splitlines() if ERROR_PREFIX not in ln]
    assert shown == [
        "Traceback (most recent call last):",
        '  File "<training cell>", line 5, in kf_train_cell',
        "    helper()",
        '  File "<training cell>", line 4, in helper',
        "    return 1 / 0",
        "           ~~^~~",
        "ZeroDivisionError: division by zero",
    ]
    record = parse_error_record(done.stderr.splitlines()[-1])
    assert record is not None
    assert (record["source"], record["exc_type"], record["message"]) == (
        "Rank 1",
        "ZeroDivisionError",
        "division by zero",
    )
    assert record["traceback"] == shown
    # Nothing is lost: the full traceback (with the runner's frames) is in the record on disk.
    assert "kf_entry.py" in record["full"] and "_kfj_main" in record["full"]


def test_runner_writes_the_termination_message_once(tmp_path):
    term = tmp_path / "termination-log"
    term.write_text("")
    fn = build_cell_function("raise ValueError('bad ' * 2000)\n")
    (tmp_path / "f.py").write_text(fn.source)
    (tmp_path / "a.json").write_text("{}")
    env = {**os.environ, "RANK": "3", "KF_JUPYTER_TERMINATION_LOG": str(term)}
    runner = tmp_path / "kf_entry.py"  # not from the package folder: its types.py would shadow
    runner.write_text(RUNNER.read_text())
    argv = [sys.executable, str(runner), str(tmp_path / "f.py"), fn.name, str(tmp_path / "a.json")]
    subprocess.run([*argv, "none"], env=env, capture_output=True, timeout=60)
    text = term.read_text()
    assert len(text.encode()) <= 4096  # what Kubernetes keeps of a termination message
    pod = {"status": {"containerStatuses": [{"state": {"terminated": {"message": text}}}]}}
    failure = failure_from_pods([pod])
    assert failure is not None and failure.source == "Rank 3"
    assert failure.exc_type == "ValueError"
    # A second failing process of the same pod does not overwrite the first one's cause.
    env["RANK"] = "0"
    subprocess.run([*argv, "none"], env=env, capture_output=True, timeout=60)
    assert term.read_text() == text


def test_earliest_record_of_several_pods_wins():
    def pod(rank: int, t: float) -> dict:
        rec = {"source": f"Rank {rank}", "rank": rank, "exc_type": "E", "message": "", "time": t}
        msg = ERROR_PREFIX + json.dumps(rec)
        return {"status": {"containerStatuses": [{"state": {"terminated": {"message": msg}}}]}}

    failure = failure_from_pods([pod(0, 20.0), pod(2, 10.0), {"status": {}}])
    assert failure == Failure("Rank 2", "E", "", [])
    assert failure_from_pods([{"status": {}}]) is None


# -- the local backend: plain processes --------------------------------------------------------


def rank_one_name_error():
    import os
    import time

    if os.environ["KF_JUPYTER_NODE_RANK"] == "1":
        print(undefined_name)  # noqa: F821
    time.sleep(60)


def test_plain_job_failure_is_rank_1_with_its_exception(client):
    from kf_jupyter.magics.core import failure_error_text

    name = client.train(
        JAXTrainer(func=rank_one_name_error, num_nodes=2, initialize_distributed=False)
    )
    with pytest.raises(JobFailedError) as err:
        client.wait_for_job_status(name, timeout=60)
    job = client.get_job(name)
    failure = job.failure
    assert failure is not None
    assert (failure.source, failure.exc_type) == ("Rank 1", "NameError")
    assert failure.message == "name 'undefined_name' is not defined"
    assert failure.traceback[-1] == "NameError: name 'undefined_name' is not defined"
    assert not any("kf_entry" in ln for ln in failure.traceback)
    # The status message and the raised error start with the cause.
    assert job.message.startswith("Rank 1 failed: NameError: name 'undefined_name' is not defined")
    assert "Rank 1 failed: NameError" in str(err.value)
    assert job.to_dict()["failure"]["exc_type"] == "NameError"
    # %kf_jobs's cause column, and the cell's error.
    assert job_cause(job) == "Rank 1: NameError: name 'undefined_name' is not defined"
    text = failure_error_text(name, failure)
    assert text.splitlines()[0] == (
        f"Job {name} failed. Rank 1 failed: NameError: name 'undefined_name' is not defined"
    )
    # Logs a person reads: no protocol line; the raw records keep the error record.
    logs = list(client.get_job_logs(name))
    assert not any("##kf-jupyter" in ln for ln in logs)
    assert any(ln.endswith("NameError: name 'undefined_name' is not defined") for ln in logs)
    raw = [r.line for r in client.iter_log_records(name)]
    assert any(ln.startswith(ERROR_PREFIX) for ln in raw)
    assert_no_orphans(name)


def killed_by_signal():
    import os
    import signal
    import time

    if os.environ["KF_JUPYTER_NODE_RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def test_a_rank_without_a_python_exception_still_names_who_and_how(client):
    name = client.train(
        JAXTrainer(func=killed_by_signal, num_nodes=2, initialize_distributed=False)
    )
    with pytest.raises(JobFailedError):
        client.wait_for_job_status(name, timeout=60)
    failure = client.get_job(name).failure
    assert failure is not None and failure.source == "Rank 1"  # one process per node
    # Started cold the process is the rank (SIGKILL seen as such); a warm-pool start reports
    # the worker's exit code (issue 15's pool), so both are accepted here.
    assert failure.exc_type in ("killed by signal 9 (SIGKILL)", "exit code 1"), failure
    message = client.get_job(name).message
    assert message.startswith("Rank 1 ") and "process node-1 (python" not in message, message


# -- logs a person wants to read ---------------------------------------------------------------


def test_banner_and_protocol_lines_are_hidden_and_cr_lines_collapse():
    assert all(is_banner(ln) for ln in OMP_BANNER)
    assert not is_banner("W1201 10:03:01 9785 torch/distributed/run.py:874] something else")
    records = [LogRecord("node-0", ln) for ln in OMP_BANNER] + [
        LogRecord("rank-0", '##kf-jupyter:report {"step": 1, "progress": 0.5, "metrics": {}}'),
        LogRecord("rank-0", "epoch 1"),
        # The backends deliver a finished bar collapsed; a line with `\r` inside collapses here.
        LogRecord("rank-0", "  0%|     | 0/3\r 33%|#    | 1/3\r100%|#####| 3/3"),
        LogRecord("rank-0", '##kf-jupyter:result {"ok": 1}'),
    ]
    assert list(readable(records)) == [
        LogRecord("rank-0", "epoch 1"),
        LogRecord("rank-0", "100%|#####| 3/3"),
    ]
    assert collapse_cr("a\rb\r") == "b"


def test_log_text_splits_at_newlines_only(tmp_path):
    """A log read whole (a cluster's pod log, the lines a failure message quotes) is split as a
    terminal shows it: a `\\r` bar is one line at its last state, and form feeds or U+2028 in
    a user's output do not start new lines (str.splitlines splits at all of them)."""
    from kf_jupyter.backends.local.supervisor import last_lines

    text = "  0%|   | 0/3\r 33%|#  | 1/3\r100%|###| 3/3\nwin\r\npage\x0cbreak \u2028 sep\n\n"
    assert log_lines(text) == ["100%|###| 3/3", "win", "page\x0cbreak \u2028 sep", ""]
    assert log_lines("no newline at the end") == ["no newline at the end"]
    log = tmp_path / "rank-0.log"
    log.write_text(text + "\r 10%|#\r 20%|##\rTraceback (most recent call last):\nE: boom\n")
    assert last_lines(str(log)) == [
        "100%|###| 3/3",
        "win",
        "page\x0cbreak \u2028 sep",
        "Traceback (most recent call last):",
        "E: boom",
    ]


def tqdm_like(steps=6, delay=0.3):
    """Writes a progress bar the way tqdm does into a file: `\\r` + bar, no newline."""
    import sys
    import time

    for i in range(steps + 1):
        bar = "#" * i + " " * (steps - i)
        sys.stderr.write(f"\r{100 * i // steps:3d}%|{bar}| {i}/{steps}")
        sys.stderr.flush()
        time.sleep(delay)
    sys.stderr.write("\n")
    print("done", flush=True)


def test_progress_bar_is_one_updating_line_per_rank(client):
    name = client.train(JAXTrainer(func=tqdm_like, num_nodes=2, initialize_distributed=False))
    state = LogState()
    updates: dict[str, set[str]] = {}
    printed: list[tuple[str, str]] = []
    for rec in client.iter_log_records(name, follow=True):
        if rec.line.startswith("\r"):
            updates.setdefault(rec.source, set()).add(rec.line)
        if state.add(rec.source, rec.line):
            printed.extend((rec.source, text) for text in state.printed)
    client.wait_for_job_status(name, timeout=60)
    # While it ran, the bar came as updates (not only at the end) ...
    assert all(len(u) >= 2 for u in updates.values()) and len(updates) == 2, updates
    # ... and the monitor's buffer holds one line per rank for it, at its final state.
    for src in ("rank-0", "rank-1"):
        bars = [ln for s, ln in state.buffer if s == src and "|" in ln]
        assert bars == ["100%|######| 6/6"], list(state.buffer)
        # The text view prints the finished bar once, then the next line.
        assert [ln for s, ln in printed if s == src] == ["100%|######| 6/6", "done"]
    # Reading the finished job: one line for the bar.
    logs = list(client.get_job_logs(name, step="rank-1"))
    assert logs == ["100%|######| 6/6", "done"]


def test_tail_counts_readable_lines(client):
    def prints_then_returns():
        for i in range(5):
            print("line", i)
        return {"x": 1}

    name = client.train(
        JAXTrainer(func=prints_then_returns, num_nodes=1, initialize_distributed=False)
    )
    client.wait_for_job_status(name, timeout=60)
    assert list(client.get_job_logs(name, tail_lines=2)) == ["line 3", "line 4"]


# -- real frameworks: the first rank that failed, its exception, the user's frames -------------


def torch_rank_one_name_error():
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        print(undefined_name)  # noqa: F821
    dist.barrier()


def mpi_rank_one_fails():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 1:
        raise KeyError("missing on rank one")
    comm.Barrier()


def jax_rank_one_fails():
    import jax

    if jax.process_index() == 1:
        raise ValueError("jax rank one")
    import time

    time.sleep(60)


def xgb_rank_one_fails():
    from xgboost import collective

    if collective.get_rank() == 1:
        raise RuntimeError("xgboost rank one")
    collective.allreduce(__import__("numpy").ones(1), collective.Op.SUM)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("trainer", "exc_type", "message", "env"),
    [
        (
            TorchTrainer(func=torch_rank_one_name_error, num_nodes=1, num_proc_per_node=2),
            "NameError",
            "name 'undefined_name' is not defined",
            {},
        ),
        (
            MPITrainer(func=mpi_rank_one_fails, num_nodes=1, num_proc_per_node=2),
            "KeyError",
            "'missing on rank one'",
            {},
        ),
        (JAXTrainer(func=jax_rank_one_fails, num_nodes=2), "ValueError", "jax rank one", {
            "JAX_PLATFORMS": "cpu"}),
        (XGBoostTrainer(func=xgb_rank_one_fails, num_nodes=2), "RuntimeError", "xgboost rank one", {}),
    ],
    ids=["torch", "mpi", "jax", "xgboost"],
)  # fmt: skip
def test_framework_failure_names_rank_1_and_its_exception(client, trainer, exc_type, message, env):
    from kf_jupyter import RuntimeConfig

    name = client.train(trainer, runtime_config=RuntimeConfig(env=env) if env else None)
    with pytest.raises(JobFailedError):
        client.wait_for_job_status(name, timeout=240)
    job = client.get_job(name)
    assert job.failure is not None, job.message
    assert (job.failure.source, job.failure.exc_type, job.failure.message) == (
        "Rank 1",
        exc_type,
        message,
    )
    assert job.message.startswith(f"Rank 1 failed: {exc_type}: {message}")
    tb = "\n".join(job.failure.traceback)
    assert "kf_entry" not in tb and "ChildFailedError" not in tb and "_kfj_" not in tb
    logs = list(client.get_job_logs(name))
    assert not any("##kf-jupyter" in ln or "OMP_NUM_THREADS" in ln for ln in logs)
    assert_no_orphans(name)


def xgb_rank_one_fails_slow_to_report():
    import time

    from xgboost import collective

    class SlowToPrint(RuntimeError):
        def __str__(self) -> str:
            time.sleep(1)  # a report that takes a moment, as on a loaded machine
            return "xgboost rank one, slowly"

    if collective.get_rank() == 1:
        raise SlowToPrint()
    collective.allreduce(__import__("numpy").ones(1), collective.Op.SUM)


@pytest.mark.slow
def test_xgboost_rank_1_is_the_cause_even_when_its_report_is_slow(client):
    # Rank 1's failure closes its communicator, which breaks rank 0's allreduce: rank 0's
    # "Ring allreduce failed" is a consequence, and must not become the job's cause even when
    # rank 0 reports (and exits) before rank 1 has finished writing its own report. Before the
    # fix rank 1 reported only after the communicator was closed: the job said "Rank 0 failed:
    # XGBoostError" (or rank 1 was stopped before it reported at all).
    name = client.train(XGBoostTrainer(func=xgb_rank_one_fails_slow_to_report, num_nodes=2))
    with pytest.raises(JobFailedError):
        client.wait_for_job_status(name, timeout=240)
    job = client.get_job(name)
    assert job.failure is not None, job.message
    assert job.failure.source == "Rank 1", job.message
    assert job.failure.exc_type.endswith("SlowToPrint"), job.message
    assert job.failure.message == "xgboost rank one, slowly"
    assert job.message.startswith("Rank 1 failed:"), job.message
    assert "XGBoostError" not in job.message.split("\n", 1)[0]
    assert_no_orphans(name)


def test_bar_interrupted_by_report_lines_is_still_one_line():
    # tqdm draws on stderr while report() prints on stdout: the report's newline ends each
    # drawing of the bar in the file.
    rep = '##kf-jupyter:report {"step": 1, "progress": 0.5, "metrics": {"loss": 1.0}}'
    lines = [f"  0%|  | 0/2{rep}", f" 50%|# | 1/2{rep}", f"100%|##| 2/2{rep}", "", "finished"]
    records = [LogRecord("rank-0", ln) for ln in lines]
    assert [r.line for r in readable(records)] == ["100%|##| 2/2", "finished"]
    state = LogState()
    printed = [t for r in records if state.add(r.source, r.line) for t in state.printed]
    assert [ln for _, ln in state.buffer] == ["100%|##| 2/2", "finished"]
    assert printed == ["100%|##| 2/2", "finished"]
    assert state.progress == 0.5 and state.metrics["loss"]


@pytest.mark.slow
def test_kubernetes_failure_comes_from_the_rank_termination_message(
    k8s_admin_kubeconfig, k8s_namespace, k8s_standin
):
    from .test_k8s_backend import _backend

    backend = _backend(k8s_admin_kubeconfig, k8s_namespace)
    trainer = TorchTrainer(func=torch_rank_one_name_error, num_nodes=1, num_proc_per_node=2)
    name = backend.train(trainer)
    with pytest.raises(JobFailedError) as err:
        backend.wait_for_job_status(name, timeout=300)
    job = backend.get_job(name)
    assert job.failure is not None, job.message
    assert (job.failure.source, job.failure.exc_type) == ("Rank 1", "NameError")
    assert job.message.startswith("Rank 1 failed: NameError: name 'undefined_name' is not defined")
    assert "Rank 1 failed: NameError" in str(err.value)
    assert job_cause(job) == "Rank 1: NameError: name 'undefined_name' is not defined"
    logs = list(backend.get_job_logs(name))
    assert any("NameError: name 'undefined_name'" in ln for ln in logs)
    assert not any("##kf-jupyter" in ln or "OMP_NUM_THREADS" in ln for ln in logs)


# What torchrun 2.13 prints after rank 1 failed (paths shortened).
TORCHRUN_DUMP = """\
E1201 10:05:07.526000 12864 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 12873) of binary: /venv/bin/python
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 6, in <module>
    sys.exit(main())
             ^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
/jobs/x/work/node-0/kf_entry.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 12873) 
============================================================
after the box"""  # noqa: W291


def test_torchruns_elastic_dump_is_folded_but_a_users_traceback_is_not():
    user_tb = [
        "Traceback (most recent call last):",
        '  File "<training cell>", line 6, in kf_train_cell',
        "    print(undefined_name)",
        "NameError: name 'undefined_name' is not defined",
    ]
    # On a cluster the ranks and torchrun share the pod's log: one source.
    records = [LogRecord("node-0", ln) for ln in [*user_tb, *TORCHRUN_DUMP.split("\n")]]
    shown = [r.line for r in readable(records)]
    assert shown == [*user_tb, TORCHRUN_DUMP.split("\n")[0], "after the box"]
    state = LogState()
    printed = [t for r in records if state.add(r.source, r.line) for t in state.printed]
    assert printed == shown
    # A traceback cut short by the end of the log is still shown.
    state.add("rank-0", "Traceback (most recent call last):")
    assert state.flush_held() == [("rank-0", "Traceback (most recent call last):")]


def test_handle_logs_are_readable_and_records_raw(client):
    from kf_jupyter.magics.handle import JobHandle

    def reports():
        import kf_jupyter

        kf_jupyter.report(step=1, loss=0.5)
        print("trained")
        return 3

    name = client.train(JAXTrainer(func=reports, num_nodes=1, initialize_distributed=False))
    job = JobHandle(client, name, "local")
    assert job.wait(timeout=60).status == "Complete"
    assert job.logs() == ["trained"]
    assert [r.line.split(" ", 1)[0] for r in job.records()] == [
        "##kf-jupyter:report",
        "trained",
        "##kf-jupyter:result",
    ]
