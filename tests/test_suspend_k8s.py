"""Suspend and resume on the Kubernetes backend, against the real API server; the stand-in plays
the Trainer's and JobSet's part (pods deleted on suspend, new pods on resume)."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer, RuntimeConfig, TorchTrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.errors import BackendError
from kf_jupyter.options import TrainerCommand
from kf_jupyter.types import COMPLETE, SUSPENDED

pytestmark = pytest.mark.slow


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    cfg = KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    return KubernetesBackend(cfg)


def _until(cond: Any, timeout: float, what: str) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _pods(backend: Any, name: str) -> list[Any]:
    from kf_jupyter.backends.kubernetes.pods import pod_selector

    return backend._list_pods(pod_selector(name))


def test_suspend_deletes_the_pods_and_resume_after_a_kernel_restart_recreates_them(
    backend: Any, tmp_path: Path, k8s_admin_kubeconfig: str
) -> None:
    kubeconfig = k8s_admin_kubeconfig
    gate = tmp_path / "gate"
    script = f'echo "run $(date +%s%N)"; while [ ! -e {gate} ]; do sleep 0.1; done; echo finished'
    name = backend.train(
        TorchTrainer(num_nodes=1), options=[TrainerCommand(["bash", "-c", script])]
    )
    _until(lambda: any(ln.startswith("run ") for ln in backend.get_job_logs(name)), 120, "the pod")
    first = _pods(backend, name)[0]["metadata"]["uid"]
    backend.suspend_job(name)
    job = backend.wait_for_job_status(name, {SUSPENDED}, timeout=60)
    assert job.status == SUSPENDED and job.reason == "Suspended"
    _until(lambda: not _pods(backend, name), 60, "the pods to be deleted")
    assert backend.get_job(name).status == SUSPENDED  # the job is kept
    # Resumed from another process (a restarted kernel): only the cluster holds the state.
    code = (
        "from kf_jupyter import TrainerClient, KubernetesBackendConfig\n"
        f"TrainerClient(KubernetesBackendConfig(namespace={backend.namespace!r}, "
        f"config_file={kubeconfig!r})).resume_job({name!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    _until(
        lambda: [p for p in _pods(backend, name) if p["metadata"]["uid"] != first], 120, "new pods"
    )
    gate.write_text("")
    job = backend.wait_for_job_status(name, timeout=120)
    assert job.status == COMPLETE
    assert "finished" in list(backend.get_job_logs(name))
    obj = backend._get_trainjob(name)
    assert obj["spec"]["suspend"] is False
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conds["Suspended"]["status"] == "False" and conds["Suspended"]["reason"] == "Resumed"
    with pytest.raises(BackendError, match="cannot be suspended"):
        backend.suspend_job(name)


class _SlowIndex(http.server.ThreadingHTTPServer):
    """A package index that never answers in time: pip stays in the installation step."""

    daemon_threads = True

    def __init__(self) -> None:
        self.hits = 0
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server.hits += 1
                server.release.wait(120)
                self.send_error(404)

        super().__init__(("127.0.0.1", 0), Handler)


def noop():
    return 1


@contextmanager
def installing_from_a_slow_index(backend: Any) -> Iterator[tuple[str, _SlowIndex]]:
    """(job name, index): a job with one package to install, from `_SlowIndex`, once its pip has
    asked the index; the index answers (404) and closes after the block."""
    index = _SlowIndex()
    threading.Thread(target=index.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{index.server_address[1]}/simple"
        rc = RuntimeConfig(packages_to_install=["kfj-test-never-there"], pip_index_urls=[url])
        name = backend.train(JAXTrainer(func=noop, initialize_distributed=False), runtime_config=rc)
        _until(lambda: index.hits >= 1, 120, "pip to ask the index")
        yield name, index
    finally:
        index.release.set()
        index.shutdown()
        index.server_close()


def test_suspend_during_package_installation_and_resume_installs_again(backend: Any) -> None:
    with installing_from_a_slow_index(backend) as (name, index):
        backend.suspend_job(name)
        assert backend.wait_for_job_status(name, {SUSPENDED}, timeout=60).status == SUSPENDED
        _until(lambda: not _pods(backend, name), 60, "the installing pod to be deleted")
        hits = index.hits
        backend.resume_job(name)
        _until(lambda: index.hits > hits, 120, "the new pod to install again")
        backend.delete_job(name)


def test_a_job_waiting_in_a_kueue_queue_is_queued_not_suspended(
    backend: Any, k8s_standin: Any
) -> None:
    from kf_jupyter.options import Queue

    # The harness plays Kueue: its webhook suspends a job with a queue label until admitted;
    # a held queue admits nothing until released.
    k8s_standin.kueue_held.add("team-a")
    options = [Queue("team-a"), TrainerCommand(["bash", "-c", "echo admitted"])]
    try:
        name = backend.train(TorchTrainer(num_nodes=1), options=options)
        job = _until(
            lambda: (j := backend.get_job(name)).reason == "Queued" and j,
            60,
            "the job to be queued",
        )
        assert job.status == "Created" and "team-a" in job.message
        with pytest.raises(BackendError, match="Kueue resumes it"):
            backend.resume_job(name)
    finally:
        k8s_standin.kueue_release("team-a")  # Kueue admits it: unsuspends it
    assert backend.wait_for_job_status(name, timeout=120).status == COMPLETE


@pytest.fixture
def admin_api(k8s_cluster: Any) -> Any:
    return k8s_cluster.api_client()
