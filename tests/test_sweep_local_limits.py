"""Local sweeps under huge or hostile input (issue 38): many trials with long curves, a trial
printing a 30 MB log, a `copy.py` beside the notebook, a 5,000-character sweep name."""

from __future__ import annotations

import subprocess
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.errors import ValidationError
from kf_jupyter.options import Warm
from kf_jupyter.sdk.optimizer import OptimizerClient, Search
from kf_jupyter.sweeps import engine as eng
from kf_jupyter.sweeps import local as sweeps_local
from kf_jupyter.sweeps import metrics as mx
from kf_jupyter.sweeps.space import parse_space

from .test_sweep_local import state, wait_done  # noqa: F401 (the fixture)

TRIALS = 1_000


def _finished(trial: dict[str, Any], i: int) -> None:
    """What the engine's `_collect` leaves in a trial that succeeded with a 2,000-point curve."""
    values = [repr(1 / (k + i + 1)) for k in range(mx.MAX_POINTS)]
    trial.update(
        status=eng.SUCCEEDED,
        job_status="Complete",
        reason="Succeeded",
        metrics={"loss": {"min": values[-1], "max": values[0], "latest": values[-1]}},
        history={"loss": {"values": values, "steps": list(range(mx.MAX_POINTS))}},
        objective=float(values[-1]),
        submitted=eng.now_iso(),
        finished=eng.now_iso(),
    )


@pytest.mark.reliability(
    scenario="a local sweep of 1,000 trials with 2,000-point curves: sweep.json under 1 MB, each "
    "save bounded, get_job and list_jobs fast, every curve still readable",
    area="local",
    tries=1,
)
def test_a_thousand_trials_with_long_curves_save_and_read_fast(
    state: Path,  # noqa: F811
    record_property: Any,
) -> None:
    """1,000 trials with 2,000-point curves, saved after each trial as the driver does: each
    save stays small and fast, the record under a megabyte, get_job and list_jobs fast, and
    every curve still readable (get_sweep_record)."""
    cfg = LocalBackendConfig(state_dir=state)
    spec = eng.SweepSpec(
        name=sweeps_local.new_name(), params=parse_space({"x": Search.uniform(0, 1)}),
        num_trials=TRIALS, seed=3,
    )  # fmt: skip
    sweeps = sweeps_local.LocalSweeps(cfg)
    folder = sweeps.root / spec.name
    folder.mkdir(parents=True)
    store = sweeps_local.FileStore(folder)
    record = eng.new_record(spec, "local")
    record.update(status=eng.RUNNING, driver_pid=1, driver_create_time=0.0)  # as the driver's
    slowest = 0.0
    for i, trial in enumerate(record["trials"]):
        _finished(trial, i)
        if i % 50 == 49 or i >= TRIALS - 5:  # the driver saves after each change; fewer here
            start = time.perf_counter()
            store.save(record)
            slowest = max(slowest, time.perf_counter() - start)
    record.update(status=eng.COMPLETE_SWEEP, reason=eng.REASON_DONE, best_trial="x")
    store.save(record)
    size = (folder / "sweep.json").stat().st_size
    assert size < 1_000_000, f"sweep.json is {size} bytes"
    assert slowest < 1.0, f"one save took {slowest:.2f} s"
    assert all(not t["history"] for t in record["trials"])  # the driver keeps no curve
    assert len(list((folder / "curves").glob("*.json"))) == TRIALS
    client = OptimizerClient(cfg)
    start = time.perf_counter()
    job = client.get_job(spec.name)
    took_get = time.perf_counter() - start
    start = time.perf_counter()
    (listed,) = client.list_jobs()
    took_list = time.perf_counter() - start
    assert len(job.trials) == len(listed.trials) == TRIALS
    assert took_get < 3.0 and took_list < 3.0, (took_get, took_list)
    record_property("sweep_json_bytes", size)
    record_property("slowest_save_s", round(slowest, 3))
    record_property("get_job_s", round(took_get, 2))
    record_property("list_jobs_s", round(took_list, 2))
    raw = client.backend.get_sweep_record(spec.name)
    curve = raw["trials"][TRIALS - 1]["history"]["loss"]
    assert len(curve["values"]) == mx.MAX_POINTS
    assert curve["values"][0] == repr(1 / TRIALS)
    client.delete_job(spec.name)
    assert not folder.exists()


def chatty() -> None:
    """A trial whose log is about 30 MB, with its metric at the end."""
    import sys

    line = "x" * 99 + "\n"
    for _ in range(300):
        sys.stdout.write(line * 1000)
    print("loss=0.125", flush=True)


