"""`initializer=`: the dataset and model a cluster downloads before training, as an option."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError


def _kind(obj: Any) -> str:
    return type(obj).__name__


def _initializer_env(init: Any, skip: set[str]) -> list[dict[str, str]]:
    env = []
    for f in dataclasses.fields(init):
        if f.name in skip:
            continue
        value = getattr(init, f.name)
        if value is None:
            continue
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        env.append({"name": f.name.upper(), "value": str(value)})
    return env


def initializer_spec(part: Any) -> dict[str, Any]:
    """One `spec.initializer.dataset|model` entry, as the SDK writes it."""
    if not dataclasses.is_dataclass(part) or not isinstance(
        getattr(part, "storage_uri", None), str
    ):
        raise ValidationError(
            f"An initializer dataset/model must be a HuggingFace or S3 initializer with a "
            f"storage_uri, got {_kind(part)}."
        )
    if _kind(part) == "DataCacheInitializer":
        env = [
            {"name": "CLUSTER_SIZE", "value": str(part.num_data_nodes + 1)},
            {"name": "METADATA_LOC", "value": str(part.metadata_loc)},
            *_initializer_env(part, {"storage_uri", "metadata_loc", "num_data_nodes"}),
        ]
    else:
        env = _initializer_env(part, {"storage_uri"})
    out: dict[str, Any] = {"storageUri": part.storage_uri}
    if env:
        out["env"] = env
    return out


@dataclass
class InitializerOption:
    """Writes `spec.initializer` (datasets and models are downloaded on a cluster only)."""

    initializer: Any

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        name = str(getattr(backend, "name", backend))
        if name == "local":
            raise ValidationError(
                "initializer= downloads a dataset or model into /workspace on a cluster before "
                "training; the local backend does not run initializers. Download the data inside "
                "your function (or beforehand into a local folder) for local runs, and pass the "
                "initializer only when submitting to a cluster."
            )
        spec = job_spec.setdefault("spec", {})
        init: dict[str, Any] = {}
        if getattr(self.initializer, "dataset", None) is not None:
            init["dataset"] = initializer_spec(self.initializer.dataset)
        if getattr(self.initializer, "model", None) is not None:
            init["model"] = initializer_spec(self.initializer.model)
        if init:
            spec["initializer"] = init
