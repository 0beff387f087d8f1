"""Warm processes forked ahead of the job (issue 21).

The pool keeps a node (and the ranks that node will need) forked before any job arrives, so a
warm launch is a message to a process already past its fork. These tests run real torch jobs on
a real pool and check what a user (or `ps`) can see: which processes ran the job, that each
served one job only and was replaced, that a job arriving when none is ready still starts warm
and says why, that nothing forked ahead outlives the pool or the kernel, and that `%kf_pool`
shows them and counts their memory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from kf_jupyter import TorchTrainer
from kf_jupyter.backends.local.warm import pool as warm_pool
from kf_jupyter.options import Warm

from .magic_shell import line_magic_output
from .test_local_support import client_fixture  # noqa: F401
from .test_warm import _wait_ready

pytestmark = pytest.mark.slow


def pids_to(out_dir: str) -> int:
    """Write this rank's pid and parent pid to out_dir/<rank>."""
    import os

    with open(os.path.join(out_dir, os.environ["RANK"]), "w") as fh:
        fh.write(f"{os.getpid()} {os.getppid()}")
    return os.getpid()


def world_sum() -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return float(t)


#: A module without `from __future__ import annotations` (this one has it, and a function
#: ships its module's future imports): annotations are classes there, cold.
PLAIN_MODULE = '''
def how_python_compiled_me(x: int = 1) -> dict:
    """What differs if the runner is compiled otherwise than `python3 kf_entry.py` compiles it:
    annotations (a `from __future__ import annotations` leaking in makes them strings) and the
    file name of the runner's frames (a compiled copy keeps the name it was compiled under)."""
    import inspect
    import os

    runner = [f.filename for f in inspect.stack() if os.path.basename(f.filename) == "kf_entry.py"]
    work = os.environ["KF_JUPYTER_WORKDIR"]
    return {
        "annotations": repr(how_python_compiled_me.__annotations__),
        "runner_frames": len(runner),
        "runner_in_job": all(os.path.dirname(f) == work for f in runner),
    }
'''


