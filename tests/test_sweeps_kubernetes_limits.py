"""A cluster sweep's record past a ConfigMap's 1 MiB (issue 38), against the real API server of
the harness: thousands of trials (one in five failed, with its message) fit, and say so; a
record the API server refuses (422) reads `Failed` / `RecordRefused` at once, with its reason,
instead of `DriverLost` two minutes later."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.errors import KFJupyterError
from kf_jupyter.sdk.optimizer import Search
from kf_jupyter.sweeps import engine as eng
from kf_jupyter.sweeps import fit
from kf_jupyter.sweeps import kubernetes as ks
from kf_jupyter.sweeps.space import parse_space

SPACE = {"lr": Search.loguniform(1e-4, 1e-1), "width": Search.choice(["8", "16", "32"])}


def big_record(name: str, n: int, points: int = 50, running: int = 3) -> dict[str, Any]:
    """A sweep of `n` trials as its driver holds it near the end: one in five failed with a
    long message, the others succeeded with a curve; the last `running` still run."""
    spec = eng.SweepSpec(name=name, params=parse_space(SPACE), num_trials=n, seed=1)
    rec = eng.new_record(spec, "kubernetes")
    rec["status"] = eng.RUNNING
    for i, t in enumerate(rec["trials"]):
        t["submitted"] = eng.now_iso()
        if i >= n - running:
            t.update(status=eng.TRIAL_RUNNING, job_status="Running")
        elif i % 5 == 4:
            message = f"ValueError: lr {t['parameters']['lr']} diverged " + "at step 9; " * 90
            t.update(status=eng.TRIAL_FAILED, reason="Error", message=message)
            t.update(job_status="Failed", finished=eng.now_iso())
        else:
            values = [repr(1 / (k + i + 1)) for k in range(points)]
            summary = {"min": values[-1], "max": values[0], "latest": values[-1]}
            t.update(status=eng.SUCCEEDED, reason="Succeeded", job_status="Complete")
            t.update(metrics={"loss": summary}, objective=float(values[-1]))
            t.update(history={"loss": {"values": values, "steps": list(range(points))}})
            t["finished"] = eng.now_iso()
    best = eng.best_trial(rec)
    rec["best_trial"] = best["name"] if best else None
    return rec


@pytest.mark.parametrize("n", [2_000, 10_000])
def test_a_record_of_any_trial_count_fits_and_says_so(n: int) -> None:
    rec = big_record("sw-big", n)
    assert len(json.dumps(rec)) > 2 * fit.RECORD_MAX_BYTES
    out = json.loads(fit.fit_record(rec))
    assert len(json.dumps(out, separators=(",", ":"))) <= fit.RECORD_MAX_BYTES
    kept = {t["name"]: t for t in out["trials"]}
    assert out["best_trial"] in kept and kept[out["best_trial"]]["history"]["loss"]["values"]
    assert all(kept[t["name"]]["status"] == "Running" for t in rec["trials"][-3:])
    assert sum(out["trials_omitted"].values()) + len(kept) == n
    assert f"{n} trials do not fit" in out["record_limited"]
    assert out["events"][-1]["reason"] == "RecordLimited"
    assert len(rec["trials"]) == n and rec["trials"][0]["history"]  # the driver's stays whole


@pytest.fixture
def sweeps(k8s_cluster: Any, k8s_admin_kubeconfig: str, k8s_namespace: str, tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    return ks.KubernetesSweeps(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )


def _create(sweeps: ks.KubernetesSweeps, record: dict[str, Any]) -> ks.ConfigMapStore:
    """The sweep's ConfigMap as `KubernetesSweeps.start` creates it (the first record small)."""
    name = record["name"]
    first = dict(record, trials=record["trials"][:1])
    sweeps.api.core.create_namespaced_config_map(
        sweeps.namespace,
        {
            "metadata": {
                "name": name,
                "labels": {ks.RECORD_LABEL: name},
                "annotations": {ks.HEARTBEAT_ANNOTATION: ks._iso(ks._now())},
            },
            "data": {ks.RECORD_KEY: json.dumps(first)},
        },
    )
    return ks.ConfigMapStore(sweeps.api, name)


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="a cluster sweep's record of 2,500 and 6,000 trials (one in five failed, with its "
    "message) saved by the driver: accepted by the API server (ConfigMap under 1 MiB), best and "
    "running trials kept, the record says it was limited",
    area="kubernetes",
    tries=1,
)
@pytest.mark.parametrize("n", [2_500, 6_000])
def test_thousands_of_trials_fit_the_configmap_on_the_api_server(sweeps, n: int) -> None:
    """The driver's save of thousands of trials (one in five failed, with its message) is
    accepted by the API server; readers see the best and running trials and the note."""
    record = big_record(f"sw-many-{n}", n)
    store = _create(sweeps, record)
    store.save(record)  # a 422 here was the old behaviour past ~2,000 trials
    read = sweeps.read(record["name"])
    assert read["status"] == "Running"
    assert f"{n} trials do not fit" in read["record_limited"]
    names = [t["name"] for t in read["trials"]]
    assert read["best_trial"] == record["best_trial"] and record["best_trial"] in names
    assert names[-3:] == [t["name"] for t in record["trials"][-3:]]
    assert sum(read["trials_omitted"].values()) + len(names) == n
    assert any(e["reason"] == "RecordLimited" for e in read["events"])
    (listed,) = sweeps.list()
    assert listed["name"] == record["name"]


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="the API server refuses a sweep's record (422, past 1 MiB): the sweep reads "
    "Failed/RecordRefused with the server's reason at once, not DriverLost two minutes later",
    area="kubernetes",
    tries=1,
)
def test_a_refused_record_is_reported_not_a_silent_driver_lost(sweeps) -> None:
    """A record the API server refuses (here: fitted to 1.5 MB, past the ConfigMap's 1 MiB)
    stops the driver with the server's reason, and readers see it at once."""
    record = big_record("sw-refused", 6_000)
    store = _create(sweeps, record)
    store.limit = 1_500_000
    with pytest.raises(KFJupyterError, match="The API server refused the sweep's record"):
        store.save(record)
    read = sweeps.read("sw-refused")
    assert (read["status"], read["reason"]) == ("Failed", "RecordRefused")
    assert "422" in read["message"] and "no more trials start" in read["message"]
    assert "1048576" in read["message"] or "Too long" in read["message"], read["message"]
    sweeps.delete("sw-refused")
    assert sweeps.list() == []


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="a cluster sweep of 6,000 trials started and cancelled: its first record is "
    "limited, yet the driver (handed the whole record) knows every trial; the cancelled record "
    "accounts for all 6,000",
    area="kubernetes",
    tries=1,
)
def test_a_sweep_of_thousands_of_trials_starts_and_its_driver_has_every_trial(
    k8s_cluster: Any, k8s_standin: Any, sweeps
) -> None:
    """6,000 trials: the first record does not fit whole, yet the driver (handed the whole
    record, not the ConfigMap's) knows every trial: cancelled at once, the record accounts
    for all 6,000."""
    from .test_sweeps_kubernetes import _template, plain_runtime, sleeper

    plain_runtime(k8s_cluster, sweeps.namespace)
    n = 6_000
    spec = eng.SweepSpec(name="sw-6000", params=parse_space(SPACE), num_trials=n, seed=4)
    sweeps.start(spec, _template(sleeper))
    first = sweeps.read("sw-6000")
    assert f"{n} trials do not fit" in first["record_limited"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rec = sweeps.read("sw-6000")
        if any(t["status"] == "Running" for t in rec["trials"]):
            break
        time.sleep(0.5)
    rec = sweeps.cancel("sw-6000", timeout=120)
    assert (rec["status"], rec["reason"]) == ("Failed", "Cancelled")
    kept = len(rec["trials"])
    assert kept + sum(rec.get("trials_omitted", {}).values()) == n
    assert {t["status"] for t in rec["trials"]} == {"Cancelled"}
    assert "sw-6000-trial-1" in [t["name"] for t in rec["trials"]]  # it ran: kept
    sweeps.delete("sw-6000")
    assert sweeps.list() == []
