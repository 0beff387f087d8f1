"""Warm starts (issue 15): the same ranks, environments, results and failures as a cold start.

Real torch / JAX / XGBoost ranks forked from a real pool process; cold runs of the same job (the
`Warm(False)` option: bash -> torchrun -> python) are the reference.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from kf_jupyter import JAXTrainer, TorchTrainer, XGBoostTrainer
from kf_jupyter.backends.local.warm import pool as warm_pool
from kf_jupyter.config import RuntimeConfig
from kf_jupyter.errors import JobFailedError
from kf_jupyter.options import ActiveDeadlineSeconds, Warm

from .test_local_support import assert_no_orphans, client_fixture, job_processes  # noqa: F401

pytestmark = pytest.mark.slow


def dump_world(out_dir):
    """Write this rank's environment, argv, cwd and sys.path to out_dir/<rank>.json."""
    import json
    import os
    import sys

    rank = os.environ.get("RANK") or os.environ.get("JAX_PROCESS_ID") or os.environ["DMLC_TASK_ID"]
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as fh:
        json.dump(
            {"env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path}, fh
        )
    return int(rank)


def torch_sum():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return float(t)


def torch_rank1_fails():
    import os

    if os.environ["RANK"] == "1":
        raise ValueError("boom on rank one")
    import time

    time.sleep(60)


def sleeps():
    import time

    print("sleeping", flush=True)
    time.sleep(300)


def leaks():
    """Leave state behind in every way a module can; report what it found when it started."""
    import os

    import torch

    found = {
        "torch_attr": getattr(torch, "_kfj_leak", None),
        "env": os.environ.get("KFJ_LEAK"),
        "builtin": getattr(__builtins__, "kfj_leak", None)
        if not isinstance(__builtins__, dict)
        else __builtins__.get("kfj_leak"),
        "torch_ones": torch.ones(1).item(),
    }
    torch._kfj_leak = 1
    os.environ["KFJ_LEAK"] = "1"
    import builtins

    builtins.kfj_leak = 1
    torch.ones = lambda *a, **k: "patched"
    return found


def _wait_ready(client, framework: str, timeout: float = 120) -> warm_pool.Pool:
    """The `framework` pool a default job of it uses, started and waited for until it is ready."""
    pool = client.backend.prestart_pool(framework)
    assert pool is not None
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        meta = warm_pool._read_meta(pool.meta) or {}
        if meta.get("state") == "ready" and pool.socket.exists():
            return pool
        time.sleep(0.05)
    raise AssertionError(f"the {framework} pool did not become ready in {timeout} s: {pool.log}")


def _wait_all_ready(client, timeout: float = 300) -> None:
    """Every pool of the state folder that runs is ready (accepts launches)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        pools = warm_pool.list_pools(client.backend.state_dir)  # one being launched included
        if pools and all(p.get("alive") and p.get("state") == "ready" for p in pools):
            return
        time.sleep(0.05)
    raise AssertionError(f"the warm pools did not become ready in {timeout} s")


def _normalize(record: dict, job: str) -> dict:
    text = json.dumps(record, sort_keys=True)
    text = text.replace(job, "<JOB>")
    text = re.sub(r"torchelastic_[A-Za-z0-9_]+", "torchelastic_<X>", text)
    text = re.sub(r"none_[A-Za-z0-9_]+", "none_<X>", text)
    out = json.loads(text)
    env = out["env"]
    for var in ("PET_MASTER_PORT", "MASTER_PORT", "DMLC_TRACKER_PORT"):
        if var in env:
            env[var] = "<PORT>"
    if "KUBEFLOW_TRAINER_SERVER_URL" in env:  # the job's own status endpoint: a port per job
        env["KUBEFLOW_TRAINER_SERVER_URL"] = re.sub(
            r"127\.0\.0\.1:\d+", "127.0.0.1:<P>", env["KUBEFLOW_TRAINER_SERVER_URL"]
        )
    if "JAX_COORDINATOR_ADDRESS" in env:
        env["JAX_COORDINATOR_ADDRESS"] = env["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[0] + ":<P>"
    return out


def _run_dump(
    client, make, tmp_path: Path, warm: bool, runtime_config: RuntimeConfig | None = None
) -> tuple[str, dict[str, dict]]:
    out = tmp_path / ("warm" if warm else "cold")
    out.mkdir()
    trainer = make(func_args={"out_dir": str(out)})
    name = client.train(trainer, options=[Warm(warm)], runtime_config=runtime_config)
    job = client.wait_for_job_status(name, timeout=180)
    assert job.warm is warm, (job.warm, client.get_job_events(name))
    return name, {p.stem: _normalize(json.loads(p.read_text()), name) for p in out.glob("*.json")}


SHAPES = {
    "torch-1x2": (
        "torch",
        lambda **kw: TorchTrainer(func=dump_world, num_nodes=1, num_proc_per_node=2, **kw),
    ),
    "torch-2x2": (
        "torch",
        lambda **kw: TorchTrainer(func=dump_world, num_nodes=2, num_proc_per_node=2, **kw),
    ),
    "jax-2": ("jax", lambda **kw: JAXTrainer(func=dump_world, num_nodes=2, **kw)),
    "xgboost-2": ("xgboost", lambda **kw: XGBoostTrainer(func=dump_world, num_nodes=2, **kw)),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_warm_ranks_see_exactly_what_cold_ranks_see(client, tmp_path, shape):
    framework, make = SHAPES[shape]
    _wait_ready(client, framework)
    cold_name, cold = _run_dump(client, make, tmp_path, warm=False)
    warm_name, warm = _run_dump(client, make, tmp_path, warm=True)
    assert sorted(cold) == sorted(warm) and len(cold) >= 2
    for rank in cold:
        c, w = cold[rank], warm[rank]
        assert c["argv"] == w["argv"]
        assert c["cwd"] == w["cwd"]
        assert c["path"] == w["path"]
        missing = sorted(set(c["env"]) - set(w["env"]))
        extra = sorted(set(w["env"]) - set(c["env"]))
        assert not missing and not extra, (rank, missing, extra)
        differ = {k: (c["env"][k], w["env"][k]) for k in c["env"] if c["env"][k] != w["env"][k]}
        assert not differ, (rank, differ)
        assert not any(k.startswith("KF_JUPYTER_WARM") for k in w["env"])
    # The same per-rank log files, and the events say how each job started.
    logs = lambda n: sorted(p.name for p in (client.backend.job_dir(n) / "logs").iterdir())  # noqa: E731
    assert logs(cold_name) == logs(warm_name)
    reasons = {e.reason for e in client.get_job_events(warm_name)}
    assert "WarmStart" in reasons and "ColdStart" not in reasons
    assert "ColdStart" in {e.reason for e in client.get_job_events(cold_name)}


def test_warm_and_cold_results_and_failures_match(client):
    _wait_ready(client, "torch")
    results = {}
    for warm in (False, True):
        name = client.train(
            TorchTrainer(func=torch_sum, num_nodes=2, num_proc_per_node=2), options=[Warm(warm)]
        )
        job = client.wait_for_job_status(name, timeout=180)
        assert job.warm is warm
        results[warm] = client.get_job_result(name)
    assert results[True] == results[False] == 10.0
    messages = {}
    for warm in (False, True):
        name = client.train(
            TorchTrainer(func=torch_rank1_fails, num_nodes=1, num_proc_per_node=2),
            options=[Warm(warm)],
        )
        with pytest.raises(JobFailedError):
            client.wait_for_job_status(name, timeout=180)
        job = client.get_job(name)
        messages[warm] = job.message
        assert job.reason == "FailedJobs"
        assert_no_orphans(name)
    for warm, message in messages.items():
        assert "Rank 1" in message, (warm, message)
        assert "ValueError: boom on rank one" in message, (warm, message)


def test_warm_cancel_and_deadline_leave_nothing(client):
    _wait_ready(client, "torch")
    name = client.train(TorchTrainer(func=sleeps, num_nodes=1, num_proc_per_node=2))
    client.wait_for_job_status(name, {"Running"}, timeout=60)
    end = time.monotonic() + 60
    while time.monotonic() < end and "sleeping" not in "".join(client.get_job_logs(name)):
        time.sleep(0.05)
    assert client.get_job(name).warm is True
    client.backend.cancel_job(name)
    assert_no_orphans(name)
    job = client.get_job(name)
    assert (job.status, job.reason) == ("Failed", "Cancelled")
    name = client.train(
        TorchTrainer(func=sleeps, num_nodes=1, num_proc_per_node=2),
        options=[ActiveDeadlineSeconds(2)],
    )
    with pytest.raises(JobFailedError, match="DeadlineExceeded"):
        client.wait_for_job_status(name, timeout=120)
    assert client.get_job(name).warm is True
    assert_no_orphans(name)


def leaves_daemons():
    """Succeed, leaving a child in a session of its own and a double-forked one behind."""
    import os
    import subprocess

    subprocess.Popen(["sleep", "300"], start_new_session=True)
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            import time

            time.sleep(300)
        os._exit(0)
    os.wait()
    return os.getpid()


def test_a_warm_job_that_succeeds_leaving_daemons_reads_complete_and_leaves_nothing(client):
    """A node forked ahead says its end to the pool before its memory is torn down (issue 21):
    what its ranks left behind is still stopped, and the job's result and status are right."""
    _wait_ready(client, "torch")
    for _ in range(2):  # the second runs on what the pool forked ahead after the first
        name = client.train(TorchTrainer(func=leaves_daemons, num_nodes=1, num_proc_per_node=2))
        job = client.wait_for_job_status(name, timeout=120)
        assert (job.status, job.warm) == ("Complete", True)
        assert isinstance(client.get_job_result(name), int)
        assert_no_orphans(name, timeout=10)
    starts = [e.message for e in client.get_job_events(name) if e.reason == "WarmStart"]
    assert starts and "forked ahead of the job" in starts[0], starts


def test_max_restarts_steps_aside_and_says_why(client):
    _wait_ready(client, "torch")
    name = client.train(
        TorchTrainer(func=torch_sum, num_nodes=1, num_proc_per_node=2, max_restarts=1)
    )
    job = client.wait_for_job_status(name, timeout=180)
    assert job.warm is False
    cold = [e.message for e in client.get_job_events(name) if e.reason == "ColdStart"]
    assert cold and "max_restarts=1" in cold[0], cold
    assert client.get_job_result(name) == 3.0


def test_no_state_reaches_the_next_warm_job(client):
    _wait_ready(client, "torch")
    seen = []
    for _ in range(2):
        name = client.train(TorchTrainer(func=leaks, num_nodes=1, num_proc_per_node=1))
        job = client.wait_for_job_status(name, timeout=120)
        assert job.warm is True
        seen.append(client.get_job_result(name))
    assert (
        seen[0] == seen[1] == {"torch_attr": None, "env": None, "builtin": None, "torch_ones": 1.0}
    )


def test_pool_follows_packages_and_interpreter(client, tmp_path):
    """A package added to the job's import path, or another interpreter, gets another pool."""
    site = tmp_path / "env" / "lib" / "python3" / "site-packages"  # where pip installs
    site.mkdir(parents=True)
    rc = RuntimeConfig(env={"PYTHONPATH": str(site)})

    def run():
        name = client.train(
            TorchTrainer(func=torch_sum, num_nodes=1, num_proc_per_node=1), runtime_config=rc
        )
        client.wait_for_job_status(name, timeout=180)
        return json.loads((client.backend.job_dir(name) / "warm-node-0.json").read_text())

    run()  # starts the pool; a job never waits for it (issue 34)
    _wait_all_ready(client)
    first = run()
    second = run()
    assert first["warm"] and second["warm"] and first["pool_pid"] == second["pool_pid"]
    time.sleep(0.01)
    (site / "newpkg.py").write_text("VALUE = 1\n")  # "pip install": the folder changes
    run()  # starts the new key's pool
    _wait_all_ready(client)
    third = run()
    assert third["warm"] and third["pool_pid"] != first["pool_pid"]
    env = {**os.environ, "PATH": os.environ.get("PATH", "")}
    other = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else None
    if other and os.path.realpath(other) != os.path.realpath(sys.executable):
        assert warm_pool.pool_key(sys.executable, "torch", env) != warm_pool.pool_key(
            other, "torch", env
        )


def test_no_pool_process_outlives_its_owner(tmp_path):
    state = tmp_path / "state"
    script = textwrap.dedent(
        f"""
        import time

        from kf_jupyter import TorchTrainer, TrainerClient
        from kf_jupyter.backends.local.config import LocalBackendConfig

        def f():
            return 1

        c = TrainerClient(LocalBackendConfig(state_dir={str(state)!r}))
        # A loaded machine may import torch for longer than a job waits for the pool.
        pool = c.backend.prestart_pool("torch")
        end = time.monotonic() + 300
        while not pool.socket.exists() and time.monotonic() < end:
            time.sleep(0.05)
        for _ in range(2):
            name = c.train(TorchTrainer(func=f, num_nodes=1, num_proc_per_node=1))
            assert c.wait_for_job_status(name, timeout=180).warm
        print("done", flush=True)
        """
    )
    path = tmp_path / "owner.py"
    path.write_text(script)
    out = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-2000:]

    def pool_procs():
        found = []
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if any(a.endswith("zygote.py") for a in cmd) and str(state) in " ".join(cmd):
                found.append(p)
        return found

    end = time.monotonic() + 30
    while pool_procs() and time.monotonic() < end:
        time.sleep(0.1)
    assert not pool_procs()
    assert not list((state / "warm").glob("*.json"))  # each pool removed its record and socket
    assert not any(job_processes(p.name) for p in (state / "jobs").iterdir())


