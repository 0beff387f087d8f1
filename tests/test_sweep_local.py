"""Local sweeps with real jobs (issue 25): SDK optimizer code with only the imports changed,
parameters as arguments and `KUBEFLOW_TRAINER_OPT_<NAME>`, failed trials, cancel, a sweep
that outlives the process that started it, the CPU budget.

Fast tests run plain Python trials (`JAXTrainer(initialize_distributed=False)`, started cold
with `Warm(False)`: no framework import); the SDK example runs torch trials (slow).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.options import Warm
from kf_jupyter.sdk.optimizer import OptimizerClient, Search
from kf_jupyter.sweeps import engine as eng
from kf_jupyter.sweeps import local as sweeps_local
from kf_jupyter.sweeps.space import parse_space

from .waits import DEADLINE, wait_until

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def state(tmp_path: Path):
    """A fresh state dir; every sweep and job in it is deleted afterwards."""
    s = tmp_path / "state"
    yield s
    cfg = LocalBackendConfig(state_dir=s, cwd=tmp_path)
    sweeps = sweeps_local.LocalSweeps(cfg)
    for rec in sweeps.list():
        sweeps.delete(rec["name"])
    from kf_jupyter.client import TrainerClient

    c = TrainerClient(cfg)
    for job in c.list_jobs():
        c.delete_job(job.name)
    from kf_jupyter.backends.local.warm.pool import stop_all

    stop_all(s)


def quadratic(x, tag="t"):
    import os

    x = float(x)
    assert os.environ["KUBEFLOW_TRAINER_OPT_X"] == str(os.environ["KUBEFLOW_TRAINER_OPT_X"])
    if x > 0.8:
        raise RuntimeError(f"x={x} is too large")
    if x < 0.2:
        print("no metric from this one")
        return
    print(f"x={x} param_env={os.environ['KUBEFLOW_TRAINER_OPT_X']} loss={(x - 0.5) ** 2}")


def start(state: Path, tmp_path: Path, func, space, n, parallel, **kw) -> tuple[Any, str]:
    cfg = LocalBackendConfig(state_dir=state, cwd=tmp_path)
    spec = eng.SweepSpec(
        name=sweeps_local.new_name(),
        params=parse_space(space),
        num_trials=n,
        parallel_trials=parallel,
        seed=kw.pop("seed", 1),
        **kw,
    )
    template = eng.TrialTemplate(
        JAXTrainer(func=func, initialize_distributed=False), options=[Warm(False)]
    )
    sweeps = sweeps_local.LocalSweeps(cfg)
    return sweeps, sweeps.start(spec, template)


def wait_done(sweeps, name: str, timeout: float = DEADLINE) -> dict:
    out = {}

    def done() -> bool:
        out["r"] = sweeps.read(name)
        return out["r"]["status"] in eng.SWEEP_TERMINAL

    wait_until(done, what=f"sweep {name} to end", timeout=timeout)
    return out["r"]


def test_trials_get_their_parameters_failures_are_recorded_and_the_best_wins(
    state: Path, tmp_path: Path
) -> None:
    sweeps, name = start(state, tmp_path, quadratic, {"x": Search.uniform(0, 1)}, 10, 2)
    rec = wait_done(sweeps, name)
    assert rec["status"] == "Complete", rec
    by_status: dict[str, list] = {}
    for t in rec["trials"]:
        by_status.setdefault(t["status"], []).append(t)
        x = float(t["parameters"]["x"])
        want = "Failed" if x > 0.8 else "MetricsUnavailable" if x < 0.2 else "Succeeded"
        assert t["status"] == want, t
    assert by_status.get("Succeeded") and by_status.get("Failed"), "seed 1 gives both kinds"
    for t in by_status["Failed"]:
        assert "too large" in t["message"], t
    for t in by_status["Succeeded"]:
        x = float(t["parameters"]["x"])
        assert float(t["metrics"]["loss"]["latest"]) == pytest.approx((x - 0.5) ** 2)
    best = min(by_status["Succeeded"], key=lambda t: abs(float(t["parameters"]["x"]) - 0.5))
    assert rec["best_trial"] == best["name"]
    # the same parameters reached the function's environment (printed by the trial)
    from kf_jupyter.client import TrainerClient

    logs = "\n".join(TrainerClient(sweeps.config).get_job_logs(best["name"]))
    assert f"param_env={best['parameters']['x']} " in logs
    # the jobs carry the sweep's labels
    job = TrainerClient(sweeps.config).get_job(best["name"])
    assert job.labels["kf-jupyter.io/sweep"] == name
    assert job.labels["kf-jupyter.io/sweep-trial"] == str(best["index"])
    # the OptimizerClient reads the same sweep
    client = OptimizerClient(sweeps.config)
    result = client.get_best_results(name)
    assert result is not None and result.parameters == best["parameters"]
    opt = client.get_job(name)
    assert [t.trainjob.name for t in opt.trials] == [t["name"] for t in rec["trials"]]
    assert {t.trainjob.status for t in opt.trials} == {"Complete", "Failed"}


def sleeper(x):
    import time

    print("loss=1", flush=True)
    time.sleep(120)


def test_cancel_stops_running_trials_and_keeps_the_record(state: Path, tmp_path: Path) -> None:
    sweeps, name = start(state, tmp_path, sleeper, {"x": Search.uniform(0, 1)}, 6, 2)
    from kf_jupyter.client import TrainerClient

    c = TrainerClient(sweeps.config)
    wait_until(
        lambda: sum(t["job_status"] == "Running" for t in sweeps.read(name)["trials"]) == 2,
        what="two trials to run",
    )
    # a running trial's objective is read while it runs (the views show it live)
    wait_until(
        lambda: any(
            t["metrics"].get("loss", {}).get("latest") == "1"
            for t in sweeps.read(name)["trials"]
            if t["status"] == "Running"
        ),
        what="a running trial's loss=1 in the sweep's record",
    )
    client = OptimizerClient(sweeps.config)
    job = client.cancel_job(name)
    assert (job.status, job.reason) == ("Failed", "Cancelled")
    rec = sweeps.read(name)
    statuses = [t["status"] for t in rec["trials"]]
    assert statuses.count("Cancelled") == 6, [(t["reason"], t["message"]) for t in rec["trials"]]
    started = [t for t in rec["trials"] if t.get("submitted")]
    assert len(started) == 2  # never more than parallel_trials
    for t in started:
        j = c.get_job(t["name"])
        assert (j.status, j.reason) == ("Failed", "Cancelled")
    pid = rec["driver_pid"]
    wait_until(lambda: not _alive(pid), what="the driver to exit")


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


KERNEL = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[3])
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.sdk import CustomTrainer, TrainJobTemplate
    from kf_jupyter.sdk.optimizer import OptimizerClient, Search, TrialConfig

    def train(x):
        import time
        time.sleep(1)
        print(f"loss={float(x)}")

    client = OptimizerClient(LocalBackendConfig(state_dir=sys.argv[1], cwd=sys.argv[2]))
    name = client.optimize(
        trial_template=TrainJobTemplate(
            trainer=CustomTrainer(func=train), runtime="jax-distributed"
        ),
        search_space={"x": Search.uniform(0, 1)},
        trial_config=TrialConfig(num_trials=3, parallel_trials=1),
    )
    print(name)
    """
)


