"""The sweep engine's pure parts: the search space's trials, metrics from log lines, the best
trial, and bad input (issue 25). No process is started."""

from __future__ import annotations

import math

import pytest

from kf_jupyter.errors import ValidationError
from kf_jupyter.sdk.optimizer import GridSearch, Objective, RandomSearch, Search, TrialConfig
from kf_jupyter.sdk.optimizer.backends.records import sweep_spec
from kf_jupyter.sweeps import engine as eng
from kf_jupyter.sweeps import metrics as mx
from kf_jupyter.sweeps.space import assignments, env_name, parse_space


def test_random_search_is_reproducible_and_within_bounds() -> None:
    space = parse_space(
        {
            "lr": Search.loguniform(1e-4, 1e-1),
            "momentum": Search.uniform(0.5, 0.9),
            "opt": Search.choice(["sgd", "adam", 3]),
        }
    )
    a = assignments(space, "random", 50, seed=3)
    assert a == assignments(space, "random", 50, seed=3)
    assert a != assignments(space, "random", 50, seed=4)
    assert len(a) == 50
    for t in a:
        assert all(isinstance(v, str) for v in t.values())  # strings, as Katib gives them
        assert 1e-4 <= float(t["lr"]) <= 1e-1
        assert 0.5 <= float(t["momentum"]) <= 0.9
        assert t["opt"] in ("sgd", "adam", "3")
    # log-uniform: about as many draws below the geometric middle (1e-2.5) as above it
    below = sum(float(t["lr"]) < 10**-2.5 for t in assignments(space, "random", 400, seed=1))
    assert 120 < below < 280


def test_grid_search_covers_the_product_in_order() -> None:
    space = parse_space({"opt": Search.choice(["sgd", "adam"]), "lr": Search.uniform(0.0, 1.0)})
    g = assignments(space, "grid", 6)
    assert g == [
        {"opt": "sgd", "lr": "0"},
        {"opt": "sgd", "lr": "0.5"},
        {"opt": "sgd", "lr": "1"},
        {"opt": "adam", "lr": "0"},
        {"opt": "adam", "lr": "0.5"},
        {"opt": "adam", "lr": "1"},
    ]
    # fewer trials than the grid: the first ones; log-uniform points are geometric
    logs = assignments(parse_space({"lr": Search.loguniform(1e-3, 1e-1)}), "grid", 3)
    assert [float(t["lr"]) for t in logs] == pytest.approx([1e-3, 1e-2, 1e-1])
    assert len(assignments(space, "grid", 4)) == 4


def test_env_names_are_the_trainers() -> None:
    assert env_name("learning_rate") == "KUBEFLOW_TRAINER_OPT_LEARNING_RATE"


@pytest.mark.parametrize(
    ("space", "words"),
    [
        ({}, "Search space must be set"),
        ({"learning-rate": Search.uniform(0, 1)}, "letters, digits and underscores"),
        ({"lr": Search.loguniform(0, 1)}, "minimum above 0"),
        ({"lr": Search.uniform(2, 1)}, "must be below the maximum"),
        ({"lr": 0.1}, "Search.uniform(min, max)"),
        ({"lr": Search.choice([])}, "at least one value"),
    ],
)
def test_bad_search_spaces_say_what_to_do(space: dict, words: str) -> None:
    with pytest.raises(ValidationError) as err:
        sweep_spec("s", space)
    assert words in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_trial_config_and_objectives() -> None:
    space = {"lr": Search.uniform(0, 1)}
    with pytest.raises(ValidationError, match="parallel_trials"):
        sweep_spec("s", space, TrialConfig(num_trials=2, parallel_trials=0))
    with pytest.raises(ValidationError, match="objectives"):
        sweep_spec("s", space, objectives=["loss"])
    spec = sweep_spec(
        "s", space, objectives=[Objective("acc", "maximize")], algorithm=RandomSearch(5)
    )
    assert (spec.objectives, spec.seed, spec.algorithm) == ([("acc", "maximize")], 5, "random")
    assert sweep_spec("s", space, algorithm=GridSearch()).algorithm == "grid"


