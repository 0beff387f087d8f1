"""Following a kubernetes job's logs: a silent job's follow ends when its consumer sets `stop`
(issue 13 item 2), and a progress bar still being written comes as `\\r` update records.

Real API server and stand-in kubelet (tests/k8s_cluster), which streams a container's log as it
is written, as a kubelet passes on a partial line. The server extension's pump threads pass
their stream's stop event to `iter_log_records`; without it a follow of a pod that prints
nothing blocked on its queue for ever and the pump thread leaked. Without update records a
bar looked like a silent pod until its line ended.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kf_jupyter import TorchTrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.options import TrainerCommand
from kf_jupyter.widgets.state import LogState

from .waits import wait_until


def _run(kubeconfig: str, namespace: str, script: str) -> tuple[Any, str]:
    """A backend, and the name of a one-pod job running `bash -c script`."""
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig)
    )
    name = backend.train(
        TorchTrainer(num_nodes=1, num_proc_per_node=1),
        options=[TrainerCommand(["bash", "-c", script])],
    )
    return backend, name


@pytest.mark.slow
def test_stop_ends_a_silent_kubernetes_follow(
    k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any
) -> None:
    backend, name = _run(k8s_admin_kubeconfig, k8s_namespace, "echo started; sleep 600")
    stop = threading.Event()
    lines: list[str] = []
    ended = threading.Event()

    def follow() -> None:
        for rec in backend.iter_log_records(name, follow=True, stop=stop):
            lines.append(rec.line)
        ended.set()

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    try:
        wait_until(lambda: "started" in lines, what=f"job {name} printing 'started'")
        assert not ended.is_set()
        stop.set()
        wait_until(ended.is_set, what="the follow ending after stop was set", timeout=30)
        t.join(30)
        assert not t.is_alive()
    finally:
        backend.delete_job(name)


#: A bar drawn the way tqdm draws it into a file: `\r` + state, no newline until it ends.
BAR = "for i in 0 1 2 3 4 5 6; do printf '\\r%d/6 |%s' $i $(printf '#%.0s' $(seq 0 $i)); sleep 0.4; done; echo; echo done"


@pytest.mark.slow
def test_a_running_bar_comes_as_updates_on_a_cluster(
    k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any
) -> None:
    backend, name = _run(k8s_admin_kubeconfig, k8s_namespace, BAR)
    try:
        updates: list[str] = []
        state = LogState()
        printed: list[str] = []
        for rec in backend.iter_log_records(name, follow=True):
            if rec.line.startswith("\r"):
                updates.append(rec.line)
            if state.add(rec.source, rec.line):
                printed.extend(state.printed)
        # while it ran, the bar came as several distinct updates, each a whole state
        assert len(set(updates)) >= 2, updates
        assert all(u.count("\r") == 1 and "/6 |" in u for u in updates), updates
        # the monitor's buffer holds one line for the bar, at its final state, then "done"
        assert [ln for _, ln in state.buffer] == ["6/6 |#######", "done"], list(state.buffer)
        assert printed == ["6/6 |#######", "done"]
        # reading the ended job gives the same two lines
        assert list(backend.get_job_logs(name)) == ["6/6 |#######", "done"]
    finally:
        backend.delete_job(name)
