"""Sweeps on the cluster harness (issue 25): trials are TrainJobs the client creates, the record is
a ConfigMap, the driver a detached process; Trainer v2.3.0 has no OptimizationJob to create.

The trials run on a plain TrainingRuntime (one process per node, no torch import) so a 4-trial
sweep takes seconds; `tests/test_sdk_optimizer_kubernetes.py` runs the SDK's own code.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.sweeps import engine as eng
from kf_jupyter.sweeps import kubernetes as ks
from kf_jupyter.sweeps.space import Param


def objective(lr: str, width: str = "8") -> None:
    import os

    value = float(lr)
    assert os.environ["KUBEFLOW_TRAINER_OPT_LR"] == lr
    if value > 0.05:
        raise ValueError(f"lr {lr} diverged")
    for epoch in range(3):
        print(f"epoch={epoch} loss={(value - 0.01) ** 2 + 1 / (epoch + 1)}")


def plain_runtime(k8s_cluster: Any, namespace: str, name: str = "plain") -> str:
    """torch-distributed's template with no framework policy: one process per node."""
    from kubernetes import client as k8s

    custom = k8s.CustomObjectsApi(k8s_cluster.api_client())
    base = custom.get_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "torch-distributed"
    )
    custom.create_namespaced_custom_object(
        "trainer.kubeflow.org",
        "v1alpha1",
        namespace,
        "trainingruntimes",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainingRuntime",
            "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "plain"}},
            "spec": dict(base["spec"], mlPolicy={"numNodes": 1}),
        },
    )
    return name


@pytest.fixture
def sweeps(
    k8s_cluster: Any,
    k8s_standin: Any,
    k8s_admin_kubeconfig: str,
    k8s_namespace: str,
    tmp_path,
    monkeypatch,
) -> ks.KubernetesSweeps:
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    plain_runtime(k8s_cluster, k8s_namespace)
    return ks.KubernetesSweeps(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )


def _template(func: Any = None) -> eng.TrialTemplate:
    from kf_jupyter.sdk.trainers import RuntimeFrameworkTrainer

    trainer = RuntimeFrameworkTrainer(
        runtime_framework="plain", func=func or objective, num_nodes=1
    )
    return eng.TrialTemplate(trainer=trainer, runtime="plain")


def _wait(sweeps: ks.KubernetesSweeps, name: str, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = sweeps.read(name)
        if rec["status"] in eng.SWEEP_TERMINAL:
            return rec
        time.sleep(0.5)
    raise AssertionError(f"sweep {name} did not end: {sweeps.read(name)}")


def _gone(sweeps: ks.KubernetesSweeps, name: str, timeout: float = 60) -> bool:
    """Every trial TrainJob of the sweep is gone (foreground deletion takes a moment)."""
    deadline = time.monotonic() + timeout
    while sweeps.trial_jobs(name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.3)
    return True


@pytest.mark.slow
def test_sweep_runs_trials_as_trainjobs_and_records_a_failed_one(sweeps, k8s_cluster) -> None:
    from kubernetes import client as k8s

    spec = eng.SweepSpec(
        name="sw-grid",
        params=[Param(name="lr", kind="categorical", choices=["0.01", "0.02", "0.5", "0.001"])],
        objectives=[("loss", "minimize")],
        algorithm="grid",
        num_trials=4,
        parallel_trials=2,
    )
    assert sweeps.start(spec, _template()) == "sw-grid"
    rec = _wait(sweeps, "sw-grid")
    by_lr = {t["parameters"]["lr"]: t for t in rec["trials"]}
    assert rec["status"] == "Complete", rec
    assert by_lr["0.5"]["status"] == "Failed"  # recorded, the sweep went on
    assert "diverged" in by_lr["0.5"]["message"]
    assert {by_lr[v]["status"] for v in ("0.01", "0.02", "0.001")} == {"Succeeded"}
    assert rec["best_trial"] == by_lr["0.01"]["name"] == "sw-grid-trial-1"
    assert by_lr["0.01"]["metrics"]["loss"]["min"] == str((0.01 - 0.01) ** 2 + 1 / 3)
    assert len(by_lr["0.02"]["history"]["loss"]["values"]) == 3
    assert any(e["reason"] == "TrialsFromClient" for e in rec["events"])
    # the trials are TrainJobs with the parameters where the OptimizationJob KEP puts them
    custom = k8s.CustomObjectsApi(k8s_cluster.api_client())
    tj = custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", sweeps.namespace, "trainjobs", "sw-grid-trial-2"
    )
    assert {"name": "KUBEFLOW_TRAINER_OPT_LR", "value": "0.02"} in tj["spec"]["trainer"]["env"]
    assert tj["metadata"]["labels"]["kf-jupyter.io/sweep"] == "sw-grid"
    assert tj["metadata"]["annotations"]["kf-jupyter.io/sweep-param-lr"] == "0.02"
    # another process (here: another client object) lists it; delete removes every trial
    other = ks.KubernetesSweeps(sweeps.config)
    assert [r["name"] for r in other.list()] == ["sw-grid"]
    assert sorted(other.trial_jobs("sw-grid")) == [f"sw-grid-trial-{i}" for i in range(1, 5)]
    other.delete("sw-grid")
    assert _gone(other, "sw-grid")
    assert other.list() == []
    with pytest.raises(Exception, match="No sweep named"):
        other.read("sw-grid")


