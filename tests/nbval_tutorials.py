"""pytest plugin for the nbval run of the tutorials (`pytest -p tests.nbval_tutorials --nbval-lax
notebooks/`, as scripts/test.sh runs it; kept here so the tutorials folder holds only tutorials).

- Every run gets a fresh local job store (`KF_JUPYTER_STATE_DIR`), so `%kf_jobs` and the final
  "jobs still running" cells see only the tutorials' jobs, never the developer's.
- The kernels see `KUBECONFIG` pointing at a file that does not exist, so no notebook can touch
  a real cluster from a test run, except 06-kubernetes and 10-sweeps, whose kernels get the
  kubeconfig of the test cluster (tests/k8s_cluster: a real kube-apiserver + etcd with the Trainer CRDs and
  default runtimes, and the stand-in playing the controller and kubelet). The cluster starts
  once, only when one of them is collected; if this machine cannot run it, they are skipped with
  the reason.
- After the last cell of each notebook, no job may be left Created or Running (local store, and
  the test cluster for 06 and 10); a leftover fails the run and is deleted.

The kernel of a notebook starts when its first cell is set up, so setting `os.environ` in
`pytest_runtest_setup` (before nbval's own set-up) decides the kernel's environment.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # tests.k8s_cluster

CLUSTER_NOTEBOOKS = ("06-kubernetes.ipynb", "10-sweeps.ipynb")  # their kernels get the cluster
UNFINISHED = ("Created", "Running")


class TestCluster:
    """The API server, CRDs, default runtimes and the stand-in, started for the tutorials."""

    def __init__(self) -> None:
        self.server: Any = None
        self.standin: Any = None
        self.webhooks: Any = None

    def start(self) -> str:
        """Start everything; return the admin kubeconfig path (HarnessUnavailable if impossible)."""
        from tests.k8s_cluster import crds, rbac
        from tests.k8s_cluster.apiserver import ApiServer
        from tests.k8s_cluster.standin import StandIn

        crds.load_crds()  # fails before anything starts when the manifests are missing
        from tests.k8s_cluster.admission import AdmissionServer

        self.server = ApiServer("kf-notebooks")
        self.server.start()
        api = self.server.api_client()
        # the admission webhooks of a Trainer + JobSet cluster: the tutorial's jobs are checked
        # as a real cluster checks them (CEL rules, Trainer and JobSet webhooks)
        self.webhooks = AdmissionServer(
            self.server.kubeconfig_path, *self.server.server_cert, self.server.ca_file
        ).start()
        crds.install(api, before_runtimes=lambda: self.webhooks.install(api))
        rbac.install(api)
        self.standin = StandIn(self.server.kubeconfig_path, *self.server.server_cert).start()
        return str(self.server.kubeconfig_path)

    def stop(self) -> None:
        """Stop the stand-in (and the pods' processes), then the API server."""
        if self.standin is not None:
            self.standin.stop()
        if self.server is not None:
            self.server.stop()
        if self.webhooks is not None:
            self.webhooks.stop()


_state: dict[str, Any] = {}


def pytest_configure(config: pytest.Config) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="kf-notebooks-"))
    _state.update(tmp=tmp, cluster=None, kubeconfig=None, skip_reason=None)
    os.environ["KF_JUPYTER_STATE_DIR"] = str(tmp / "state")
    os.environ["KUBECONFIG"] = str(tmp / "no-cluster-kubeconfig")
    _state["no_cluster"] = os.environ["KUBECONFIG"]


@pytest.hookimpl(trylast=True)  # after -k / -m deselected: `-k quickstart` starts no cluster
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    cluster_items = [i for i in items if i.path.name in CLUSTER_NOTEBOOKS]
    if not cluster_items:
        return
    from tests.k8s_cluster import HarnessUnavailable

    cluster = TestCluster()
    try:
        _state["kubeconfig"] = cluster.start()
        _state["cluster"] = cluster
    except HarnessUnavailable as exc:
        cluster.stop()
        reason = f"no test cluster on this machine ({exc})"
        for item in cluster_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.path.name in CLUSTER_NOTEBOOKS and _state.get("kubeconfig"):
        os.environ["KUBECONFIG"] = _state["kubeconfig"]
    else:
        os.environ["KUBECONFIG"] = _state["no_cluster"]


def _unfinished_jobs(kubernetes: bool) -> list[tuple[Any, str]]:
    from kf_jupyter.client import TrainerClient

    if kubernetes:
        from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig

        client = TrainerClient(KubernetesBackendConfig(config_file=_state["kubeconfig"]))
    else:
        from kf_jupyter.backends.local.config import LocalBackendConfig

        client = TrainerClient(LocalBackendConfig())
    return [(client, j.name) for j in client.list_jobs() if j.status in UNFINISHED]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After a notebook's last cell: nothing of it may still be running."""
    if nextitem is not None and nextitem.path == item.path:
        return
    left = _unfinished_jobs(kubernetes=False)
    if item.path.name in CLUSTER_NOTEBOOKS and _state.get("cluster") is not None:
        left += _unfinished_jobs(kubernetes=True)
    for client, name in left:
        client.delete_job(name)
    if left:
        names = ", ".join(name for _, name in left)
        pytest.fail(f"{item.path.name} left jobs running: {names} (now deleted)")


def pytest_unconfigure(config: pytest.Config) -> None:
    cluster = _state.get("cluster")
    if cluster is not None:
        cluster.stop()
    tmp = _state.get("tmp")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
