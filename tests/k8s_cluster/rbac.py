"""Namespaces `team-a` / `team-b` and RBAC for the `limited` user (full access in team-a only)."""

from __future__ import annotations

from typing import Any

LIMITED_USER = "limited"
TEAM_A, TEAM_B = "team-a", "team-b"

_TEAM_RULES = [
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["*"]},
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["trainingruntimes"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": ["*"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},  # workspaces
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["*"]},
]
_CLUSTER_RULES = [
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["clustertrainingruntimes"],
        "verbs": ["get", "list", "watch"],
    }
]


def _subject() -> list[dict[str, str]]:
    return [{"kind": "User", "name": LIMITED_USER, "apiGroup": "rbac.authorization.k8s.io"}]


def install(api_client: Any) -> None:
    from kubernetes import client

    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    for ns in (TEAM_A, TEAM_B):
        core.create_namespace({"metadata": {"name": ns}})
    name = "kf-limited-trainer"
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "name": name}
    rbac.create_namespaced_role(TEAM_A, {"metadata": {"name": name}, "rules": _TEAM_RULES})
    rbac.create_namespaced_role_binding(
        TEAM_A,
        {
            "metadata": {"name": name},
            "roleRef": {**role_ref, "kind": "Role"},
            "subjects": _subject(),
        },
    )
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": _CLUSTER_RULES})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "roleRef": {**role_ref, "kind": "ClusterRole"},
            "subjects": _subject(),
        }
    )