def test_magics_no_warm_flag_kf_jobs_and_kf_pool(tmp_path, monkeypatch, capsys):
    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.magics.core import KubeflowMagics

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    state = magics.client("local").backend.state_dir
    try:
        body = "import torch\nprint('ranks', torch.ones(1).item())\n"
        sh.run_cell("%%torchtrain -n 1 -p 1 --no-warm\n" + body)
        _wait_ready(magics.client("local"), "torch", timeout=300)  # a job never waits for it
        sh.run_cell("%%torchtrain -n 1 -p 1\n" + body)
        jobs = magics.client("local").list_jobs()
        assert [j.warm for j in jobs] == [False, True], [(j.name, j.warm) for j in jobs]
        capsys.readouterr()
        sh.run_cell("%kf_jobs")
        out = capsys.readouterr().out
        assert "start" in out and "cold" in out and "warm" in out, out
        sh.run_cell("%kf_pool")
        out = capsys.readouterr().out
        assert "torch" in out and "MiB" in out and "ready" in out, out
        sh.run_cell("%kf_pool --stop")
        out = capsys.readouterr().out
        assert "stopped 1 warm pool process" in out, out
        assert not [p for p in warm_pool.list_pools(state) if p.get("alive")]
    finally:
        for j in magics.client("local").list_jobs():
            magics.client("local").delete_job(j.name)
        warm_pool.stop_all(state)


