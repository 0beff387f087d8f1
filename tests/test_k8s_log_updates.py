"""On a cluster too, a progress bar still being written comes as `\\r` update records while it
runs (as on the local backend), so the monitor and the lab views show it moving instead of a
silent pod until the bar's line ends.

Real API server and stand-in kubelet (tests/k8s_cluster), which streams a container's log as it
is written, as a kubelet passes on a partial line.
"""

from __future__ import annotations

from typing import Any

import pytest

from kf_jupyter import TorchTrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.options import TrainerCommand
from kf_jupyter.widgets.state import LogState

#: A bar drawn the way tqdm draws it into a file: `\r` + state, no newline until it ends.
BAR = "for i in 0 1 2 3 4 5 6; do printf '\\r%d/6 |%s' $i $(printf '#%.0s' $(seq 0 $i)); sleep 0.4; done; echo; echo done"


@pytest.mark.slow
def test_a_running_bar_comes_as_updates_on_a_cluster(
    k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any
) -> None:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    backend = KubernetesBackend(
        KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
    )
    name = backend.train(
        TorchTrainer(num_nodes=1, num_proc_per_node=1),
        options=[TrainerCommand(["bash", "-c", BAR])],
    )
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
