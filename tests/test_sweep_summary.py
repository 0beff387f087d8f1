"""A sweep's closing summary says how its trials ended, right in every case (issue 39): all
failed, some failed and the others reported no objective, none reported it, some succeeded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kf_jupyter.sdk.optimizer import Search
from kf_jupyter.sweeps import engine as eng
from kf_jupyter.sweeps.space import parse_space
from kf_jupyter.trainers import TorchTrainer

from .test_sweep_core import FakeJob


class Client:
    """Each trial's job ends as its parameter `way` says: `fail`, `silent` (complete, no
    metric) or `ok` (complete, prints `accuracy=0.9`)."""

    backend_name = "fake"

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}

    def train(self, trainer, runtime=None, runtime_config=None, options=None):
        name = next(o.name for o in options if type(o).__name__ == "Name")
        self.jobs[name] = trainer.func_args["way"].rstrip("0123456789")
        return name

    def get_job(self, name):
        return FakeJob("Failed" if self.jobs[name] == "fail" else "Complete")

    def iter_log_records(self, name):
        line = "accuracy=0.9" if self.jobs[name] == "ok" else "epoch=1"
        return [SimpleNamespace(source="rank-0", line=line)]


def _train(way):
    pass


def _summary(ways: list[str]) -> dict:
    spec = eng.SweepSpec(
        name="sw",
        params=parse_space({"way": Search.choice(ways)}),
        num_trials=len(ways),
        algorithm="grid",
        objectives=[("accuracy", "maximize")],
    )
    engine = eng.SweepEngine(
        Client(), spec, eng.TrialTemplate(TorchTrainer(func=_train)), eng.MemoryStore()
    )
    engine.poll_seconds = 0
    return engine.run()


@pytest.mark.parametrize(
    ("ways", "status", "message"),
    [
        (
            [f"fail{i}" for i in range(10)],
            "Failed",
            "No trial succeeded: all 10 trials failed.",
        ),
        (
            ["fail1", "fail2", "fail3", "silent1", "silent2"],
            "Failed",
            "No trial succeeded: of 5 trials, 3 failed and 2 reported no 'accuracy' (a trial "
            "reports it by printing accuracy=VALUE or calling kf_jupyter.report(accuracy=...)).",
        ),
        (
            ["silent1", "silent2", "silent3"],
            "Failed",
            "No trial succeeded: all 3 trials reported no 'accuracy' (a trial reports it by "
            "printing accuracy=VALUE or calling kf_jupyter.report(accuracy=...)).",
        ),
        (["fail1"], "Failed", "No trial succeeded: the one trial failed."),
        (
            ["ok1", "fail1", "silent1", "ok2"],
            "Complete",
            "2 of 4 trials succeeded (1 failed and 1 reported no 'accuracy'); best sw-trial-1 "
            "with accuracy=0.9.",
        ),
        (["ok1", "ok2"], "Complete", "2 of 2 trials succeeded; best sw-trial-1 with accuracy=0.9."),
    ],
)
def test_the_summary_says_how_the_trials_ended(ways, status, message):
    record = _summary(ways)
    assert (record["status"], record["message"]) == (status, message)
