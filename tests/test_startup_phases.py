"""Startup phases (issue 22): what a job does before its first line, from its real events.

The pure part (kf_jupyter/phases.py) turns a job's events into one line; the runner writes the
ranks' events (started, importing the framework, at the rendezvous); a real torch job whose
rank 1 holds back from init_process_group shows "waiting at rendezvous (1/2 there)" in its
record and in the ipywidget monitor, and nothing once it ended.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kf_jupyter import TorchTrainer
from kf_jupyter.phases import local_phase

from .test_local_support import client_fixture  # noqa: F401  (the `client` fixture)
from .waits import DEADLINE


def ev(reason, obj="", message=""):
    return {"reason": reason, "object": obj, "message": message}


def rank(n, reason, message=""):
    return ev(reason, f"rank-{n}", f"rank {n}: {message}")


def test_phase_follows_the_events_of_each_rank():
    created = [ev("Created", "job-a", "job job-a created")]
    assert local_phase(created, 4) == "Starting 4 ranks"
    warm = [*created, ev("WarmStart", "node-0", "node-0: forked from the warm pool")]
    assert local_phase(warm, 4) == "Starting 4 ranks (warm)"
    cold = [*created, ev("ColdStart", "", "every node starts cold: warm starts are off")]
    assert local_phase(cold, 2) == "Starting 2 ranks (cold: warm starts are off)"
    up = [*warm, rank(0, "RankStarted", "started (pid 1)"), rank(1, "RankStarted")]
    assert local_phase(up, 4) == "Starting 4 ranks (warm; 2/4 up)"
    importing = [*up, rank(1, "ImportingFramework", "importing torch")]
    assert local_phase(importing, 2) == "rank 1: importing torch…"
    at = [
        *importing,
        rank(0, "Rendezvous", "waiting for the other ranks (torch)"),
        rank(2, "RankStarted"),
        rank(2, "Rendezvous"),
        rank(3, "RankStarted"),
        rank(3, "RendezvousDone"),
    ]
    assert local_phase(at, 4) == (
        "Waiting for all 4 ranks at rendezvous (3/4 there) · rank 1: importing torch…"
    )
    done = [*at, *(rank(n, "RendezvousDone") for n in range(4))]
    assert local_phase(done, 4) == "All 4 ranks joined; running the program"
    # a resumed job starts its ranks again: only the events since the resume count
    resumed = [*done, ev("Suspended"), ev("Resumed"), rank(0, "RankStarted")]
    assert local_phase(resumed, 2) == "Starting 2 ranks (1/2 up)"


def test_several_ranks_importing_are_named_together():
    events = [rank(n, "ImportingFramework", "importing jax") for n in range(3)]
    events.append(rank(5, "ImportingFramework", "importing jax"))
    assert local_phase(events, 6) == (
        "ranks 0, 1, 2, 5: importing jax… · Starting 6 ranks (4/6 up)"
    )


def held_rendezvous(gate):
    """Rank 1 waits for `gate` before joining the process group; then one line each."""
    import os
    import time

    import torch.distributed as dist

    if os.environ["RANK"] == "1":
        while not os.path.exists(gate):
            time.sleep(0.05)
    dist.init_process_group("gloo")
    print(f"rank {dist.get_rank()} joined", flush=True)
    dist.destroy_process_group()


def wait_phase(client, name, want, timeout=DEADLINE):
    end = time.monotonic() + timeout
    seen = []
    while time.monotonic() < end:
        job = client.get_job(name)
        if not seen or seen[-1] != job.phase:
            seen.append(job.phase)
        if want(job.phase):
            return job
        time.sleep(0.1)
    raise AssertionError(f"no such phase in {timeout} s; phases seen: {seen}")


@pytest.mark.slow
def test_held_rendezvous_shows_in_the_record_the_events_and_the_monitor(client, tmp_path):
    from kf_jupyter.widgets.monitor import JobMonitor

    gate = tmp_path / "gate"
    name = client.train(
        TorchTrainer(func=held_rendezvous, func_args={"gate": str(gate)}, num_proc_per_node=2)
    )
    # rank 0 waits at init_process_group; rank 1 is up and holds back before it
    held = "Waiting for all 2 ranks at rendezvous (1/2 there)"
    job = wait_phase(client, name, lambda p: p == held)
    assert job.status == "Running"
    reasons = [(e.reason, e.message) for e in client.get_job_events(name)]
    assert (
        "Rendezvous",
        "rank 0: waiting for the other ranks (torch.distributed.init_process_group)",
    ) in reasons
    assert any(r == "RankStarted" and m.startswith("rank 1:") for r, m in reasons), reasons

    # the ipywidget monitor shows the same phase from the same record
    monitor = JobMonitor(client, name, poll_status=False, records=[])
    monitor._poll()
    monitor.flush_stats()
    assert f"{held}. No output yet." in monitor.phase_line.value
    assert monitor.phase_line.layout.display != "none"

    Path(gate).touch()
    done = client.wait_for_job_status(name, timeout=DEADLINE)
    assert done.status == "Complete"
    assert done.phase == ""  # never a phase after the job ended
    monitor._poll()
    monitor.flush_stats()
    assert monitor.phase_line.layout.display == "none"
    reasons = [e.reason for e in client.get_job_events(name)]
    assert reasons.count("RendezvousDone") == 2
    assert os.path.exists(gate)


def test_a_waiting_reason_stays_on_the_headers_one_row():
    """It took a second row (`<br>` after the row); now it is the row's last item, cut with an
    ellipsis when narrow, whole in its tooltip and its text. Failed before the change."""
    import html
    from html.parser import HTMLParser

    from kf_jupyter.widgets.monitor import JobMonitor

    monitor = JobMonitor(object(), "job-w", backend="local", poll_status=False, records=[])
    monitor.status = "Suspended"
    monitor.waiting = "Suspended: suspended by the user; Resume starts the program again " * 3
    head = monitor._header_html()
    assert "<br" not in head

    class Rows(HTMLParser):
        depth, row_depth, waiting = 0, None, None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            self.depth += 1
            if "kf-head-row" in (a.get("class") or ""):
                self.row_depth = self.depth
            if "kf-waiting" in (a.get("class") or ""):
                inside = self.row_depth is not None and self.depth > self.row_depth
                self.waiting = (inside, a.get("title"), a.get("style") or "")

        def handle_endtag(self, tag):
            if self.row_depth == self.depth:
                self.row_depth = -1
            self.depth -= 1

    p = Rows()
    p.feed(head.split("</style>", 1)[1])
    assert p.waiting is not None
    inside, title, style = p.waiting
    assert inside, head
    assert title == monitor.waiting
    assert "text-overflow:ellipsis" in style
    # its own line under the header too, whole, which a narrow monitor shows instead (issue 22)
    monitor._sync_waiting_line()
    assert monitor.waiting_line.layout.display == ""
    assert html.unescape(monitor.waiting_line.value).count(monitor.waiting) == 1
    monitor.status = "Running"  # no waiting reason once it runs
    assert "class='kf-waiting'" not in monitor._header_html()
    monitor._sync_waiting_line()
    assert monitor.waiting_line.value == "" and monitor.waiting_line.layout.display == "none"


@pytest.mark.slow
def test_a_cold_rank_reports_its_framework_import(tmp_path):
    from kf_jupyter import LocalBackendConfig, TrainerClient
    from kf_jupyter.backends.local.warm.pool import stop_all

    client = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state", warm=False))
    gate = tmp_path / "gate"
    try:
        name = client.train(
            TorchTrainer(func=held_rendezvous, func_args={"gate": str(gate)}, num_proc_per_node=2)
        )
        job = wait_phase(client, name, lambda p: p.startswith("Waiting for all 2 ranks"))
        events = [(e.reason, e.message) for e in client.get_job_events(name)]
        assert ("ImportingFramework", "rank 0: importing torch") in events, events
        assert any(
            r == "ImportedFramework" and m.startswith("rank 0: imported torch in ")
            for r, m in events
        ), events
        assert any(r == "ColdStart" for r, _ in events)
        assert job.warm is False
        gate.touch()
        assert client.wait_for_job_status(name, timeout=DEADLINE).status == "Complete"
    finally:
        for j in client.list_jobs():
            client.delete_job(j.name)
        stop_all(tmp_path / "state")


# -- Kubernetes: the pods' own states ---------------------------------------------------------


def _pod(rjob, index=0, phase="Pending", **status):
    from tests.test_k8s_waiting import _pod as pod

    p = pod(rjob, phase, **status)
    p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(index)
    p["metadata"]["name"] = f"j-{rjob}-0-{index}"
    return p


def _waiting(reason):
    return {"containerStatuses": [{"name": "node", "state": {"waiting": {"reason": reason}}}]}


def test_kubernetes_phase_is_the_pods_own_states():
    from kf_jupyter.backends.kubernetes.waiting import pods_phase

    assert pods_phase([]) == "Waiting for the Trainer to create the pods"
    creating = [_pod("node", 0, "Running"), _pod("node", 1, **_waiting("ContainerCreating"))]
    assert pods_phase(creating) == "Pods: 1/2 running · 1 ContainerCreating"
    init = {"initContainerStatuses": [{"name": "pip", "state": {"running": {}}}]}
    assert (
        pods_phase([_pod("node", 0, **init)]) == "Pods: 0/1 running · 1 init container pip running"
    )
    unscheduled = {"conditions": [{"type": "PodScheduled", "status": "False"}]}
    assert pods_phase([_pod("node", 0, **unscheduled)]) == "Pods: 0/1 running · 1 Unschedulable"
    assert pods_phase([_pod("node", i, "Running") for i in range(2)]) == "All 2 pods running"
    data = [_pod("dataset-initializer", 0, "Running")]
    assert pods_phase(data) == "dataset-initializer: Running"


@pytest.mark.slow
def test_kubernetes_job_record_carries_the_pods_phase(
    k8s_admin_kubeconfig, k8s_namespace, k8s_standin
):
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
    from kf_jupyter.options import TrainerCommand

    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )
    image = "registry.example.invalid/team/trainer:1.0"
    name = backend.train(
        TorchTrainer(num_nodes=1, image=image), options=[TrainerCommand(["bash", "-c", "echo hi"])]
    )
    job = wait_phase(backend, name, lambda p: "ImagePullBackOff" in p or "ErrImagePull" in p)
    assert job.status == "Created"
    assert job.phase.startswith("Pods: 0/1 running · 1 "), job.phase
    assert job.to_dict()["phase"] == job.phase  # what the server sends the lab
    backend.delete_job(name)


def test_a_plain_command_has_no_rank_phases_only_its_processes():
    warm = [ev("WarmStart", "node-0", "node-0: forked"), ev("WarmStart", "node-1", "node-1: f")]
    assert local_phase(warm, 4, runner=False, processes=2) == "Starting 2 processes (warm)"
    running = [*warm, ev("Running", "", "all processes started")]
    assert local_phase(running, 4, runner=False, processes=2) == "Started 2 processes (warm)"


def test_a_trainer_command_job_says_its_processes_started(client):
    from kf_jupyter import JAXTrainer
    from kf_jupyter.options import TrainerCommand

    name = client.train(
        JAXTrainer(num_nodes=2, initialize_distributed=False),
        options=[TrainerCommand(["bash", "-c", "sleep 30"])],
    )
    job = wait_phase(client, name, lambda p: p.startswith("Started 2 processes"))
    assert job.status == "Running"
    assert not any(e.reason == "RankStarted" for e in client.get_job_events(name))
    client.delete_job(name)


@pytest.mark.slow
def test_kubernetes_install_step_says_so_in_the_log_while_pip_runs(
    k8s_admin_kubeconfig, k8s_namespace, k8s_standin
):
    """On the harness (the pod's command run for real): while pip waits on a slow index, the
    job's first log line says it installs, instead of a running pod with no output (issue 22)."""
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
    from tests.test_suspend_k8s import _until, installing_from_a_slow_index

    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )
    with installing_from_a_slow_index(backend) as (name, _index):
        said = "kf-jupyter: installing 1 package (kfj-test-never-there) with pip..."
        logs = _until(lambda: list(backend.get_job_logs(name)), 60, "the pod's first line")
        assert logs[0] == said, logs
        assert backend.get_job(name).status == "Running"
        backend.delete_job(name)


def test_the_package_install_is_the_first_phase_until_it_is_done():
    installing = [ev("InstallingPackages", "", "installing 2 packages (a, b) with pip")]
    assert (
        local_phase(installing, 2) == "Package environment: installing 2 packages (a, b) with pip…"
    )
    done = [*installing, ev("InstalledPackages", "", "package environment ready in 3.0 s")]
    assert local_phase(done, 2) == "Starting 2 ranks"
    assert local_phase(installing, 2, runner=False).startswith("Package environment:")
