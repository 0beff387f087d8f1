"""TEST STAND-IN logic: what the Trainer v2.3.0 plugins put into the JobSet they build.

Each runtime plugin's ``EnforceMLPolicy`` adds env, ports, volumes and mounts to the runtime's
pod sets, and the JobSet plugin's ``Build`` upserts them into the JobSet's pod templates
(``plugins/jobset/jobset.go:357-378``), so the Job controller creates every pod with them. This
module does the same to the JobSet spec ``trainer_model.build_jobset`` builds; the stand-in then
runs pods from that JobSet. docs/decisions.md ("Plugin env and volumes in the JobSet (issue 19)")
cites each rule. ``plugin_objects`` are the objects the MPI and TrainJobStatus plugins' ``Build``
apply beside the JobSet (the SSH-key Secret, the hostfile and CA ConfigMaps).
"""

from __future__ import annotations

import math
from typing import Any

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_PORT = 29500  # constants.go:72 ContainerTrainerPort
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
# trainjobstatus.go:43-57
STATUS_SERVICE = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
STATUS_MOUNT = "/var/run/secrets/kubeflow/trainer"
TOKEN_VOLUME = "kubeflow-trainer-token"
TOKEN_EXPIRY = 3600
# Trainer v2.3.0 feature gates (pkg/features/features.go:48): TrainJobStatus is alpha and off by
# default, so a default cluster injects no KUBEFLOW_TRAINER_SERVER_* variables, token volume or
# CA ConfigMap. The harness plays it off; a test turns it on with the `trainjob_status_gate`
# fixture (tests/k8s_cluster/plugin.py).
FEATURE_GATES: dict[str, bool] = {"TrainJobStatus": False}
# constants.go:132-187
SSH_VOLUME, SSH_SUFFIX = "mpi-ssh-auth", "-mpi-ssh-auth"
HOSTFILE_VOLUME, HOSTFILE_SUFFIX, HOSTFILE_DIR = "mpi-hostfile", "-mpi-hostfile", "/etc/mpi"


def _pod_spec(rj: dict[str, Any]) -> dict[str, Any]:
    job = rj.setdefault("template", {}).setdefault("spec", {})
    return job.setdefault("template", {}).setdefault("spec", {})


def _ancestor(rj: dict[str, Any]) -> str:
    meta = (rj.get("template") or {}).get("metadata") or {}
    return str((meta.get("labels") or {}).get(ANCESTOR_LABEL, ""))


def _upsert(items: list[dict[str, Any]], new: dict[str, Any], key: str = "name") -> None:
    """apply.UpsertEnvVars/UpsertVolumes/UpsertVolumeMounts/UpsertPort: replace in place by
    key, else append."""
    for i, old in enumerate(items):
        if old.get(key) == new.get(key):
            items[i] = new
            return
    items.append(new)


def _containers(rj: dict[str, Any], name: str | None = "node") -> list[dict[str, Any]]:
    return [
        c for c in _pod_spec(rj).get("containers") or [] if name is None or c.get("name") == name
    ]


def _env(c: dict[str, Any], *pairs: tuple[str, Any]) -> None:
    env = c.setdefault("env", [])
    for name, value in pairs:
        if isinstance(value, dict):
            _upsert(env, {"name": name, "valueFrom": value})
        else:
            _upsert(env, {"name": name, "value": str(value)})


def _port(c: dict[str, Any]) -> None:
    _upsert(c.setdefault("ports", []), {"containerPort": TRAINER_PORT}, key="containerPort")


def _index() -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": COMPLETION_INDEX}}


def gpus_per_node(resources: dict[str, Any]) -> int:
    """runtime.go GetNumGPUPerNode: the first resource whose name contains "gpu"."""
    for part in ("requests", "limits"):
        for key, q in (resources.get(part) or {}).items():
            if "gpu" in str(key).lower() and q is not None and float(str(q)):
                return math.ceil(float(str(q)))
    return 0


def cpus_per_node(resources: dict[str, Any]) -> int:
    """torch.go getNumCPUPerNode: the CPU request (else limit), rounded up as Value() does."""
    for part in ("requests", "limits"):
        q = str((resources.get(part) or {}).get("cpu") or "")
        if q:
            return math.ceil(float(q[:-1]) / 1000 if q.endswith("m") else float(q))
    return 0


