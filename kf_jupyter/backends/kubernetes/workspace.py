"""The workspace on a cluster: one ConfigMap owned by the TrainJob, mounted into every node.

The snapshot (see `kf_jupyter/workspace.py`) is packed into one tar.gz, stored as the ConfigMap's
`binaryData` key `workspace.tar.gz` and mounted read-only at `/var/run/kf-jupyter/workspace`
through a `spec.runtimePatches` entry (a volume plus a volumeMount on container `node`; the
Trainer allows volumeMounts there). The runner unpacks it once per pod and starts every rank in
it. The TrainJob is created first and the ConfigMap then, with an ownerReference to the
TrainJob's uid, so the garbage collector deletes it with the job; a pod that starts before the
ConfigMap exists waits for it (kubelet retries the mount). Works on a stock Kubeflow Trainer
install: no extra service, no shared volume.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any

from ...constants import API_VERSION, CREATED_BY_LABEL, CREATED_BY_VALUE, TRAINJOB_KIND
from ...errors import ValidationError
from ...workspace import (
    ARCHIVE_KEY,
    CLUSTER_OUTPUTS,
    CONFIGMAP_MAX_BYTES,
    MOUNT_DIR,
    Snapshot,
    archive,
    human,
    snapshot_for,
)

log = logging.getLogger("kf_jupyter.kubernetes")

#: The runtimePatches manager of the workspace mount (apart from the options' own entry).
WORKSPACE_MANAGER = "kf-jupyter.io/workspace"
VOLUME_NAME = "kf-jupyter-workspace"
JOB_LABEL = "kf-jupyter.io/trainjob"


def configmap_name(job_name: str) -> str:
    """The ConfigMap that carries job `job_name`'s workspace."""
    return f"{job_name}-workspace"


@dataclass
class Carrier:
    """A workspace ready to ship: the snapshot, the archive and the ConfigMap (no owner yet)."""

    snapshot: Snapshot
    archive_bytes: int
    configmap: dict[str, Any]

    def preview(self) -> dict[str, Any]:
        """The ConfigMap as a dry run prints it (the archive itself summarised) and the files."""
        cm = {k: v for k, v in self.configmap.items() if k != "binaryData"}
        cm["metadata"] = dict(cm["metadata"])
        cm["metadata"]["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": TRAINJOB_KIND,
                "name": cm["metadata"]["labels"][JOB_LABEL],
                "uid": "<the TrainJob's uid, set when it is created>",
            }
        ]
        cm["binaryData"] = {
            ARCHIVE_KEY: f"<base64 of a {human(self.archive_bytes)} tar.gz of "
            f"{len(self.snapshot.files)} files ({human(self.snapshot.total_bytes)}), listed "
            "under workspace.files>"
        }
        summary = self.snapshot.summary() | {"outputs": CLUSTER_OUTPUTS}
        return {"configmap": cm, "workspace": summary}


def _mount_patch(job: dict[str, Any], mpi: bool) -> None:
    name = job["metadata"]["name"]
    pod_spec = {
        "volumes": [{"name": VOLUME_NAME, "configMap": {"name": configmap_name(name)}}],
        "containers": [
            {
                "name": "node",
                "volumeMounts": [{"name": VOLUME_NAME, "mountPath": MOUNT_DIR, "readOnly": True}],
            }
        ],
    }
    targets = ["node", "launcher"] if mpi else ["node"]
    patch = {
        "manager": WORKSPACE_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": t, "template": {"spec": {"template": {"spec": pod_spec}}}}
                        for t in targets
                    ]
                }
            }
        },
    }
    # No env var: the runner looks for the archive at this fixed path (MPI ranks started over
    # ssh would not see the container's env anyway).
    job["spec"].setdefault("runtimePatches", []).append(patch)


def prepare(
    job: dict[str, Any], trainer: Any, runtime_config: Any, default_dir: str
) -> Carrier | None:
    """Snapshot the workspace, pack it and add its mount to `job`; None when nothing ships.

    Raises ValidationError (nothing created) when the workspace is over its limit or the
    compressed archive does not fit one ConfigMap.
    """
    snap = snapshot_for(trainer, runtime_config, default_dir)
    if snap is None:
        return None
    data = archive(snap)
    if len(data) > CONFIGMAP_MAX_BYTES:
        largest = ", ".join(
            f"{f.path} ({human(f.size)})" for f in sorted(snap.files, key=lambda f: -f.size)[:5]
        )
        raise ValidationError(
            f"The workspace {snap.root} compresses to {human(len(data))}, more than one "
            f"ConfigMap holds ({human(CONFIGMAP_MAX_BYTES)}, the Kubernetes API server's limit), "
            f"which carries it to the cluster. Largest files: {largest}. Exclude data the job "
            "does not need in a .kfignore file there (gitignore syntax) and read it from a "
            "volume or object storage instead, ship another folder (--workspace DIR), or ship "
            "nothing (--no-workspace, or RuntimeConfig(workspace=False)). Nothing was submitted."
        )
    name = job["metadata"]["name"]
    _mount_patch(job, getattr(trainer, "policy", "") == "mpi")
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(name),
            "labels": {CREATED_BY_LABEL: CREATED_BY_VALUE, JOB_LABEL: name},
        },
        "binaryData": {ARCHIVE_KEY: base64.b64encode(data).decode("ascii")},
    }
    return Carrier(snap, len(data), cm)


def owned_configmap(carrier: Carrier, trainjob: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap with an ownerReference to the created TrainJob (deleted along with it)."""
    meta = trainjob["metadata"]
    cm = dict(carrier.configmap)
    cm["metadata"] = {
        **carrier.configmap["metadata"],
        "namespace": meta.get("namespace"),
        "ownerReferences": [
            {
                "apiVersion": trainjob.get("apiVersion", API_VERSION),
                "kind": TRAINJOB_KIND,
                "name": meta["name"],
                "uid": meta["uid"],
            }
        ],
    }
    return cm


def ship(backend: Any, trainjob: dict[str, Any], carrier: Carrier | None) -> None:
    """Create the workspace ConfigMap owned by the just-created TrainJob.

    If that fails the TrainJob is deleted again (its pods would wait for the ConfigMap forever)
    and the error is raised: a job is submitted with its workspace or not at all.
    """
    if carrier is None:
        return
    from .errors import Where

    cm = owned_configmap(carrier, trainjob)
    name = cm["metadata"]["name"]
    try:
        backend._json(
            Where("create", "configmaps", backend.namespace, name),
            backend.core.create_namespaced_config_map,
            backend.namespace,
            cm,
        )
    except Exception:
        job = trainjob["metadata"]["name"]
        try:
            backend.delete_job(job)
        except Exception as exc:  # say so, but the first error is what the user must fix
            log.warning("could not delete TrainJob %s after its workspace failed: %s", job, exc)
        raise
    log.info(
        "created ConfigMap %s/%s (workspace, %d bytes)",
        backend.namespace,
        name,
        carrier.archive_bytes,
    )