def uses_inflection():
    import sys

    import inflection
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.destroy_process_group()
    return {"python": sys.executable, "camel": inflection.camelize("device_type")}


def test_jobs_with_packages_start_warm_from_their_own_pool(client, tmp_path):
    """The layered env's `torchrun` is our #!/bin/sh wrapper: its python gets a pool (issue 21),
    reused by the next job, and the ranks see exactly what cold ones see. The job that builds
    the environment (its first phase, issue 22) starts cold and says why: no interpreter is
    there to choose a pool for until pip is done."""
    rc = RuntimeConfig(packages_to_install=["inflection"])  # not in the project's environment
    trainer = lambda **kw: TorchTrainer(num_nodes=1, num_proc_per_node=2, **kw)  # noqa: E731
    first = client.train(trainer(func=uses_inflection), runtime_config=rc)
    assert client.wait_for_job_status(first, timeout=300).warm is False
    cold = [e.message for e in client.get_job_events(first) if e.reason == "ColdStart"]
    assert cold == ["every node starts cold: its package environment is built first"], cold
    assert client.get_job_result(first)["camel"] == "DeviceType"
    # The job that starts the environment's pool does not wait for it (issue 34): it may run
    # cold; the jobs after it, once the pool is ready, run warm.
    name = client.train(trainer(func=uses_inflection), runtime_config=rc)
    client.wait_for_job_status(name, timeout=300)
    _wait_all_ready(client)
    runs = []
    for _ in range(2):
        name = client.train(trainer(func=uses_inflection), runtime_config=rc)
        job = client.wait_for_job_status(name, timeout=300)
        warm = json.loads((client.backend.job_dir(name) / "warm-node-0.json").read_text())
        runs.append((job, client.get_job_result(name), warm))
    envs = client.backend.state_dir / "envs"
    for job, result, warm in runs:
        assert job.warm is True and warm["warm"], warm
        assert result["camel"] == "DeviceType"
        assert Path(result["python"]).parent.parent.parent == envs
    assert runs[0][2]["pool_pid"] == runs[1][2]["pool_pid"]  # the same pool, reused
    pools = [p for p in warm_pool.list_pools(client.backend.state_dir) if p["alive"]]
    assert runs[0][1]["python"] in [p["python"] for p in pools]
    make = lambda **kw: trainer(func=dump_world, **kw)  # noqa: E731
    _, cold = _run_dump(client, make, tmp_path, warm=False, runtime_config=rc)
    _, warm_ = _run_dump(client, make, tmp_path, warm=True, runtime_config=rc)
    assert cold == warm_ and len(cold) == 2


