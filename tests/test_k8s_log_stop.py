"""A kubernetes log follow of a silent job ends when its consumer sets `stop` (issue 13 item 2).

Real API server and stand-in kubelet (tests/k8s_cluster). The server extension's pump threads
pass their stream's stop event to `iter_log_records`; without it a follow of a pod that prints
nothing blocked on its queue for ever and the pump thread leaked.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from kf_jupyter import TorchTrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.options import TrainerCommand

from .waits import wait_until


@pytest.mark.slow
def test_stop_ends_a_silent_kubernetes_follow(
    k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any
) -> None:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )
    name = backend.train(
        TorchTrainer(num_nodes=1, num_proc_per_node=1),
        options=[TrainerCommand(["bash", "-c", "echo started; sleep 600"])],
    )
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