def test_katib_stdout_lines_and_report_lines() -> None:
    names = ["loss", "accuracy"]
    assert mx.line_metrics("epoch=3 loss=0.25 accuracy=0.91 other=2", names) == [
        ("loss", "0.25"),
        ("accuracy", "0.91"),
    ]
    assert mx.line_metrics("loss = 1.5e-3", names) == [("loss", "1.5e-3")]
    assert mx.line_metrics("loss=nan", names) == []  # not a number Katib reads
    assert mx.line_metrics("the loss is 0.3", names) == []
    report = '##kf-jupyter:report {"step": 2, "progress": 0.5, "metrics": {"loss": 0.5}}'
    assert mx.line_metrics(report, names) == [("loss", "0.5")]

    log = mx.MetricLog(names)
    for line in ["loss=3", "loss=1", report, "loss=2"]:
        log.feed_line(line)
    log.feed_status({"loss": "9", "accuracy": "0.7"})  # loss came from the logs: not re-added
    assert log.summaries() == {
        "loss": {"min": "0.5", "max": "3", "latest": "2"},
        "accuracy": {"min": "0.7", "max": "0.7", "latest": "0.7"},
    }
    assert log.history()["loss"]["steps"] == [None, None, 2, None]


def test_objective_and_best_trial_follow_the_direction() -> None:
    s = {"min": "0.1", "max": "0.9", "latest": "0.5"}
    assert mx.objective_value(s, "minimize") == 0.1
    assert mx.objective_value(s, "maximize") == 0.9
    assert mx.best_index([None, 0.3, 0.2, 0.2], "minimize") == 2
    assert mx.best_index([None, 0.3, 0.2], "maximize") == 1
    assert mx.best_index([None, None], "minimize") is None


class FakeJob:
    def __init__(self, status: str) -> None:
        self.status = status
        self.trainer_status = None
        self.reason = "FailedJobs" if status == "Failed" else ""
        self.message = "Rank 0 exited with code 1\nmore"
        self.failure = None


def test_engine_records_failures_and_picks_the_best_with_a_stand_in_client() -> None:
    """The engine's loop against a stand-in TrainerClient (the real one is in
    test_sweep_local): failed submits and failed jobs are recorded, not fatal."""
    from types import SimpleNamespace

    class Client:
        backend_name = "fake"

        def __init__(self) -> None:
            self.jobs: dict[str, tuple[str, list[str]]] = {}
            self.running_max = 0

        def train(self, trainer, runtime=None, runtime_config=None, options=None):
            name = next(o.name for o in options if type(o).__name__ == "Name")
            x = float(trainer.func_args["x"])
            assert runtime_config.env["KUBEFLOW_TRAINER_OPT_X"] == trainer.func_args["x"]
            if x > 0.9:
                raise ValidationError("cannot submit this one")
            status = "Failed" if x < 0.1 else "Complete"
            self.jobs[name] = (status, [f"loss={(x - 0.5) ** 2}"])
            running = sum(1 for s in self.jobs.values() if s[0] == "Running")
            self.running_max = max(self.running_max, running)
            return name

        def get_job(self, name):
            return FakeJob(self.jobs[name][0])

        def iter_log_records(self, name):
            return [SimpleNamespace(source="rank-0", line=x) for x in self.jobs[name][1]]

    def f(x):
        pass

    from kf_jupyter.trainers import TorchTrainer

    spec = eng.SweepSpec(
        name="sw", params=parse_space({"x": Search.uniform(0, 1)}), num_trials=30, seed=2
    )
    store = eng.MemoryStore()
    client = Client()
    engine = eng.SweepEngine(client, spec, eng.TrialTemplate(TorchTrainer(func=f)), store)
    engine.poll_seconds = 0
    record = engine.run()
    statuses = {t["status"] for t in record["trials"]}
    assert statuses == {"Succeeded", "Failed"}
    xs = {t["name"]: float(t["parameters"]["x"]) for t in record["trials"]}
    ok = [n for n, t in zip(xs, record["trials"]) if t["status"] == "Succeeded"]
    assert all(0.1 <= xs[n] <= 0.9 for n in ok)
    best = min(ok, key=lambda n: (xs[n] - 0.5) ** 2)
    assert record["best_trial"] == best
    assert record["status"] == "Complete"
    failed = [t for t in record["trials"] if t["status"] == "Failed"]
    assert {t["reason"] for t in failed} <= {"SubmitFailed", "FailedJobs"}
    assert store.record["status"] == "Complete"
    assert math.isclose(eng.best_trial(record)["objective"], min((xs[n] - 0.5) ** 2 for n in ok))


