"""The Kubeflow Trainer CRDs and default ClusterTrainingRuntimes, fixed for kube-apiserver 1.20.

Manifests come from ``$KF_TRAINER_MANIFESTS`` (a ``manifests`` dir) or
``<repo>/../shared/kubeflow-trainer/manifests``. ``crd_schema(kind)`` is pure file reading, for
jsonschema validation in unit tests; ``install(api_client)`` creates everything on a server.
"""

from __future__ import annotations

import copy
import functools
import os
import time
from pathlib import Path
from typing import Any

import yaml

from tests.k8s_cluster import HarnessUnavailable

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
REPO_ROOT = Path(__file__).resolve().parents[2]
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestsNotFound(HarnessUnavailable):
    """No Kubeflow Trainer manifests on this machine."""


def manifests_dir() -> Path:
    env = os.environ.get("KF_TRAINER_MANIFESTS")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "kubeflow-trainer" / "manifests"
    if not (path / "base" / "crds").is_dir():
        raise ManifestsNotFound(
            f"Kubeflow Trainer manifests not found at {path} (expected base/crds/*.yaml); "
            "set KF_TRAINER_MANIFESTS to a Trainer `manifests` directory"
        )
    return path


def _yaml_docs(paths: list[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(paths):
        if path.name == "kustomization.yaml":
            continue
        with path.open() as f:
            docs.extend(d for d in yaml.load_all(f, Loader=_LOADER) if d)
    return docs


def fix_schema(node: Any) -> Any:
    """Drop every `default: ""` (1.20 rejects it); list-map keys that lost it become required."""
    if isinstance(node, list):
        return [fix_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: fix_schema(v) for k, v in node.items() if not (k == "default" and v == "")}
    keys = node.get("x-kubernetes-list-map-keys")
    items = out.get("items")
    if keys and isinstance(items, dict):
        props = node["items"].get("properties", {})
        dropped = [k for k in keys if props.get(k, {}).get("default") == ""]
        if dropped:
            required = items.setdefault("required", [])
            required.extend(k for k in dropped if k not in required)
    return out


@functools.cache
def _load_crds() -> tuple[dict[str, Any], ...]:
    crds = _yaml_docs(list((manifests_dir() / "base" / "crds").glob("*.yaml")))
    return tuple(fix_schema(c) for c in crds if c.get("kind") == "CustomResourceDefinition")


def load_crds() -> list[dict[str, Any]]:
    """The fixed CRD objects (deep copies)."""
    return copy.deepcopy(list(_load_crds()))


def load_runtimes() -> list[dict[str, Any]]:
    """The default ClusterTrainingRuntimes (all yaml under base/runtimes, recursively)."""
    files = list((manifests_dir() / "base" / "runtimes").rglob("*.yaml"))
    return [d for d in _yaml_docs(files) if d.get("kind") == "ClusterTrainingRuntime"]


def crd_schema(kind: str) -> dict[str, Any]:
    """The fixed openAPIV3Schema of `kind` (TrainJob, TrainingRuntime, ClusterTrainingRuntime)."""
    for crd in _load_crds():
        if crd["spec"]["names"]["kind"] == kind:
            for v in crd["spec"]["versions"]:
                if v["name"] == VERSION:
                    return copy.deepcopy(v["schema"]["openAPIV3Schema"])
    raise KeyError(f"no CRD of kind {kind!r} ({VERSION}) in {manifests_dir()}")


#: The JobSet API the Trainer creates its pods through. The harness's own, minimal CRD (any
#: spec, a status subresource): the JobSet webhook checks (``admission.py``) and the stand-in give
#: it meaning; the real one has a full schema.
JOBSET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobsets.jobset.x-k8s.io"},
    "spec": {
        "group": "jobset.x-k8s.io",
        "scope": "Namespaced",
        "names": {"plural": "jobsets", "singular": "jobset", "kind": "JobSet",
                  "listKind": "JobSetList"},
        "versions": [
            {
                "name": "v1alpha2",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}  # fmt: skip


def install(api_client: Any, timeout: float = 60.0, before_runtimes: Any = None) -> None:
    """Create the CRDs (the Trainer's and a JobSet one), wait until Established, call
    `before_runtimes()` (the harness registers its webhooks there), create the default runtimes."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(api_client)
    crds = [*load_crds(), copy.deepcopy(JOBSET_CRD)]
    for crd in crds:
        ext.create_custom_resource_definition(crd)
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while True:
            conds = ext.read_custom_resource_definition(name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout}s: {conds}")
            time.sleep(0.1)
    if before_runtimes is not None:
        before_runtimes()
    custom = client.CustomObjectsApi(api_client)
    for rt in load_runtimes():
        while True:  # the new resource can 404 for a moment after Established
            try:
                custom.create_cluster_custom_object(GROUP, VERSION, "clustertrainingruntimes", rt)
                break
            except ApiException as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