def test_a_sweep_outlives_the_process_that_started_it(state: Path, tmp_path: Path) -> None:
    """The 'kernel' exits right after optimize(); this process follows and deletes it."""
    script = tmp_path / "kernel.py"
    script.write_text(KERNEL)
    out = subprocess.run(
        [sys.executable, str(script), str(state), str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    name = out.stdout.strip().splitlines()[-1]
    client = OptimizerClient(LocalBackendConfig(state_dir=state, cwd=tmp_path))
    assert name in [j.name for j in client.list_jobs()]
    job = client.wait_for_job_status(name, timeout=DEADLINE)
    assert job.status == "Complete"
    assert len(job.trials) == 3
    best = client.get_best_results(name)
    xs = [float(t.parameters["x"]) for t in job.trials]
    assert best is not None and float(best.parameters["x"]) == min(xs)
    assert any("loss=" in line for line in client.get_job_logs(name))
    trial_jobs = [t.trainjob.name for t in job.trials]
    client.delete_job(name)
    assert name not in [j.name for j in client.list_jobs()]
    from kf_jupyter.client import TrainerClient

    left = {j.name for j in TrainerClient(LocalBackendConfig(state_dir=state)).list_jobs()}
    assert not left & set(trial_jobs)


def test_a_killed_driver_is_reported(state: Path, tmp_path: Path) -> None:
    import signal

    sweeps, name = start(state, tmp_path, sleeper, {"x": Search.uniform(0, 1)}, 3, 1)
    wait_until(lambda: sweeps.read(name).get("driver_pid"), what="the driver's pid")
    os.kill(sweeps.read(name)["driver_pid"], signal.SIGKILL)
    wait_until(
        lambda: sweeps.read(name)["status"] == "Failed", what="the sweep to say its driver died"
    )
    rec = sweeps.read(name)
    assert rec["reason"] == "DriverLost"
    assert "driver process is gone" in rec["message"]


def test_max_failed_trials_stops_the_sweep(state: Path, tmp_path: Path) -> None:
    sweeps, name = start(
        state, tmp_path, quadratic, {"x": Search.uniform(0.85, 1)}, 6, 1, max_failed_trials=1
    )
    rec = wait_done(sweeps, name)
    assert (rec["status"], rec["reason"]) == ("Failed", "MaxFailedTrialsReached")
    statuses = [t["status"] for t in rec["trials"]]
    assert statuses[:2] == ["Failed", "Failed"]
    assert set(statuses[2:]) == {"Cancelled"}


SDK_EXAMPLE = """
import sys
from kf_jupyter.sdk import CustomTrainer, TrainJobTemplate
from kf_jupyter.sdk.optimizer import Objective, OptimizerClient, RandomSearch, Search, TrialConfig


def train_fn(learning_rate, num_epochs):
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group(backend="gloo")
    lr = float(learning_rate)
    epochs = int(num_epochs)
    assert os.environ["KUBEFLOW_TRAINER_OPT_LEARNING_RATE"] == learning_rate
    for epoch in range(epochs):
        loss = torch.tensor([(lr - 0.01) ** 2 + 1.0 / (epoch + 1)])
        dist.all_reduce(loss)
        loss /= dist.get_world_size()
        if dist.get_rank() == 0:
            print(f"epoch={epoch} loss={loss.item()}")
    dist.destroy_process_group()


template = TrainJobTemplate(
    runtime="torch-distributed",
    trainer=CustomTrainer(func=train_fn, num_nodes=1, resources_per_node={"cpu": 2}),
)
client = OptimizerClient()
job_name = client.optimize(
    trial_template=template,
    trial_config=TrialConfig(num_trials=4, parallel_trials=2),
    search_space={
        "learning_rate": Search.loguniform(0.001, 0.1),
        "num_epochs": Search.choice([2, 3]),
    },
    objectives=[Objective(metric="loss", direction="minimize")],
    algorithm=RandomSearch(random_state=42),
)
job = client.wait_for_job_status(job_name, timeout=600)
for trial in job.trials:
    print(trial.name, trial.parameters, trial.trainjob.status,
          [(m.name, m.min) for m in trial.metrics])
best = client.get_best_results(job_name)
print("BEST", best.parameters, [(m.name, m.min, m.latest) for m in best.metrics])
for line in client.get_job_logs(job_name):
    print("LOG", line)
client.delete_job(job_name)
print("LEFT", [j.name for j in client.list_jobs()])
"""


@pytest.mark.slow
def test_sdk_optimizer_code_runs_with_only_the_imports_changed(tmp_path: Path) -> None:
    """The SDK's optimizer example (its `optimize` docstring's shape, a torch DDP function
    printing `loss=`), imports changed to kf_jupyter.sdk, in a fresh interpreter."""
    script = tmp_path / "sdk_example.py"
    script.write_text(SDK_EXAMPLE)
    env = {**os.environ, "KF_JUPYTER_STATE_DIR": str(tmp_path / "state")}
    env["PYTHONPATH"] = str(REPO)
    try:
        out = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
            env=env,
            check=False,
        )
    finally:
        from kf_jupyter.backends.local.warm.pool import stop_all

        stop_all(tmp_path / "state")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    trials = [ln for ln in lines if "-trial-" in ln and not ln.startswith("LOG")]
    assert len(trials) == 4 and all("Complete" in ln for ln in trials), out.stdout
    best = next(ln for ln in lines if ln.startswith("BEST"))
    # the best is the trial with the lowest final loss: more epochs, lr nearest 0.01
    expected = []
    for ln in trials:
        params = eval(ln.split(" ", 1)[1].rsplit(" Complete", 1)[0])  # the dict printed
        lr, epochs = float(params["learning_rate"]), int(params["num_epochs"])
        expected.append(((lr - 0.01) ** 2 + 1.0 / epochs, params))
    assert repr(min(expected, key=lambda p: p[0])[1]) in best
    assert any(ln.startswith("LOG epoch=") for ln in lines)
    assert "LEFT []" in lines


def gate(x, folder):
    """Holds until `want` trials run at once (a rendezvous through files); records how many
    ran at once at most."""
    import os
    import time

    mine = os.path.join(folder, f"run-{os.getpid()}")
    open(mine, "w").close()
    want, patience = open(os.path.join(folder, "want")).read().split()
    want = int(want)
    deadline = time.time() + float(patience)
    peak = 0
    while time.time() < deadline:
        running = len([f for f in os.listdir(folder) if f.startswith("run-")])
        peak = max(peak, running)
        if running >= want:
            break
        time.sleep(0.05)
    time.sleep(0.3)
    peak = max(peak, len([f for f in os.listdir(folder) if f.startswith("run-")]))
    with open(os.path.join(folder, "peaks"), "a") as fh:
        fh.write(f"{peak}\n")
    os.unlink(mine)
    print(f"loss={float(x)}")


def _gate_sweep(
    state: Path, tmp_path: Path, want: int, parallel: int, patience: float
) -> tuple[dict, list]:
    folder = tmp_path / "gate"
    folder.mkdir()
    (folder / "want").write_text(f"{want} {patience}")
    cfg = LocalBackendConfig(state_dir=state, cwd=tmp_path)
    spec = eng.SweepSpec(
        name=sweeps_local.new_name(),
        params=parse_space({"x": Search.uniform(0, 1)}),
        num_trials=4,
        parallel_trials=parallel,
        seed=1,
    )
    template = eng.TrialTemplate(
        JAXTrainer(func=gate, func_args={"folder": str(folder)}, initialize_distributed=False),
        options=[Warm(False)],
    )
    sweeps = sweeps_local.LocalSweeps(cfg)
    rec = wait_done(sweeps, sweeps.start(spec, template))
    peaks = [int(p) for p in (folder / "peaks").read_text().split()]
    return rec, peaks


@pytest.mark.skipif(sweeps_local.cpu_budget() < 2, reason="needs 2 CPUs")
def test_parallel_trials_run_at_once(state: Path, tmp_path: Path) -> None:
    rec, peaks = _gate_sweep(state, tmp_path, want=2, parallel=2, patience=120)
    assert rec["status"] == "Complete", rec
    assert rec["parallel"] == 2
    assert max(peaks) == 2  # two trials met; never a third
    assert [t["status"] for t in rec["trials"]] == ["Succeeded"] * 4


def test_the_cpu_budget_caps_parallel_trials(state: Path, tmp_path: Path) -> None:
    """With one CPU (the kernel's affinity, which the driver inherits) trials of one process
    run one at a time whatever parallel_trials says, and the sweep says why."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        # each trial waits 3 s for company that must not come
        rec, peaks = _gate_sweep(state, tmp_path, want=2, parallel=3, patience=3)
    finally:
        os.sched_setaffinity(0, before)
    assert rec["status"] == "Complete", rec
    assert rec["parallel"] == 1
    assert peaks == [1, 1, 1, 1]
    events = [e for e in rec["events"] if e["reason"] == "ParallelismLimited"]
    assert events and "1 trial(s) run at once" in events[0]["message"]
