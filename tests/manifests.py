"""Validation of built manifests against the real Trainer CRD schema and the official models."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import jsonschema

from tests.k8s_cluster.crds import crd_schema


def _strict(schema: Any) -> Any:
    """Forbid unknown fields where the CRD lists properties (the API server would silently
    prune them, hiding a misspelt field), and drop Kubernetes-only keywords."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def trainjob_validator() -> jsonschema.Draft7Validator:
    """A validator for TrainJob objects built from the CRD in ../shared/kubeflow-trainer."""
    schema = _strict(copy.deepcopy(crd_schema("TrainJob")))
    # metadata is validated by the API server itself, not the CRD schema.
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft7Validator(schema)


def assert_valid_trainjob(manifest: dict[str, Any]) -> None:
    """Fail with every schema error, and parse with kubeflow-trainer-api's models."""
    errors = sorted(trainjob_validator().iter_errors(manifest), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    from kubeflow_trainer_api import models

    parsed = models.TrainerV1alpha1TrainJob.from_dict(copy.deepcopy(manifest))
    assert parsed is not None
    assert parsed.metadata.name == manifest["metadata"]["name"]
    assert parsed.spec.runtime_ref.name == manifest["spec"]["runtimeRef"]["name"]
    if "trainer" in manifest["spec"]:
        assert parsed.spec.trainer.command == manifest["spec"]["trainer"].get("command")


def cluster_refusals(
    manifest: dict[str, Any], runtime: dict[str, Any], old: dict[str, Any] | None = None
) -> list[str]:
    """What a Trainer v2.3 + JobSet v0.12 cluster would refuse about `manifest` (an update of
    `old` when given): the CRD's CEL rules, the Trainer webhook's checks, and the JobSet webhook's
    name limits on the JobSet the Trainer builds from it (tests/k8s_cluster, issue 19)."""
    from tests.k8s_cluster import trainer_model
    from tests.k8s_cluster.cel import cel_errors

    obj = copy.deepcopy(manifest)
    obj["metadata"].setdefault("namespace", "team")
    out = [f"CEL: {e}" for e in cel_errors(crd_schema("TrainJob"), obj, old)]
    out += [f"Trainer webhook: {e}" for e in trainer_model.trainer_errors(obj, old, runtime)]
    if old is None:
        js = trainer_model.build_jobset(obj, runtime)
        out += [f"JobSet webhook: {e}" for e in trainer_model.jobset_errors(js)]
    return out
