"""Issue 19 item 5 on the harness: an MPI job's progress reaches `status.trainerStatus`.

As the Trainer v2.3 lays it out, the status variables and token reach the launcher pod only,
while rank 0 runs on the first hostfile host, `node-0` (the stand-in's mpirun gives each rank its
own pod's environment: tests/k8s_cluster/mpirun_standin.py). Before the launcher relayed rank
0's reports, nothing was ever posted for an MPI job.
"""

from __future__ import annotations

from typing import Any

import pytest

from kf_jupyter import MPITrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.types import COMPLETE

pytestmark = pytest.mark.slow


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    cfg = KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    return KubernetesBackend(cfg)


def mpi_report() -> dict:
    import os

    import kf_jupyter

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    kf_jupyter.report(step=rank + 1, progress=0.5 if rank == 0 else 0.9, loss=0.25 + rank)
    return {"has_url": "KUBEFLOW_TRAINER_SERVER_URL" in os.environ}


@pytest.mark.usefixtures("trainjob_status_gate")
def test_mpi_rank_zero_progress_reaches_trainer_status(backend: Any) -> None:
    name = backend.train(MPITrainer(func=mpi_report, num_nodes=2))
    job = backend.wait_for_job_status(name, timeout=240)
    assert job.status == COMPLETE
    assert backend.get_job_result(name) == {"has_url": False}  # rank 0 is on node-0
    ts = job.trainer_status
    assert ts is not None  # before: never posted
    assert ts.progress_percentage == 50  # rank 0's, not rank 1's 90
    assert ts.metrics == {"loss": "0.25", "step": "1"}


def mpi_env() -> str:
    import os

    rank = os.environ["OMPI_COMM_WORLD_RANK"]
    print(f"rank {rank} greeting={os.environ.get('GREETING')}", flush=True)
    return os.environ.get("GREETING", "")


def test_mpi_ranks_on_node_pods_see_the_jobs_env(backend: Any) -> None:
    """A rank on a `node` pod runs in an SSH session, which gets none of the pod's env: the
    job's env reaches it only when mpirun forwards it (`-x NAME`). Before, rank 0 (on node-0)
    saw no GREETING on a cluster (the harness now starts such ranks with the session's env)."""
    from kf_jupyter import RuntimeConfig

    name = backend.train(
        MPITrainer(func=mpi_env, num_nodes=2), runtime_config=RuntimeConfig(env={"GREETING": "hi"})
    )
    assert backend.wait_for_job_status(name, timeout=240).status == COMPLETE
    lines = [line.split("] ")[-1] for line in backend.get_job_logs(name) if "greeting=" in line]
    assert sorted(lines) == ["rank 0 greeting=hi", "rank 1 greeting=hi"]
    assert backend.get_job_result(name) == "hi"  # rank 0, on node-0


def xgb_noop() -> None:
    pass


def test_xgboost_with_gpus_waits_unschedulable_with_the_workers_the_tracker_expects(
    backend: Any, k8s_cluster: Any, k8s_namespace: str
) -> None:
    """Item 7 on the harness: the stand-in node has no GPU, so the pods stay Pending with the
    scheduler's reason, which the tool shows; the pods the Trainer would run carry
    DMLC_NUM_WORKER = nodes x GPUs and our command starts that many workers (G per pod)."""
    from kubernetes import client as k8s

    from kf_jupyter import XGBoostTrainer
    from tests.test_k8s_waiting import _waiting

    trainer = XGBoostTrainer(func=xgb_noop, num_nodes=2, resources_per_node={"gpu": 2})
    name = backend.train(trainer)
    job = _waiting(backend, name, "Unschedulable")
    assert job.status == "Created" and "Insufficient nvidia.com/gpu" in job.message
    assert any(e.reason == "FailedScheduling" for e in backend.get_job_events(name))
    pods = k8s.CoreV1Api(k8s_cluster.api_client()).list_namespaced_pod(
        k8s_namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}"
    )
    assert len(pods.items) == 2 and all(not p.spec.node_name for p in pods.items)
    for pod in pods.items:
        c = pod.spec.containers[0]
        env = {e.name: e.value for e in c.env}
        assert env["DMLC_NUM_WORKER"] == "4"
        assert c.resources.limits["nvidia.com/gpu"] == "2"
        assert "KF_JUPYTER_WORKERS_PER_NODE=2 exec python3" in c.command[2]
    backend.delete_job(name)