def finalizer_at_exit():
    import weakref

    class Thing:
        pass

    keep = Thing()
    weakref.finalize(keep, print, "user finalizer ran at exit", flush=True)
    globals()["_kfj_keep"] = keep  # alive until the process ends: the atexit pass runs it
    return 1


def test_a_users_exit_finalizers_still_run_on_a_warm_rank(client):
    """The pool skips torch's own import-time finalizers at a rank's exit (issue 21's exit
    path); a finalizer the user's code makes runs there as it does cold."""
    _wait_ready(client, "torch")
    for warm in (False, True):
        name = client.train(
            TorchTrainer(func=finalizer_at_exit, num_nodes=1, num_proc_per_node=2),
            options=[Warm(warm)],
        )
        assert client.wait_for_job_status(name, timeout=180).warm is warm
        logs = "\n".join(client.get_job_logs(name))
        assert logs.count("user finalizer ran at exit") == 2, logs


def test_load_ext_starts_the_pool_of_every_installed_framework(tmp_path, monkeypatch):
    """%load_ext starts torch's, JAX's and XGBoost's pools in the background, one after the
    other (failed before: only torch's), under the caps, with the supervisor host."""
    import importlib.util

    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.backends.local import supervisor_host
    from kf_jupyter.magics.core import KubeflowMagics

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)
    magics = KubeflowMagics(shell=sh)
    state = magics.client("local").backend.state_dir
    try:
        thread = magics.prestart()
        assert thread is not None
        thread.join(900)
        assert not thread.is_alive()
        want = {m for m in ("torch", "jax", "xgboost") if importlib.util.find_spec(m)}
        pools = [p for p in warm_pool.list_pools(state) if p["alive"]]
        assert {p["framework"] for p in pools} == want, pools
        assert all(p["state"] == "ready" for p in pools), pools
        assert supervisor_host.host_for(state)[0].exists()
    finally:
        warm_pool.stop_all(state)