@pytest.mark.reliability(
    scenario="a trial that prints a 30 MB log: the sweep driver reads its metric with a few MiB",
    area="local",
    tries=1,
)
def test_the_driver_streams_a_trial_s_log(
    state: Path,  # noqa: F811
    tmp_path: Path,
    record_property: Any,
) -> None:
    """The driver reads a finished trial's 30 MB log for its metrics without holding it."""
    from kf_jupyter.client import TrainerClient

    cfg = LocalBackendConfig(state_dir=state, cwd=tmp_path)
    client = TrainerClient(cfg)
    name = client.train(
        JAXTrainer(func=chatty, initialize_distributed=False), options=[Warm(False)]
    )
    client.wait_for_job_status(name, timeout=300)
    spec = eng.SweepSpec(name="sw", params=parse_space({"x": Search.uniform(0, 1)}), num_trials=1)
    engine = eng.SweepEngine(client, spec, eng.TrialTemplate(JAXTrainer()), eng.MemoryStore())
    log = mx.MetricLog(["loss"])
    tracemalloc.start()
    try:
        assert engine._read_logs(name, log)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert log.summaries()["loss"]["latest"] == "0.125"
    record_property("peak_mib", round(peak / 2**20, 1))
    assert peak < 20 * 2**20, f"reading the log took {peak / 2**20:.0f} MiB"


def steady(x: str) -> None:
    """A trial that reports its parameter (what its job imports is the user's own business)."""
    print(f"loss={x}")


SHADOWS = {
    "copy.py": "raise RuntimeError('the copy.py beside the notebook was imported')\n",
    "json.py": "raise RuntimeError('the json.py beside the notebook was imported')\n",
}


@pytest.mark.reliability(
    scenario="a copy.py and a json.py beside the notebook: the sweep's driver starts isolated "
    "(python -I) and the sweep completes",
    area="local",
    tries=1,
)
def test_a_copy_py_beside_the_notebook_does_not_break_the_driver(
    state: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    nb = tmp_path / "notebooks"
    nb.mkdir()
    for fname, text in SHADOWS.items():
        (nb / fname).write_text(text)
    cfg = LocalBackendConfig(state_dir=state, cwd=nb)
    spec = eng.SweepSpec(
        name=sweeps_local.new_name(),
        params=parse_space({"x": Search.choice(["0.5", "0.25"])}),
        num_trials=2,
        algorithm="grid",
    )
    template = eng.TrialTemplate(
        JAXTrainer(func=steady, initialize_distributed=False), options=[Warm(False)]
    )
    sweeps = sweeps_local.LocalSweeps(cfg)
    name = sweeps.start(spec, template)
    rec = wait_done(sweeps, name)
    assert (rec["status"], rec["reason"]) == ("Complete", eng.REASON_DONE), rec["message"]
    assert sorted(t["objective"] for t in rec["trials"]) == [0.25, 0.5]


@pytest.mark.parametrize("module", ["kf_jupyter.sweeps.driver", "kf_jupyter.sweeps.kubernetes"])
def test_both_drivers_start_isolated_from_the_notebook_folder(tmp_path: Path, module: str) -> None:
    """The local and the cluster driver, started as `optimize()` starts them in a folder with a
    `copy.py` and a `json.py`: they import kf-jupyter and reach their hand-over files (none
    here: FileNotFoundError), never the shadowing modules."""
    for fname, text in SHADOWS.items():
        (tmp_path / fname).write_text(text)
    folder = tmp_path / "handover"
    folder.mkdir()
    out = subprocess.run(
        sweeps_local.driver_command(module, folder),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "beside the notebook" not in out.stderr, out.stderr
    assert out.returncode != 0 and "FileNotFoundError" in out.stderr, out.stderr
    assert ("sweep.json" in out.stderr) or ("template.pkl" in out.stderr), out.stderr


LONG = "a" * 5_000


@pytest.mark.reliability(
    scenario="a 5,000-character sweep name to get_job, delete_job, get_best_results, cancel_job: "
    "a one-paragraph ValidationError with the naming rule, no OSError",
    area="hostile",
    tries=1,
)
@pytest.mark.parametrize("call", ["get_job", "delete_job", "get_best_results", "cancel_job"])
def test_a_5000_character_sweep_name_is_a_clear_error(tmp_path: Path, call: str) -> None:
    client = OptimizerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    method = getattr(client.backend, call) if call == "cancel_job" else getattr(client, call)
    with pytest.raises(ValidationError) as err:
        method(LONG)
    text = str(err.value)
    assert "(5000 characters) is not a sweep name" in text
    assert "RFC 1035 label" in text and "at most 63 characters" in text
    assert "list_jobs()" in text and len(text) < 600


def test_a_sweep_name_too_long_for_its_trials_is_refused_at_start(tmp_path: Path) -> None:
    cfg = LocalBackendConfig(state_dir=tmp_path / "state", cwd=tmp_path)
    spec = eng.SweepSpec(
        name="s" * 55, params=parse_space({"x": Search.uniform(0, 1)}), num_trials=100
    )
    template = eng.TrialTemplate(JAXTrainer(func=steady, initialize_distributed=False))
    with pytest.raises(ValidationError, match=r"at most 63 characters \(53 for 100 trials"):
        sweeps_local.LocalSweeps(cfg).start(spec, template)
    assert not (tmp_path / "state" / "sweeps" / spec.name).exists()
