"""The server extension's kubernetes side against a real kube-apiserver with the Trainer CRDs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_jupyter.jupyter_server import *  # noqa: F403  (fixtures, scoped to this module)
from tornado.httpclient import HTTPResponse

pytestmark = pytest.mark.slow
API = "kf-jupyter/api"


@pytest.fixture
def jp_server_config(tmp_path: Path, kubeconfig: str) -> dict[str, Any]:
    """Enable the extension on a temp local job store and the test's kubeconfig.

    (The kubernetes client reads $KUBECONFIG once, at import, so the server setting is used.)
    """
    return {
        "ServerApp": {"jpserver_extensions": {"kf_jupyter": True}},
        "KFJupyterServer": {"state_dir": str(tmp_path / "state"), "kubeconfig": kubeconfig},
    }


@pytest.fixture
def fetch(jp_fetch: Any, jp_asyncio_loop: Any) -> Callable[..., HTTPResponse]:
    """Authenticated request, returning the response whatever its status."""

    def _fetch(*parts: str, **kwargs: Any) -> HTTPResponse:
        kwargs.setdefault("raise_error", False)
        return jp_asyncio_loop.run_until_complete(jp_fetch(*parts, **kwargs))

    return _fetch


class TestAdmin:
    """A user whose kubeconfig may do everything."""

    @pytest.fixture
    def kubeconfig(self, k8s_admin_kubeconfig: str) -> str:
        """The admin kubeconfig."""
        return k8s_admin_kubeconfig

    def test_kubernetes_backend_through_the_server(
        self, fetch: Callable, k8s_namespace: str
    ) -> None:
        kube = json.loads(fetch(API, "backends").body)["backends"][1]
        assert kube == {
            "name": "kubernetes",
            "available": True,
            "namespace": "default",
            "error": None,
        }
        target = {"backend": "kubernetes", "namespace": k8s_namespace}
        reply = json.loads(fetch(API, "runtimes", params={**target, "framework": "torch"}).body)
        assert reply["runtimes"] and all(r["framework"] == "torch" for r in reply["runtimes"])
        assert json.loads(fetch(API, "jobs", params=target).body) == {"jobs": []}
        missing = fetch(API, "jobs", "no-such-job", params=target)
        assert missing.code == 404 and json.loads(missing.body)["kind"] == "JobNotFoundError"

    def test_progress_from_log_markers_when_the_cluster_has_no_trainer_status(
        self,
        fetch: Callable,
        jp_serverapp: Any,
        k8s_admin_kubeconfig: str,
        k8s_namespace: str,
        k8s_standin: Any,
    ) -> None:
        """TrainJobStatus gate off: progress only in `##kf-jupyter:report` lines; the jobs
        route (what the lab sidebar reads) shows it, reading the log at most once per TTL."""
        import time

        from kf_jupyter import TorchTrainer
        from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
        from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
        from kf_jupyter.options import TrainerCommand

        backend = KubernetesBackend(
            KubernetesBackendConfig(namespace=k8s_namespace, config_file=k8s_admin_kubeconfig)
        )
        marker = '##kf-jupyter:report {"step": 3, "progress": 0.5, "metrics": {"loss": 0.125}}'
        script = f"echo starting; echo '{marker}'; echo more; exec sleep 600"
        name = backend.train(
            TorchTrainer(num_nodes=1), options=[TrainerCommand(["bash", "-c", script])]
        )
        target = {"backend": "kubernetes", "namespace": k8s_namespace}

        def listed() -> dict[str, Any]:
            reply = fetch(API, "jobs", params=target)
            assert reply.code == 200, reply.body
            return next(j for j in json.loads(reply.body)["jobs"] if j["name"] == name)

        try:
            end = time.monotonic() + 90
            job = listed()
            while time.monotonic() < end and not (
                job["status"] == "Running" and job["trainer_status"]
            ):
                time.sleep(0.3)
                job = listed()
            assert job["status"] == "Running", job
            assert job["trainer_status"]["progress_percentage"] == 50
            assert job["trainer_status"]["metrics"] == {"loss": "0.125", "step": "3"}
            assert backend.get_job(name).trainer_status is None  # the cluster has none

            kf = jp_serverapp.web_app.settings["kf_jupyter"]
            client = kf._clients[("kubernetes", k8s_namespace)]
            calls: list[Any] = []
            read = client.iter_log_records

            def counted(*args: Any, **kwargs: Any) -> Any:
                calls.append((args, kwargs))
                return read(*args, **kwargs)

            client.iter_log_records = counted  # a spy: the real call still runs
            kf.progress_ttl = 3600.0
            for _ in range(3):
                assert listed()["trainer_status"]["progress_percentage"] == 50
            assert calls == []  # within the TTL: the cached progress, no log request
            kf.progress_ttl = 0.0
            for _ in range(2):
                assert listed()["trainer_status"]["progress_percentage"] == 50
            assert len(calls) == 2  # once the TTL is over: one request per list, per job
            assert calls[0][1] == {"step": "node-0", "tail_lines": 50}
        finally:
            backend.delete_job(name)


class TestLimited:
    """A user allowed in team-a only."""

    @pytest.fixture
    def kubeconfig(self, k8s_limited_kubeconfig: str) -> str:
        """The limited user's kubeconfig."""
        return k8s_limited_kubeconfig

    def test_forbidden_namespace_is_403_with_the_reason(self, fetch: Callable) -> None:
        assert (
            fetch(API, "jobs", params={"backend": "kubernetes", "namespace": "team-a"}).code == 200
        )
        resp = fetch(API, "jobs", params={"backend": "kubernetes", "namespace": "team-b"})
        assert resp.code == 403, resp.body.decode()[:2000]
        data = json.loads(resp.body)
        assert data["kind"] == "ForbiddenError" and "team-b" in data["error"]