def _node_resources(tj: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The job's resourcesPerNode, else the runtime's trainer `node` container's
    (runtime.go ExtractResourcePerNodeFromRuntime)."""
    trainer = (tj.get("spec") or {}).get("trainer") or {}
    if trainer.get("resourcesPerNode") is not None:
        return dict(trainer["resourcesPerNode"])
    template = ((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}
    for rj in template.get("replicatedJobs") or []:
        if _ancestor(rj) == "trainer" or rj.get("name") == "node":
            for c in _containers(dict(rj)):
                if c.get("resources"):
                    return dict(c["resources"])
    return {}


def mpi_slots(tj: dict[str, Any], runtime: dict[str, Any]) -> int:
    """mpi.go:128-139: the job's numProcPerNode, else the runtime's, which becomes the GPU
    count when it is 1 and a node has more than one GPU."""
    trainer = (tj.get("spec") or {}).get("trainer") or {}
    mpi = ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("mpi") or {}
    if trainer.get("numProcPerNode") is not None:
        return int(trainer["numProcPerNode"])
    nproc = int(mpi.get("numProcPerNode") or 1)
    gpus = gpus_per_node(_node_resources(tj, runtime))
    return gpus if nproc == 1 and gpus > 1 else nproc


def enforce_ml_policy(
    tj: dict[str, Any], runtime: dict[str, Any], spec: dict[str, Any], counts: dict[str, int]
) -> None:
    """Add each enabled plugin's env, ports, volumes and mounts to the JobSet spec `spec`."""
    meta = tj["metadata"]
    name, ns = meta["name"], meta.get("namespace", "")
    trainer = (tj.get("spec") or {}).get("trainer") or {}
    policy = (runtime.get("spec") or {}).get("mlPolicy") or {}
    rjobs = spec.get("replicatedJobs") or []
    trainer_rj = next((rj for rj in rjobs if _ancestor(rj) == "trainer"), None)
    master = f"{name}-node-0-0.{name}"
    node_count = counts.get(str((trainer_rj or {}).get("name")), 1)
    trainer_node = _containers(trainer_rj) if trainer_rj is not None and trainer else []

    if "torch" in policy:  # torch.go:110-204
        res = _node_resources(tj, runtime)
        nproc: Any = trainer.get("numProcPerNode")
        if nproc is None:
            nproc = "auto" if gpus_per_node(res) else max(1, cpus_per_node(res))
        for c in trainer_node:
            _env(
                c,
                ("PET_NNODES", node_count),
                ("PET_NPROC_PER_NODE", nproc),
                ("PET_NODE_RANK", _index()),
            )
            if trainer.get("command") != ["tune", "run"]:
                _env(c, ("PET_MASTER_ADDR", master), ("PET_MASTER_PORT", TRAINER_PORT))
            _port(c)
    elif "jax" in policy:  # jax.go:56-105
        for c in trainer_node:
            _env(
                c,
                ("JAX_NUM_PROCESSES", node_count),
                ("JAX_PROCESS_ID", _index()),
                ("JAX_COORDINATOR_ADDRESS", f"{master}:{TRAINER_PORT}"),
            )
            _port(c)
    elif "xgboost" in policy:  # xgboost.go:73-148
        workers = node_count * max(1, gpus_per_node(_node_resources(tj, runtime)))
        for c in trainer_node:
            _env(
                c,
                ("DMLC_TRACKER_URI", master),
                ("DMLC_TRACKER_PORT", TRAINER_PORT),
                ("DMLC_TASK_ID", _index()),
                ("DMLC_NUM_WORKER", workers),
            )
            _port(c)
    elif "mpi" in policy:  # mpi.go:142-246
        mpi = policy["mpi"]
        ssh_path = mpi.get("sshAuthMountPath") or "/root/.ssh"
        for rj in rjobs:
            if rj.get("name") not in ("node", "launcher"):
                continue
            volumes = _pod_spec(rj).setdefault("volumes", [])
            _upsert(volumes, ssh_volume(name))
            if rj["name"] == "launcher":
                _upsert(volumes, hostfile_volume(name))
            for c in _containers(rj):
                mounts = c.setdefault("volumeMounts", [])
                _upsert(mounts, {"name": SSH_VOLUME, "mountPath": ssh_path})
                if rj["name"] == "launcher":
                    _upsert(mounts, {"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR})
                    _env(
                        c,
                        ("OMPI_MCA_orte_default_hostfile", f"{HOSTFILE_DIR}/hostfile"),
                        ("OMPI_MCA_orte_keep_fqdn_hostnames", "true"),
                        ("OMPI_MCA_orte_set_default_slots", mpi_slots(tj, runtime)),
                        ("OMPI_MCA_plm_rsh_args", "-o ConnectionAttempts=10"),
                    )

    # trainjobstatus.go:76-99: every container of the trainer pod set (gate TrainJobStatus)
    if trainer_rj is not None and FEATURE_GATES["TrainJobStatus"]:
        for c in _containers(trainer_rj, None):
            _env(
                c,
                ("KUBEFLOW_TRAINER_SERVER_URL", f"{STATUS_SERVICE}{status_path(ns, name)}"),
                ("KUBEFLOW_TRAINER_SERVER_CA_CERT", f"{STATUS_MOUNT}/ca.crt"),
                ("KUBEFLOW_TRAINER_SERVER_TOKEN", f"{STATUS_MOUNT}/token"),
            )
            _upsert(
                c.setdefault("volumeMounts", []),
                {"name": TOKEN_VOLUME, "mountPath": STATUS_MOUNT, "readOnly": True},
            )
        _upsert(_pod_spec(trainer_rj).setdefault("volumes", []), token_volume(ns, name))


def status_path(namespace: str, name: str) -> str:
    """statusserver/utils.go StatusUrl."""
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def ssh_volume(name: str) -> dict[str, Any]:
    """mpi.go:151-176: the SSH-key Secret, private key 0640, public key and authorized_keys 0644."""
    return {
        "name": SSH_VOLUME,
        "secret": {
            "secretName": f"{name}{SSH_SUFFIX}",
            "defaultMode": 0o400,
            "items": [
                {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
            ],
        },
    }


def hostfile_volume(name: str) -> dict[str, Any]:
    """mpi.go:177-193: the hostfile ConfigMap, on the launcher only."""
    return {
        "name": HOSTFILE_VOLUME,
        "configMap": {
            "name": f"{name}{HOSTFILE_SUFFIX}",
            "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
        },
    }


def token_volume(namespace: str, name: str) -> dict[str, Any]:
    """trainjobstatus.go:145-171: a projected service-account token for the status server's
    audience and the CA ConfigMap."""
    audience = f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": audience,
                        "expirationSeconds": TOKEN_EXPIRY,
                        "path": "token",
                    }
                },
                {
                    "configMap": {
                        "name": f"{name}-tls-config",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
            ]
        },
    }


def hostfile(tj: dict[str, Any], runtime: dict[str, Any], spec: dict[str, Any]) -> str:
    """mpi.go:331-346 buildHostFileConfigMap: one `HOST slots=N` line per pod of the `node`
    job and, with runLauncherAsNode, of the launcher, in the JobSet's replicated-job order."""
    name = tj["metadata"]["name"]
    mpi = ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("mpi") or {}
    as_node = bool(mpi.get("runLauncherAsNode"))
    slots = mpi_slots(tj, runtime)
    lines = []
    for rj in spec.get("replicatedJobs") or []:
        if rj.get("name") == "node" or (as_node and rj.get("name") == "launcher"):
            count = int(((rj.get("template") or {}).get("spec") or {}).get("parallelism") or 1)
            lines += [f"{name}-{rj['name']}-0-{i}.{name} slots={slots}\n" for i in range(count)]
    return "".join(lines)


def _ssh_key_pair() -> tuple[bytes, bytes]:
    """An ECDSA P-521 key as the MPI plugin makes one (mpi.go:271-290): the private key as an
    `EC PRIVATE KEY` PEM, the public key in authorized_keys form. openssl makes the key here."""
    import base64
    import struct
    import subprocess

    pem = subprocess.run(
        ["openssl", "ecparam", "-name", "secp521r1", "-genkey", "-noout"],
        capture_output=True,
        check=True,
    ).stdout
    der = subprocess.run(
        ["openssl", "ec", "-pubout", "-outform", "DER"], input=pem, capture_output=True, check=True
    ).stdout
    point = der[-133:]  # the uncompressed point ends the SubjectPublicKeyInfo

    def field(b: bytes) -> bytes:
        return struct.pack(">I", len(b)) + b

    blob = field(b"ecdsa-sha2-nistp521") + field(b"nistp521") + field(point)
    return pem, b"ecdsa-sha2-nistp521 " + base64.b64encode(blob) + b"\n"


def plugin_objects(
    tj: dict[str, Any], runtime: dict[str, Any], spec: dict[str, Any], ca_pem: str
) -> list[dict[str, Any]]:
    """What the plugins' Build applies beside the JobSet, each owned by the TrainJob: MPI's
    SSH-key Secret and hostfile ConfigMap (mpi.go:258-346), TrainJobStatus's CA ConfigMap
    (trainjobstatus.go:103-114, 174-206)."""
    import base64

    meta = tj["metadata"]
    name, ns = meta["name"], meta.get("namespace", "")
    owner = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": name,
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }

    def obj(kind: str, obj_name: str, **body: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"name": obj_name, "namespace": ns, "ownerReferences": [owner]},
            **body,
        }

    out = []
    if ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("mpi") is not None:
        private, public = _ssh_key_pair()
        out.append(
            obj(
                "Secret",
                f"{name}{SSH_SUFFIX}",
                type="kubernetes.io/ssh-auth",
                immutable=True,
                data={
                    "ssh-privatekey": base64.b64encode(private).decode(),
                    "ssh-publickey": base64.b64encode(public).decode(),
                },
            )
        )
        out.append(
            obj(
                "ConfigMap",
                f"{name}{HOSTFILE_SUFFIX}",
                data={"hostfile": hostfile(tj, runtime, spec)},
            )
        )
    if FEATURE_GATES["TrainJobStatus"]:
        out.append(obj("ConfigMap", f"{name}-tls-config", data={"ca.crt": ca_pem}))
    return out
