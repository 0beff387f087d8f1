"""Kubernetes faults against the real API server (tests/k8s_cluster): restarts, lost grants,
expired tokens, a TrainJob deleted under a follower. Each ends resumed or with a clear
kf-jupyter error — never a raw traceback, never a hang, never a duplicate job.

Covered elsewhere, and listed in docs/reliability.md: a restart during `wait_for_job_status` and
a log follow at once (tests/test_k8s_backend.py::test_wait_and_logs_resume_across_an_api_server_restart).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kf_jupyter import ForbiddenError, JobNotFoundError, KFJupyterError, TorchTrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig
from kf_jupyter.constants import GROUP, VERSION
from kf_jupyter.options import Name, TrainerCommand
from kf_jupyter.types import COMPLETE

pytestmark = pytest.mark.slow


def _backend(kubeconfig: str, namespace: str) -> Any:
    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend

    return KubernetesBackend(KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig))


def _shell(script: str) -> list[Any]:
    return [TrainerCommand(["bash", "-c", script])]


def _trainjob_names(api: Any, namespace: str) -> list[str]:
    from kubernetes import client

    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs"
    )["items"]
    return [i["metadata"]["name"] for i in items]


def _clear(message: str) -> None:
    """A kf-jupyter message: one paragraph, no traceback, says what to do."""
    assert "Traceback" not in message and "\n" not in message.strip(), message
    assert len(message) > 40, message


@pytest.fixture
def admin_api(k8s_cluster: Any) -> Any:
    return k8s_cluster.api_client()


@pytest.fixture
def backend(k8s_admin_kubeconfig: str, k8s_namespace: str) -> Any:
    return _backend(k8s_admin_kubeconfig, k8s_namespace)


@pytest.mark.reliability(
    scenario="API server restarted while `train` submits jobs: each submit succeeds once or "
    "fails with a clear message; no duplicate TrainJob",
    area="kubernetes",
    tries=1,
)
def test_apiserver_restart_during_train(
    backend: Any, k8s_cluster: Any, admin_api: Any, k8s_standin: Any, record_property: Any
) -> None:
    backend.list_runtimes()
    outcomes: list[tuple[str, str | None, str | None]] = []  # (name, returned, error)
    restart = threading.Thread(target=k8s_cluster.restart_apiserver)
    restart.start()
    i = 0
    while restart.is_alive() or i < 3:
        name = f"during-restart-{i}"
        try:
            got = backend.train(
                TorchTrainer(), runtime="torch-distributed", options=[Name(name), *_shell("true")]
            )
            outcomes.append((name, got, None))
        except KFJupyterError as exc:
            outcomes.append((name, None, str(exc)))
        i += 1
        time.sleep(0.05)
    restart.join()
    names = _trainjob_names(admin_api, backend.namespace)
    assert len(names) == len(set(names))
    ok = [n for n, got, _ in outcomes if got]
    failed = [(n, e) for n, _, e in outcomes if e]
    assert ok and set(ok) <= set(names)
    for n, err in failed:
        _clear(err)
        # a submit that fails does not leave a job behind that the user does not know about
        assert n not in names, f"{n} failed ({err}) but exists"
    record_property("submits", len(outcomes))
    record_property("failed_with_clear_message", len(failed))


def _ticker(n: int, delay: float = 0.2) -> list[Any]:
    return _shell(f"for i in $(seq 1 {n}); do echo line-$i; sleep {delay}; done")


class Watcher:
    """`wait_for_job_status` and a log follow of one job, each on its own thread."""

    def __init__(self, backend: Any, name: str, timeout: float = 120) -> None:
        self.lines: list[str] = []
        self.wait_result: dict[str, Any] = {}
        self.follow_result: dict[str, Any] = {}
        self.first_line = threading.Event()

        def wait() -> None:
            try:
                self.wait_result["job"] = backend.wait_for_job_status(name, timeout=timeout)
            except Exception as exc:
                self.wait_result["error"] = exc

        def follow() -> None:
            try:
                for line in backend.get_job_logs(name, follow=True):
                    self.lines.append(line)
                    self.first_line.set()
                self.follow_result["ended"] = True
            except Exception as exc:
                self.follow_result["error"] = exc

        self.threads = [
            threading.Thread(target=wait, name="kfr-wait", daemon=True),
            threading.Thread(target=follow, name="kfr-follow", daemon=True),
        ]
        for t in self.threads:
            t.start()

    def join(self, seconds: float) -> float:
        """Wait for both threads; return how long they took to end."""
        t0 = time.monotonic()
        for t in self.threads:
            t.join(max(0.1, seconds - (time.monotonic() - t0)))
        alive = [t for t in self.threads if t.is_alive()]
        if alive:
            import sys
            import traceback

            stacks = "".join(
                "".join(traceback.format_stack(sys._current_frames()[t.ident])) for t in alive
            )
            raise AssertionError(f"wait or follow hangs:\n{stacks}")
        return time.monotonic() - t0


@pytest.fixture
def limited_namespace(admin_api: Any) -> Iterator[str]:
    """A namespace where the `limited` user has the team Role through a RoleBinding."""
    from kubernetes import client

    from tests.k8s_cluster import rbac

    name = f"kfr-{uuid.uuid4().hex[:8]}"
    core, authz = client.CoreV1Api(admin_api), client.RbacAuthorizationV1Api(admin_api)
    core.create_namespace({"metadata": {"name": name}})
    ref = {"apiGroup": "rbac.authorization.k8s.io", "name": "kf-trainer"}
    authz.create_namespaced_role(name, {"metadata": {"name": "kf-trainer"},
                                        "rules": rbac._TEAM_RULES})  # fmt: skip
    authz.create_namespaced_role_binding(
        name,
        {"metadata": {"name": "kf-trainer"}, "roleRef": {**ref, "kind": "Role"},
         "subjects": rbac._subject()},
    )  # fmt: skip
    yield name
    client.CustomObjectsApi(admin_api).delete_collection_namespaced_custom_object(
        GROUP, VERSION, name, "trainjobs"
    )
    core.delete_namespace(name)


@pytest.mark.reliability(
    scenario="RBAC grant removed (RoleBinding deleted) while a wait and a log follow run: both "
    "end with a ForbiddenError naming verb, resource and namespace; no hang",
    area="kubernetes",
)
def test_lost_rbac_grant_during_wait_and_follow(
    k8s_limited_kubeconfig: str,
    limited_namespace: str,
    admin_api: Any,
    k8s_standin: Any,
    monkeypatch: pytest.MonkeyPatch,
    record_property: Any,
) -> None:
    from kubernetes import client

    from kf_jupyter.backends.kubernetes import watch

    # An API server keeps an authorised watch open until its timeout (up to 290 s here, 30-60 min
    # on a real cluster) and checks RBAC again only on the next request. End watches after 2 s,
    # as the server would at its timeout, so the re-watch meets the lost grant within the test.
    monkeypatch.setattr(watch, "MAX_WATCH_SECONDS", 2)
    backend = _backend(k8s_limited_kubeconfig, limited_namespace)
    name = backend.train(TorchTrainer(), runtime="torch-distributed", options=_ticker(150))
    w = Watcher(backend, name)
    assert w.first_line.wait(60), "no log line arrived"
    client.RbacAuthorizationV1Api(admin_api).delete_namespaced_role_binding(
        "kf-trainer", limited_namespace
    )
    took = w.join(30)
    for result in (w.wait_result, w.follow_result):
        err = result.get("error")
        assert isinstance(err, ForbiddenError), result
        _clear(str(err))
        assert f"in namespace '{limited_namespace}'" in str(err) and "limited" in str(err)
        assert "trainjobs.trainer.kubeflow.org" in str(err) or "pods" in str(err), str(err)
    assert len(w.lines) == len(set(w.lines)), "a line was repeated"
    assert w.lines == [f"line-{i}" for i in range(1, len(w.lines) + 1)]
    record_property("seconds_to_error_after_revocation", round(took, 1))


@pytest.mark.reliability(
    scenario="Token expired mid-session (API server restarted with the token revoked) while a "
    "wait and a log follow run: both end with a 401 ForbiddenError saying to log in again",
    area="kubernetes",
)
def test_expired_token_during_wait_and_follow(
    k8s_cluster: Any,
    k8s_limited_kubeconfig: str,
    limited_namespace: str,
    k8s_standin: Any,
    record_property: Any,
) -> None:
    from pathlib import Path

    backend = _backend(k8s_limited_kubeconfig, limited_namespace)
    name = backend.train(TorchTrainer(), runtime="torch-distributed", options=_ticker(200))
    w = Watcher(backend, name)
    assert w.first_line.wait(60), "no log line arrived"
    tokens = Path(k8s_cluster.pki) / "tokens.csv"
    original = tokens.read_text()
    tokens.write_text(original.replace(k8s_cluster.limited_token, uuid.uuid4().hex))
    try:
        k8s_cluster.restart_apiserver()  # reads the token file again: the old token is gone
        took = w.join(40)
    finally:
        tokens.write_text(original)
        k8s_cluster.restart_apiserver()
    for result in (w.wait_result, w.follow_result):
        err = result.get("error")
        assert isinstance(err, ForbiddenError), result
        _clear(str(err))
        assert "401" in str(err) and "log in again" in str(err)
        assert k8s_cluster.limited_token not in str(err)
    assert w.lines == [f"line-{i}" for i in range(1, len(w.lines) + 1)]
    record_property("seconds_to_error_after_restart", round(took, 1))


@pytest.mark.reliability(
    scenario="TrainJob deleted by someone else while followed: the wait ends with "
    "JobNotFoundError ('was deleted'), the log follow ends cleanly, no line repeated",
    area="kubernetes",
)
def test_trainjob_deleted_by_someone_else_while_followed(
    backend: Any, admin_api: Any, k8s_standin: Any, record_property: Any
) -> None:
    from kubernetes import client

    name = backend.train(TorchTrainer(), runtime="torch-distributed", options=_ticker(300))
    w = Watcher(backend, name)
    assert w.first_line.wait(60), "no log line arrived"
    time.sleep(0.5)
    client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
        GROUP, VERSION, backend.namespace, "trainjobs", name
    )
    took = w.join(30)
    err = w.wait_result.get("error")
    assert isinstance(err, JobNotFoundError) and "was deleted" in str(err), w.wait_result
    _clear(str(err))
    assert w.follow_result == {"ended": True}, w.follow_result
    assert len(w.lines) >= 2
    assert w.lines == [f"line-{i}" for i in range(1, len(w.lines) + 1)]
    with pytest.raises(JobNotFoundError):
        backend.get_job(name)
    record_property("seconds_to_end_after_delete", round(took, 1))
    record_property("lines_before_delete", len(w.lines))


@pytest.mark.reliability(
    scenario="API server restarted during `wait_for_job_status` alone (no follow): the wait "
    "resumes and returns Complete",
    area="kubernetes",
)
def test_apiserver_restart_during_wait_only(
    backend: Any, k8s_cluster: Any, k8s_standin: Any, record_property: Any
) -> None:
    name = backend.train(TorchTrainer(), runtime="torch-distributed", options=_ticker(40, 0.25))
    result: dict[str, Any] = {}

    def wait() -> None:
        try:
            result["job"] = backend.wait_for_job_status(name, timeout=120)
        except Exception as exc:
            result["error"] = exc

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(1.0)
    seconds = k8s_cluster.restart_apiserver()
    t.join(90)
    assert not t.is_alive()
    assert "error" not in result, result
    assert result["job"].status == COMPLETE
    record_property("restart_seconds", round(seconds, 1))