def test_the_sdks_own_search_objects_work_too() -> None:
    """Code that builds its space with kubeflow.optimizer's Search (Katib's models) works."""
    ko = pytest.importorskip("kubeflow.optimizer")
    from kubeflow.optimizer.types.search_types import Search as SDKSearch

    spec = sweep_spec(
        "s",
        {"lr": SDKSearch.loguniform(1e-3, 1e-1), "opt": SDKSearch.choice(["sgd", "adam"])},
        ko.TrialConfig(num_trials=5, parallel_trials=2),
        [ko.Objective(metric="acc", direction="maximize")],
        ko.RandomSearch(random_state=9),
    )
    assert (spec.num_trials, spec.parallel_trials, spec.seed) == (5, 2, 9)
    assert spec.objectives == [("acc", "maximize")]
    ours = sweep_spec(
        "s",
        {"lr": Search.loguniform(1e-3, 1e-1), "opt": Search.choice(["sgd", "adam"])},
        algorithm=RandomSearch(random_state=9),
    )
    assert [p.to_dict() for p in spec.params] == [p.to_dict() for p in ours.params]
    # the same values as the SDK's Search would describe them (strings, Katib's field names)
    theirs = SDKSearch.uniform(0.5, 2)
    mine = Search.uniform(0.5, 2)
    assert (mine.parameter_type, mine.feasible_space.min, mine.feasible_space.max) == (
        theirs.parameter_type,
        theirs.feasible_space.min,
        theirs.feasible_space.max,
    )
    assert mine.feasible_space.distribution == theirs.feasible_space.distribution
    assert (
        Search.choice([1, "a"]).feasible_space.list
        == SDKSearch.choice([1, "a"]).feasible_space.list
    )


def test_the_backend_config_picks_the_backend_as_trainer_client_does(tmp_path) -> None:
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.sdk import LocalProcessBackendConfig
    from kf_jupyter.sdk.optimizer import OptimizerClient
    from kf_jupyter.sdk.optimizer.backends.localprocess.backend import LocalProcessBackend

    for cfg in (None, LocalProcessBackendConfig(), LocalBackendConfig(state_dir=tmp_path)):
        assert isinstance(OptimizerClient(cfg).backend, LocalProcessBackend)
    assert OptimizerClient(LocalBackendConfig(state_dir=tmp_path)).list_jobs() == []
    with pytest.raises(ValidationError, match="Invalid backend config"):
        OptimizerClient("local")  # type: ignore[arg-type]


def test_a_driver_that_fails_says_so_in_the_record() -> None:
    """`run_to_end` (both drivers, local and Kubernetes): an error the engine does not handle
    itself marks the record Failed / DriverFailed with the error, then goes on (driver.log)."""
    from kf_jupyter.trainers import TorchTrainer

    class Client:
        backend_name = "fake"

        def train(self, trainer, runtime=None, runtime_config=None, options=None):
            raise KeyboardInterrupt("the driver was stopped")

    def f(x):
        pass

    spec = eng.SweepSpec(name="sw", params=parse_space({"x": Search.uniform(0, 1)}), num_trials=2)
    store = eng.MemoryStore()
    engine = eng.SweepEngine(Client(), spec, eng.TrialTemplate(TorchTrainer(func=f)), store)
    with pytest.raises(KeyboardInterrupt):
        eng.run_to_end(engine, store)
    assert (store.record["status"], store.record["reason"]) == ("Failed", "DriverFailed")
    assert store.record["message"] == (
        "The sweep's driver failed: KeyboardInterrupt: the driver was stopped"
    )
    assert store.record["finished"]


def test_a_driver_reads_its_handover_and_removes_what_it_is_told(tmp_path) -> None:
    """`read_handover`: the template and config come back; the named files are gone after, even
    when reading failed (the Kubernetes driver's config may carry a token)."""
    import pickle

    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.sweeps.local import encode_template, read_handover
    from kf_jupyter.trainers import TorchTrainer

    def f(x):
        return x

    config = LocalBackendConfig(state_dir=tmp_path / "state")
    (tmp_path / "template.pkl").write_bytes(
        encode_template(eng.TrialTemplate(TorchTrainer(func=f)))
    )
    (tmp_path / "config.pkl").write_bytes(pickle.dumps(config))
    template, got = read_handover(tmp_path, remove=("template.pkl",))
    assert got == config and "def f(x)" in template.trainer.func.__kf_source__
    assert not (tmp_path / "template.pkl").exists() and (tmp_path / "config.pkl").exists()
    (tmp_path / "template.pkl").write_bytes(b"not a pickle")
    with pytest.raises(pickle.UnpicklingError):
        read_handover(tmp_path, remove=("template.pkl", "config.pkl"))
    assert not (tmp_path / "template.pkl").exists() and not (tmp_path / "config.pkl").exists()
