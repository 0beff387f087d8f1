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