@pytest.mark.slow
def test_cancel_suspends_running_trials_and_keeps_them(sweeps) -> None:
    spec = eng.SweepSpec(
        name="sw-cancel",
        params=[Param(name="lr", kind="categorical", choices=["0.01", "0.02", "0.03"])],
        algorithm="grid",
        num_trials=3,
        parallel_trials=1,
    )
    sweeps.start(spec, _template(sleeper))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rec = sweeps.read("sw-cancel")
        if rec["trials"][0]["status"] == "Running" and rec["trials"][0]["job_status"] == "Running":
            break
        time.sleep(0.5)
    rec = sweeps.cancel("sw-cancel")
    assert (rec["status"], rec["reason"]) == ("Failed", "Cancelled")
    assert [t["status"] for t in rec["trials"]] == ["Cancelled"] * 3
    assert sweeps.trial_jobs("sw-cancel") == ["sw-cancel-trial-1"]  # kept, suspended
    assert sweeps.client.get_job("sw-cancel-trial-1").status == "Suspended"
    sweeps.delete("sw-cancel")
    assert _gone(sweeps, "sw-cancel")


def sleeper(lr: str) -> None:
    import time

    print(f"loss={lr}", flush=True)
    time.sleep(120)


@pytest.mark.slow
def test_a_silent_driver_reads_as_lost(sweeps, monkeypatch) -> None:
    spec = eng.SweepSpec(
        name="sw-lost",
        params=[Param(name="lr", kind="categorical", choices=["0.01"])],
        algorithm="grid",
        num_trials=1,
    )
    record = eng.new_record(spec, "kubernetes")
    cm = {
        "metadata": {
            "name": "sw-lost",
            "labels": {ks.RECORD_LABEL: "sw-lost"},
            "annotations": {ks.HEARTBEAT_ANNOTATION: "2026-01-01T00:00:00+00:00"},
        },
        "data": {ks.RECORD_KEY: ks.fit_record(record)},
    }
    sweeps.api.core.create_namespaced_config_map(sweeps.namespace, cm)
    rec = sweeps.read("sw-lost")
    assert (rec["status"], rec["reason"]) == ("Failed", "DriverLost")
    assert "no more trials start" in rec["message"]
    sweeps.delete("sw-lost")
    assert sweeps.list() == []


def test_record_curves_are_thinned_to_fit_a_configmap() -> None:
    record = {"trials": [{"history": {"loss": {"values": [str(i) for i in range(50_000)],
                                               "steps": list(range(50_000))}},
                          "metrics": {"loss": {"min": "0", "max": "49999", "latest": "49999"}}}]}  # fmt: skip
    text = ks.fit_record(record, limit=100_000)
    assert len(text) <= 100_000
    import json

    out = json.loads(text)["trials"][0]
    assert out["metrics"]["loss"]["latest"] == "49999"
    assert out["history"]["loss"]["values"][-1] == "49999"
    assert len(out["history"]["loss"]["values"]) == len(out["history"]["loss"]["steps"])


class _Core:
    """A ConfigMap API that fails as told: a list of exceptions (or None) per call, in order."""

    def __init__(self, failures: list[Exception | None]) -> None:
        self.failures = failures
        self.calls = 0

    def _next(self) -> None:
        self.calls += 1
        exc = self.failures.pop(0) if self.failures else None
        if exc is not None:
            raise exc

    def read_namespaced_config_map(self, name: str, namespace: str) -> Any:
        from types import SimpleNamespace

        self._next()
        return SimpleNamespace(metadata=SimpleNamespace(annotations={}))

    def patch_namespaced_config_map(self, name: str, namespace: str, body: Any) -> None:
        self._next()


def _api(failures: list[Exception | None]) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(core=_Core(failures), namespace="ns")


def test_driver_rides_out_a_passing_api_failure_and_stops_when_its_record_is_deleted() -> None:
    from kubernetes.client.rest import ApiException

    store = ks.ConfigMapStore(_api([ApiException(status=503), None]), "sw")
    assert store.cancel_requested() is False  # retried, not fatal
    assert store.api.core.calls >= 2
    store.save({"trials": []})
    gone = ks.ConfigMapStore(_api([ApiException(status=404)]), "sw")
    assert gone.cancel_requested() is True  # deleted under the driver: stop
    gone.save({"trials": []})  # nothing to write, no error
    refused = ks.ConfigMapStore(_api([ApiException(status=403)]), "sw")
    with pytest.raises(ApiException):
        refused.cancel_requested()


def test_patient_client_retries_unreachable_but_not_missing_jobs() -> None:
    from kf_jupyter.errors import ClusterUnreachableError, JobNotFoundError

    class Flaky:
        def __init__(self, errors: list[Exception]) -> None:
            self.errors = errors

        def get_job(self, name: str) -> str:
            if self.errors:
                raise self.errors.pop(0)
            return name

        backend_name = "kubernetes"

    assert ks.PatientClient(Flaky([ClusterUnreachableError("down")])).get_job("t") == "t"
    with pytest.raises(JobNotFoundError):
        ks.PatientClient(Flaky([JobNotFoundError("gone")])).get_job("t")
    assert ks.PatientClient(Flaky([])).backend_name == "kubernetes"
