"""The Kubernetes backend against a real kube-apiserver with the real Trainer CRDs and runtimes.

The stand-in (tests/k8s_cluster) plays the Trainer controller and the kubelet: it runs each pod's
command as a local process and serves its log through the API server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import (
    ClusterUnreachableError,
    ForbiddenError,
    JobNotFoundError,
    JobRejectedError,
    MPITrainer,
    NamespaceNotFoundError,
    RuntimeConfig,
    RuntimeMismatchError,
    TorchTrainer,
    TrainerNotInstalledError,
)
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.constants import GROUP, VERSION
from kf_jupyter.options import (
    ActiveDeadlineSeconds,
    Labels,
    PodSpecOverride,
    PodTemplateOverride,
    PodTemplateOverrides,
    TrainerCommand,
)
from kf_jupyter.types import COMPLETE, CREATED, RUNNING

REPO = Path(__file__).resolve().parents[1]


def _backend(kubeconfig: str, namespace: str | None) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    return KubernetesBackend(KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig))


class RequestCounter:
    """Counts the HTTP requests an ApiClient sends (wraps its REST client, below our code)."""

    def __init__(self, api_client: Any) -> None:
        self.calls: list[str] = []
        rest = api_client.rest_client
        original = rest.request

        def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(f"{method} {url.split('?')[0]}")
            return original(method, url, *args, **kwargs)

        rest.request = request

    def reset(self) -> None:
        self.calls.clear()


def shell_job(script: str) -> list[Any]:
    """Options that run a shell script instead of a function (no torch start-up cost)."""
    return [TrainerCommand(["bash", "-c", script])]


# -- without a server ------------------------------------------------------------------------


def test_importing_the_package_and_client_does_not_import_kubernetes() -> None:
    code = (
        "import sys, kf_jupyter, kf_jupyter.client\n"
        "from kf_jupyter import KubernetesBackendConfig\n"
        "assert 'kubernetes' not in sys.modules, 'kubernetes imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_unreachable_cluster_names_the_url(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens there
    cfg = tmp_path / "kubeconfig"
    cfg.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n"
        "    insecure-skip-tls-verify: true\n"
        "users:\n- name: u\n  user:\n    token: s3cr3t-token\n"
        "contexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n    namespace: ns1\n"
        "current-context: ctx\n"
    )
    backend = _backend(str(cfg), None)
    assert backend.namespace == "ns1"  # from the kubeconfig context
    with pytest.raises(ClusterUnreachableError) as err:
        backend.list_jobs()
    msg = str(err.value)
    assert f"https://127.0.0.1:{port}" in msg and "VPN" in msg and "s3cr3t" not in msg


def test_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterUnreachableError, match="kubeconfig"):
        _backend(str(tmp_path / "nope"), "default")


def _pod_at(job: str, rjob: str, index: int, created: str, phase: str, suffix: str = "") -> dict:
    pod = _pod(job, index)
    pod["metadata"]["name"] += suffix
    pod["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] = rjob
    pod["metadata"]["creationTimestamp"] = created
    pod["status"] = {"phase": phase}
    return pod


def test_newest_pod_per_index_wins_and_steps_are_ordered() -> None:
    from kf_jupyter.backends.kubernetes.backend import newest_pods, pod_step

    pods = [
        _pod_at("j", "node", 1, "2026-01-01T00:00:05Z", "Running"),
        _pod_at("j", "node", 0, "2026-01-01T00:00:01Z", "Failed", "-old"),
        _pod_at("j", "node", 0, "2026-01-01T00:00:09Z", "Running", "-new"),
        _pod_at("j", "launcher", 0, "2026-01-01T00:00:02Z", "Running"),
    ]
    steps = [pod_step(p) for p in newest_pods(pods)]
    assert [(s.name, s.status, s.rank) for s in steps] == [
        ("launcher", "Running", None),
        ("node-0", "Running", 0),
        ("node-1", "Running", 1),
    ]


def test_status_from_conditions_pods_and_jobs_status() -> None:
    from kf_jupyter.backends.kubernetes.backend import job_status

    def cond(t: str, s: str = "True", reason: str = "R") -> dict:
        return {"type": t, "status": s, "reason": reason, "message": "m"}

    running = [_pod_at("j", "node", i, "2026-01-01T00:00:00Z", "Running") for i in range(2)]
    assert job_status({"status": {"conditions": [cond("Complete")]}}, running, 2)[0] == COMPLETE
    assert job_status({"status": {"conditions": [cond("Failed")]}}, running, 2)[0] == "Failed"
    suspended = {"spec": {"suspend": True}, "status": {"conditions": [cond("Suspended")]}}
    assert job_status(suspended, [], 2) == ("Suspended", "Suspended", "m")  # issue 14
    resumed = {"status": {"conditions": [cond("Suspended", "False", "Resumed")]}}
    assert job_status(resumed, running, 2)[0] == RUNNING  # the SDK would say Created
    assert job_status({}, running[:1], 2)[0] == CREATED  # one of two nodes up
    ready = {"status": {"jobsStatus": [{"name": "node", "ready": 1, "active": 1}]}}
    assert job_status(ready, None, 2)[0] == RUNNING
    assert job_status({"status": {"jobsStatus": [{"name": "node", "active": 1}]}}, None, 2)[0] == (
        CREATED
    )


# -- against the real API server ---------------------------------------------------------------


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str) -> Any:
    return _backend(k8s_admin_kubeconfig, k8s_namespace)


@pytest.fixture
def admin_api(k8s_cluster: Any) -> Any:
    return k8s_cluster.api_client()


@pytest.mark.slow
def test_discovery_against_the_default_runtimes(backend: Any, admin_api: Any) -> None:
    from kubernetes import client

    runtimes = {r.name: r for r in backend.list_runtimes()}
    assert {"torch-distributed", "torch-distributed-with-cache", "deepspeed-distributed"} <= set(
        runtimes
    )
    assert [r.name for r in backend.list_runtimes("torch")] == [
        "torch-distributed",
        "torch-distributed-with-cache",
    ]
    # two torch runtimes: the canonical name wins
    job = backend.dry_run(TorchTrainer(func=_train_fn))
    assert job["backend"] == "kubernetes"
    assert job["trainjob"]["spec"]["runtimeRef"]["name"] == "torch-distributed"
    # MPITrainer: a runtime with the MPI policy
    mpi = backend.dry_run(MPITrainer(func=_train_fn))["trainjob"]["spec"]["runtimeRef"]["name"]
    assert runtimes[mpi].ml_policy == "mpi" and runtimes[mpi].framework in ("deepspeed", "mlx")
    # an explicit runtime of another framework
    with pytest.raises(RuntimeMismatchError, match="xgboost-distributed"):
        backend.dry_run(TorchTrainer(func=_train_fn), runtime="xgboost-distributed")
    # a namespaced TrainingRuntime wins on a name clash; no framework label -> "unknown"
    custom = client.CustomObjectsApi(admin_api)
    base = custom.get_cluster_custom_object(
        GROUP, VERSION, "clustertrainingruntimes", "torch-distributed"
    )
    for name, labels in (
        ("torch-distributed", {"trainer.kubeflow.org/framework": "torch"}),
        ("bare", {}),
    ):
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            backend.namespace,
            "trainingruntimes",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TrainingRuntime",
                "metadata": {"name": name, "labels": labels},
                "spec": base["spec"],
            },
        )
    rt = backend.get_runtime("torch-distributed")
    assert rt.kind == "TrainingRuntime" and rt.namespace == backend.namespace
    assert backend.get_runtime("bare").framework == "unknown"
    assert sum(r.name == "torch-distributed" for r in backend.list_runtimes()) == 1


def _train_fn(n: int = 3) -> dict:
    import os

    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"hello from rank {rank} of {dist.get_world_size()} FOO={os.environ['FOO']}", flush=True)
    dist.destroy_process_group()
    return {"n": n, "world": 2}


@pytest.mark.slow
def test_torch_job_runs_streams_every_rank_and_completes(
    backend: Any, k8s_standin: Any, admin_api: Any
) -> None:
    from kubernetes import client

    trainer = TorchTrainer(func=_train_fn, func_args={"n": 7}, num_proc_per_node=2)
    options = [
        Labels({"team": "vision"}),
        PodTemplateOverrides(
            PodTemplateOverride(
                target_jobs=["node"],
                metadata={"labels": {"kf-test/pod": "yes"}},
                spec=PodSpecOverride(node_selector={"kubernetes.io/hostname": "standin-node"}),
            )
        ),
        ActiveDeadlineSeconds(600),
    ]
    name = backend.train(trainer, runtime_config=RuntimeConfig(env={"FOO": "bar"}), options=options)
    # accepted by the API server, with everything we asked for
    obj = client.CustomObjectsApi(admin_api).get_namespaced_custom_object(
        GROUP, VERSION, backend.namespace, "trainjobs", name
    )
    assert obj["metadata"]["labels"]["team"] == "vision"
    assert obj["spec"]["activeDeadlineSeconds"] == 600
    assert {"name": "FOO", "value": "bar"} in obj["spec"]["trainer"]["env"]
    patch = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod_tmpl = patch["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod_tmpl["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "standin-node"}

    seen: list[str] = []
    waited: dict[str, Any] = {}
    statuses: list[str] = []

    def wait() -> None:
        waited["job"] = backend.wait_for_job_status(
            name, timeout=300, callbacks=[lambda j: statuses.append(j.status)]
        )

    waiter = threading.Thread(target=wait)
    waiter.start()
    # follow=True right after submitting: waits for the pod instead of returning nothing
    for line in backend.get_job_logs(name, follow=True):
        seen.append(line)
    waiter.join(60)
    assert "hello from rank 0 of 2 FOO=bar" in seen, "\n".join(seen)
    assert "hello from rank 1 of 2 FOO=bar" in seen
    job = waited["job"]
    assert job.status == COMPLETE and job.reason == "AllJobsCompleted"
    assert [s.name for s in job.steps] == ["node-0"] and job.steps[0].exit_code == 0
    assert job.num_proc_per_node == 2 and job.framework == "torch"
    assert statuses[-1] == COMPLETE and statuses[0] in (CREATED, RUNNING, COMPLETE)
    assert backend.get_job_result(name) == {"n": 7, "world": 2}
    # the pod carries the override's labels (through the stand-in's JobSet)
    pod = client.CoreV1Api(admin_api).read_namespaced_pod(f"{name}-node-0-0", backend.namespace)
    assert pod.metadata.labels["kf-test/pod"] == "yes"
    # logs again, without follow, and their tail
    tail = list(backend.get_job_logs(name, tail_lines=1))
    # the last line a person reads: the protocol lines are hidden ...
    assert len(tail) == 1 and not tail[0].startswith("##kf-jupyter:"), tail
    raw = [r.line for r in backend.iter_log_records(name, tail_lines=1)]
    assert raw[0].startswith("##kf-jupyter:result ")  # ... but still in the raw records
    events = backend.get_job_events(name)
    assert any(e.involved_object == f"Pod/{name}-node-0-0" for e in events)
    backend.delete_job(name)
    with pytest.raises(JobNotFoundError):
        _eventually_gone(backend, name)


def _eventually_gone(backend: Any, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        backend.get_job(name)  # raises JobNotFoundError once deleted
        time.sleep(0.2)


@pytest.mark.slow
def test_two_node_job_streams_both_pods_tagged(backend: Any, k8s_standin: Any) -> None:
    script = 'for i in 1 2 3; do echo "node $PET_NODE_RANK line $i"; sleep 0.2; done'
    name = backend.train(TorchTrainer(num_nodes=2, num_proc_per_node=1), options=shell_job(script))
    lines = list(backend.get_job_logs(name, follow=True))
    for rank in (0, 1):
        assert [ln for ln in lines if ln.startswith(f"[node-{rank}] ")] == [
            f"[node-{rank}] node {rank} line {i}" for i in (1, 2, 3)
        ]
    only = list(backend.get_job_logs(name, step="node-1"))
    assert only == [f"node 1 line {i}" for i in (1, 2, 3)]  # one source: untagged


@pytest.mark.slow
def test_kubeflow_sdk_interoperates(
    backend: Any, k8s_standin: Any, k8s_admin_kubeconfig: str
) -> None:
    from kubeflow.trainer import CustomTrainerContainer, TrainerClient
    from kubeflow.trainer import KubernetesBackendConfig as SDKConfig

    ours = backend.train(TorchTrainer(num_nodes=1), options=shell_job("echo ours"))
    sdk = TrainerClient(SDKConfig(namespace=backend.namespace, config_file=k8s_admin_kubeconfig))
    assert ours in [j.name for j in sdk.list_jobs()]
    got = sdk.get_job(ours)
    assert got.name == ours and got.runtime.name == "torch-distributed"
    theirs = sdk.train(
        runtime=sdk.get_runtime("torch-distributed"),
        trainer=CustomTrainerContainer(image="busybox:1.36"),
    )
    listed = {j.name: j for j in backend.list_jobs()}
    assert {ours, theirs} <= set(listed)
    assert listed[theirs].framework == "torch"  # from the runtime: the SDK sets no annotation
    assert backend.wait_for_job_status(theirs, timeout=120).status == COMPLETE


@pytest.mark.slow
def test_forbidden_namespace_names_verb_resource_and_namespace(
    k8s_limited_kubeconfig: str, k8s_cluster: Any
) -> None:
    allowed = _backend(k8s_limited_kubeconfig, "team-a")
    assert allowed.list_jobs() == []
    assert any(r.name == "torch-distributed" for r in allowed.list_runtimes())
    refused = _backend(k8s_limited_kubeconfig, "team-b")
    with pytest.raises(ForbiddenError) as err:
        refused.list_jobs()
    msg = str(err.value)
    assert "list trainjobs.trainer.kubeflow.org in namespace 'team-b'" in msg
    assert "limited" in msg and "Traceback" not in msg
    with pytest.raises(ForbiddenError, match=r"trainingruntimes.* in namespace 'team-b'"):
        refused.list_runtimes()
    with pytest.raises(ForbiddenError, match="create trainjobs"):
        refused.train(
            TorchTrainer(),
            runtime=allowed.get_runtime("torch-distributed"),
            options=shell_job("true"),
        )


@pytest.mark.slow
def test_cluster_without_trainer_crds(k8s_bare_cluster: Any) -> None:
    backend = _backend(k8s_bare_cluster.kubeconfig_path, "default")
    for call in (backend.list_jobs, backend.list_runtimes, lambda: backend.get_job("x")):
        with pytest.raises(TrainerNotInstalledError, match=r"trainjobs\.trainer\.kubeflow\.org"):
            call()


@pytest.mark.slow
def test_rejections_and_missing_things(backend: Any, k8s_admin_kubeconfig: str) -> None:
    def bad_nodes(job_spec: dict[str, Any], trainer: Any, be: Any) -> None:
        job_spec["spec"]["trainer"]["numNodes"] = -1

    with pytest.raises(JobRejectedError, match=r"spec.trainer.numNodes"):
        backend.train(TorchTrainer(), options=[*shell_job("true"), bad_nodes])
    with pytest.raises(JobNotFoundError, match="nope"):
        backend.get_job("nope")
    with pytest.raises(JobNotFoundError):
        backend.wait_for_job_status("nope", timeout=5)
    with pytest.raises(JobNotFoundError):
        list(backend.get_job_logs("nope", follow=True))
    ghost = _backend(k8s_admin_kubeconfig, "no-such-namespace")
    with pytest.raises(NamespaceNotFoundError, match="no-such-namespace"):
        ghost.list_jobs()
    with pytest.raises(NamespaceNotFoundError, match="no-such-namespace"):
        ghost.train(TorchTrainer(), runtime="torch-distributed", options=shell_job("true"))


@pytest.mark.slow
def test_wait_and_logs_resume_across_an_api_server_restart(
    backend: Any, k8s_standin: Any, k8s_cluster: Any
) -> None:
    n = 60
    script = f"for i in $(seq 1 {n}); do echo line-$i; sleep 0.25; done"
    name = backend.train(TorchTrainer(), options=shell_job(script))
    result: dict[str, Any] = {}

    def wait() -> None:
        try:
            result["job"] = backend.wait_for_job_status(name, timeout=240)
        except Exception as exc:  # reported below
            result["error"] = exc

    waiter = threading.Thread(target=wait)
    waiter.start()
    lines: list[str] = []
    restarted = False
    for line in backend.get_job_logs(name, follow=True):
        lines.append(line)
        if line == "line-5" and not restarted:
            restarted = True
            k8s_cluster.restart_apiserver()
    waiter.join(120)
    assert restarted
    assert "error" not in result, result.get("error")
    assert result["job"].status == COMPLETE
    assert lines == [f"line-{i}" for i in range(1, n + 1)]  # none lost, none repeated


def _suspended_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "suspend": True,
            "trainer": {"numNodes": 2, "command": ["true"]},
        },
    }


def _pod(job: str, index: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job}-node-0-{index}",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": job,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        },
        "spec": {"containers": [{"name": "node", "image": "none"}], "nodeName": "nowhere"},
    }


@pytest.fixture
def many_jobs(admin_api: Any, backend: Any) -> Iterator[Any]:
    from kubernetes import client

    custom, core = client.CustomObjectsApi(admin_api), client.CoreV1Api(admin_api)

    def create(names: list[str]) -> None:
        for name in names:
            custom.create_namespaced_custom_object(
                GROUP, VERSION, backend.namespace, "trainjobs", _suspended_job(name)
            )
            for i in range(2):
                core.create_namespaced_pod(backend.namespace, _pod(name, i))

    yield create


@pytest.mark.slow
def test_list_jobs_costs_the_same_requests_for_2_or_20_jobs(backend: Any, many_jobs: Any) -> None:
    counter = RequestCounter(backend.api_client)
    many_jobs([f"few-{i}" for i in range(2)])
    backend.list_jobs()  # fills the runtime cache
    counter.reset()
    jobs = backend.list_jobs()
    few = list(counter.calls)
    assert len(jobs) == 2 and all(len(j.steps) == 2 for j in jobs)
    many_jobs([f"many-{i}" for i in range(18)])
    counter.reset()
    jobs = backend.list_jobs()
    assert len(jobs) == 20 and all([s.name for s in j.steps] == ["node-0", "node-1"] for j in jobs)
    assert counter.calls == few and len(few) == 2, counter.calls
    assert all(j.num_nodes == 2 for j in jobs)


@pytest.mark.slow
def test_wait_uses_a_watch_not_polling(backend: Any, k8s_standin: Any, admin_api: Any) -> None:
    """A job that the test completes by patching its status: at most 3 requests in the wait."""
    from kubernetes import client

    custom = client.CustomObjectsApi(admin_api)
    name = "held"
    custom.create_namespaced_custom_object(
        GROUP, VERSION, backend.namespace, "trainjobs", _suspended_job(name)
    )
    counter = RequestCounter(backend.api_client)
    backend._cached_runtimes()
    counter.reset()

    def complete_later() -> None:
        time.sleep(6)
        custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            backend.namespace,
            "trainjobs",
            name,
            {
                "status": {
                    "conditions": [
                        {
                            "type": "Complete",
                            "status": "True",
                            "reason": "AllJobsCompleted",
                            "message": "done by the test",
                            "lastTransitionTime": "2026-01-01T00:00:00Z",
                        }
                    ]
                }
            },
        )

    patcher = threading.Thread(target=complete_later)
    patcher.start()
    t0 = time.monotonic()
    job = backend.wait_for_job_status(name, timeout=60)
    elapsed = time.monotonic() - t0
    patcher.join()
    assert job.status == COMPLETE and job.message == "done by the test"
    assert elapsed >= 5
    assert len(counter.calls) <= 3, counter.calls
    if os.environ.get("KF_VERBOSE"):
        print(counter.calls)