def _spare(pool: warm_pool.Pool, ranks: int, timeout: float = 60.0) -> tuple[int, set[int]]:
    """(pid, rank pids) of the node the pool keeps forked ahead, once it has `ranks` ranks."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        meta = warm_pool._read_meta(pool.meta) or {}
        for pid in meta.get("spares") or []:
            try:
                kids = {c.pid for c in psutil.Process(pid).children()}
            except psutil.NoSuchProcess:
                continue
            if len(kids) == ranks:
                return pid, kids
        time.sleep(0.05)
    raise AssertionError(
        f"no node with {ranks} ranks forked ahead: {warm_pool._read_meta(pool.meta)}"
    )


def _warm_events(client: Any, name: str) -> list[str]:
    return [
        e.message for e in client.get_job_events(name) if e.reason in ("WarmStart", "ColdStart")
    ]


def _run_pids(
    client: Any, out: Path, nodes: int = 1, nproc: int = 2
) -> tuple[str, dict[str, tuple[int, int]]]:
    out.mkdir()
    name = client.train(
        TorchTrainer(
            func=pids_to, func_args={"out_dir": str(out)}, num_nodes=nodes, num_proc_per_node=nproc
        )
    )
    job = client.wait_for_job_status(name, timeout=180)
    assert job.warm is True, _warm_events(client, name)
    ranks = {}
    for p in out.iterdir():
        pid, ppid = p.read_text().split()
        ranks[p.name] = (int(pid), int(ppid))
    return name, ranks


def _node_pid(client: Any, name: str, node: int = 0) -> int:
    return int(
        json.loads((client.backend.job_dir(name) / f"warm-node-{node}.json").read_text())["pid"]
    )


def _gone(pids: set[int] | list[int], timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        left = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not left:
            return True
        time.sleep(0.1)
    return False


def test_a_job_runs_on_processes_forked_ahead_each_used_once_then_replaced(client, tmp_path):
    """Failed before: every node and rank was forked from the pool when its job arrived (no
    `spares` in the pool's record, and the events said `forked from pool process`)."""
    pool = _wait_ready(client, "torch", timeout=300)
    # The first job: the pool kept one rank ahead (a default job has one); the second rank of
    # this 1x2 job is forked when its node starts, and the pool learns to keep two.
    node, ranks = _spare(pool, ranks=1)
    name1, seen1 = _run_pids(client, tmp_path / "one")
    assert _node_pid(client, name1) == node
    assert {pid for pid, _ in seen1.values()} & ranks == ranks
    assert {ppid for _, ppid in seen1.values()} == {node}  # ranks are children of their node
    (event,) = _warm_events(client, name1)
    assert (
        "forked ahead of the job" in event
        and "1 of its 2 ranks forked ahead, 1 forked at its start" in event
    ), event

    # Replaced once the job is done, by new processes: nothing of job 1 is kept or reused.
    node2, ranks2 = _spare(pool, ranks=2)
    used1 = {node} | {pid for pid, _ in seen1.values()}
    assert node2 not in used1 and not ranks2 & used1
    assert _gone(used1)
    name2, seen2 = _run_pids(client, tmp_path / "two")
    assert _node_pid(client, name2) == node2
    assert {pid for pid, _ in seen2.values()} == ranks2
    (event,) = _warm_events(client, name2)
    assert "2 of its 2 ranks forked ahead" in event and "forked at its start" not in event, event

    node3, ranks3 = _spare(pool, ranks=2)
    used2 = {node2} | ranks2
    assert node3 not in used1 | used2 and not ranks3 & (used1 | used2)
    assert _gone(used2)


def wait_for_gate(gate: str) -> int:
    import os
    import time

    while not os.path.exists(gate):
        time.sleep(0.02)
    return 7


def test_the_pool_forks_its_next_spare_only_once_the_job_end_is_recorded(client, tmp_path):
    """The refill (a node and its ranks forked) never runs beside a job's end: the pool waits
    until the job's supervisor has written the end and let go of the pool's connection. Failed
    before: the pool forked the next spare the moment the node exited, while the supervisor
    (held here with SIGSTOP) had not even read that exit."""
    pool = _wait_ready(client, "torch", timeout=300)
    _spare(pool, ranks=1)
    gate = tmp_path / "gate"
    name = client.train(
        TorchTrainer(func=wait_for_gate, func_args={"gate": str(gate)}, num_proc_per_node=1)
    )
    client.wait_for_job_status(name, {"Running"}, timeout=180)
    node = _node_pid(client, name)
    assert not (warm_pool._read_meta(pool.meta) or {}).get("spares")  # the job took it
    st = json.loads((client.backend.job_dir(name) / "status.json").read_text())
    supervisor = psutil.Process(int(st["supervisor_pid"]))
    supervisor.suspend()
    try:
        gate.write_text("go")
        assert _gone([node], timeout=60), "the node did not end"
        # The node has ended and the pool has sent its exit; its supervisor has not read it.
        end = time.monotonic() + 0.8
        while time.monotonic() < end:
            assert not (warm_pool._read_meta(pool.meta) or {}).get("spares"), (
                "the pool forked its next spare before the job's end was recorded"
            )
            time.sleep(0.02)
        assert client.get_job(name).status == "Running"
    finally:
        supervisor.resume()
    job = client.wait_for_job_status(name, timeout=120)
    assert job.status == "Complete" and client.get_job_result(name) == 7
    _spare(pool, ranks=1, timeout=60)  # and then it does, as the supervisor lets go


def test_a_node_that_finds_none_ready_still_starts_warm_and_says_why(client):
    """The pool keeps one node ahead; a 2-node job's second node forks at its launch, warm,
    and its event says why (failed before: no such reason existed)."""
    pool = _wait_ready(client, "torch", timeout=300)
    _spare(pool, ranks=1)
    name = client.train(TorchTrainer(func=world_sum, num_nodes=2, num_proc_per_node=1))
    job = client.wait_for_job_status(name, timeout=180)
    assert job.warm is True
    assert client.get_job_result(name) == 3.0
    events = sorted(_warm_events(client, name))
    assert len(events) == 2, events
    ahead = [e for e in events if "forked ahead of the job" in e]
    now = [e for e in events if "as it arrived" in e and "no node forked ahead was left" in e]
    assert len(ahead) == 1 and len(now) == 1, events
    # ... and from now on the pool keeps two nodes ahead, one for each node of such a job.
    end = time.monotonic() + 60
    while (
        time.monotonic() < end
        and len((warm_pool._read_meta(pool.meta) or {}).get("spares") or []) < 2
    ):
        time.sleep(0.05)
    assert len(warm_pool._read_meta(pool.meta)["spares"]) == 2
    name = client.train(TorchTrainer(func=world_sum, num_nodes=2, num_proc_per_node=1))
    client.wait_for_job_status(name, timeout=180)
    assert all("forked ahead of the job" in e for e in _warm_events(client, name)), _warm_events(
        client, name
    )


def test_a_warm_rank_compiles_the_runner_as_python_does(client, tmp_path):
    """The runner is compiled once in the pool and renamed for each job: its frames carry the
    job's own kf_entry.py, and no `from __future__` of the pool's code leaks into the user's
    (failed before: the warm annotation was the string 'int', the cold one the class)."""
    import importlib.util

    path = tmp_path / "plain_module.py"
    path.write_text(PLAIN_MODULE)
    spec = importlib.util.spec_from_file_location("plain_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _wait_ready(client, "torch", timeout=300)
    got = {}
    for warm in (False, True):
        name = client.train(
            TorchTrainer(func=module.how_python_compiled_me, num_proc_per_node=1),
            options=[Warm(warm)],
        )
        assert client.wait_for_job_status(name, timeout=180).warm is warm
        got[warm] = client.get_job_result(name)
    assert got[True] == got[False], got
    assert got[True]["annotations"] == "{'x': <class 'int'>, 'return': <class 'dict'>}"
    assert got[True]["runner_frames"] >= 1 and got[True]["runner_in_job"]


def test_what_is_forked_ahead_is_shown_counted_and_ends_with_the_pool(
    client, tmp_path, monkeypatch, capsys
):
    """%kf_pool shows the processes forked ahead and their memory; the memory cap counts them;
    stopping the pool, or killing it, ends them (failed before: nothing was forked ahead)."""
    pool = _wait_ready(client, "torch", timeout=300)
    node, ranks = _spare(pool, ranks=1)
    (info,) = [p for p in warm_pool.list_pools(client.backend.state_dir) if p["alive"]]
    assert info["spares"] == [node] and info["spare_processes"] == 2
    assert info["spare_pss_bytes"] > 0
    assert warm_pool.pool_bytes(info) == info["family_pss_bytes"] > info["spare_pss_bytes"]
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(client.backend.state_dir))
    out = line_magic_output(capsys, "kf_pool")
    assert "forked ahead" in out and "2 (" in out, out

    warm_pool.stop_all(client.backend.state_dir)
    assert _gone({node} | ranks)

    # Killed outright: what it forked ahead dies with it (PDEATHSIG), nothing is left.
    pool = _wait_ready(client, "torch", timeout=300)
    node, ranks = _spare(pool, ranks=1)
    os.kill(int(warm_pool._read_meta(pool.meta)["pid"]), signal.SIGKILL)
    assert _gone({node} | ranks)


def test_nothing_forked_ahead_outlives_the_kernel(tmp_path):
    """A kernel killed outright (SIGKILL): its pool ends within seconds, and with it every
    process it forked ahead of a job."""
    state = tmp_path / "state"
    script = textwrap.dedent(
        f"""
        import json, time
        import psutil
        from kf_jupyter import TrainerClient
        from kf_jupyter.backends.local.config import LocalBackendConfig
        from kf_jupyter.backends.local.warm import pool as warm_pool

        c = TrainerClient(LocalBackendConfig(state_dir={str(state)!r}))
        pool = c.backend.prestart_pool("torch")
        end = time.monotonic() + 300
        while time.monotonic() < end:
            meta = warm_pool._read_meta(pool.meta) or {{}}
            spares = meta.get("spares") or []
            if spares and psutil.Process(spares[0]).children():
                break
            time.sleep(0.05)
        below = [c.pid for c in psutil.Process(meta["pid"]).children(recursive=True)]
        print(json.dumps({{"pool": meta["pid"], "below": below}}), flush=True)
        time.sleep(600)
        """
    )
    path = tmp_path / "kernel.py"
    path.write_text(script)
    kernel = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        line = kernel.stdout.readline() if kernel.stdout else ""
        assert line, "the kernel stand-in printed nothing"
        seen = json.loads(line)
        assert len(seen["below"]) >= 2  # a node and its rank, forked ahead
    finally:
        kernel.kill()
        kernel.wait()
    assert _gone({seen["pool"], *seen["below"]})


def _collapse_supported() -> str:
    """Why this machine cannot put the pool's memory on huge pages ('' when it can)."""
    try:
        mode = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "no transparent huge pages on this machine"
    if "[never]" in mode:
        return "transparent huge pages are switched off (never)"
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    if (major, minor) < (6, 1):
        return "a kernel before 6.1 has no MADV_COLLAPSE"
    return ""


def _anon_huge_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def test_what_a_node_shares_with_the_pool_is_on_huge_pages_and_a_job_still_runs(client, tmp_path):
    """The pool's memory is on huge pages, so each fork and each exit of a node or rank copies
    and tears down one page-table entry per 2 MiB instead of per 4 KiB (what `/proc/PID/
    smaps_rollup` shows as AnonHugePages), and a job on those processes still runs (that its
    writes stay its own: test_warm_fresh.py). Failed before: AnonHugePages was 0 in the pool."""
    why = _collapse_supported()
    if why:
        pytest.skip(why)
    pool = _wait_ready(client, "torch", timeout=300)
    node, ranks = _spare(pool, ranks=1)
    pool_pid = int(warm_pool._read_meta(pool.meta)["pid"])
    assert _anon_huge_kib(pool_pid) >= 2048, Path(f"/proc/{pool_pid}/smaps_rollup").read_text()
    assert _anon_huge_kib(node) >= 2048
    assert all(_anon_huge_kib(r) >= 2048 for r in ranks)
    name = client.train(TorchTrainer(func=world_sum, num_proc_per_node=2))
    job = client.wait_for_job_status(name, timeout=180)
    assert job.warm is True, _warm_events(client, name)
    assert client.get_job_result(name) == 3.0
