"""TEST STAND-IN logic: what the Kubeflow Trainer v2.3.0 and JobSet v0.12.0 do with a TrainJob,
written from their sources (docs/decisions.md "Cluster fidelity (issue 19)" cites file:line).

Pure functions of the objects' JSON, shared by the admission webhook (``admission.py``) and the
stand-in controller (``standin.py``); it never imports kf_jupyter, whose output it checks.

- ``merge_patches``: the runtime's JobSet template with the TrainJob's ``runtimePatches`` merged in
  order, strategically (lists keyed by name as their Go types declare).
- ``build_jobset``: the JobSet the Trainer applies (trainer container, counts, MPI split).
- ``jobset_errors``: the JobSet webhook's name checks (``ValidateCreate``).
- ``trainer_errors``: the Trainer webhook's checks (``TrainJobValidator``).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from tests.k8s_cluster import trainer_plugins

ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
# Strategic-merge keys of the lists under a JobSetSpec (from the Go types' patchMergeKey tags).
_MERGE_KEYS = {
    "replicatedJobs": "name",
    "dependsOn": "name",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "schedulingGates": "name",
    "resourceClaims": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
TORCH_RESERVED = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
                  "PET_MASTER_PORT"}  # fmt: skip
XGBOOST_RESERVED = {"DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID", "DMLC_NUM_WORKER"}
MPI_RESERVED = {"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_args",
                "OMPI_MCA_orte_keep_fqdn_hostnames", "OMPI_MCA_orte_set_default_slots"}  # fmt: skip
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def strategic_merge(base: Any, patch: Any, key: str = "") -> Any:
    """A strategic merge patch of JSON values: maps merge, null deletes, keyed lists merge by key,
    other lists are replaced (k8s.io/apimachinery strategicpatch, without directives)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = copy.deepcopy(v)
        return out
    merge_key = _MERGE_KEYS.get(key)
    if merge_key and isinstance(base, list) and isinstance(patch, list):
        out_list = [copy.deepcopy(x) for x in base]
        for item in patch:
            idx = next(
                (
                    i
                    for i, b in enumerate(out_list)
                    if isinstance(b, dict)
                    and isinstance(item, dict)
                    and b.get(merge_key) == item.get(merge_key)
                ),
                None,
            )
            if idx is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[idx] = strategic_merge(out_list[idx], item)
        return out_list
    return copy.deepcopy(patch)


def _policy(runtime: dict[str, Any]) -> dict[str, Any]:
    return (runtime.get("spec") or {}).get("mlPolicy") or {}


def merge_patches(tj: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The runtime's JobSet template spec with every runtime patch merged in, in list order;
    replicated jobs keep the runtime's order (trainingruntime.go mergeRuntimePatches)."""
    spec = copy.deepcopy(((runtime.get("spec") or {}).get("template") or {}).get("spec") or {})
    order = {rj.get("name"): i for i, rj in enumerate(spec.get("replicatedJobs") or [])}
    for p in (tj.get("spec") or {}).get("runtimePatches") or []:
        patch = ((p.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        if patch:
            spec = strategic_merge(spec, patch)
    spec["replicatedJobs"] = sorted(
        spec.get("replicatedJobs") or [], key=lambda rj: order.get(rj.get("name"), len(order))
    )
    return spec


def _ancestor(rj: dict[str, Any]) -> str:
    return str(
        (((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}).get(
            ANCESTOR_LABEL, ""
        )
    )


def _pod_spec(rj: dict[str, Any]) -> dict[str, Any]:
    job_spec = (rj.get("template") or {}).get("spec") or {}
    return (job_spec.get("template") or {}).get("spec") or {}


def pod_counts(tj: dict[str, Any], runtime: dict[str, Any], spec: dict[str, Any]) -> dict[str, int]:
    """Pods per replicated job: the trainer's numNodes (MPI with runLauncherAsNode: one less on
    `node`, at least 1), else the template's parallelism (trainingruntime.go newRuntimeInfo,
    mpi.go EnforceMLPolicy)."""
    policy = _policy(runtime)
    trainer = (tj.get("spec") or {}).get("trainer") or {}
    num_nodes = int(trainer.get("numNodes") or policy.get("numNodes") or 1)
    mpi = policy.get("mpi")
    out: dict[str, int] = {}
    for rj in spec.get("replicatedJobs") or []:
        name = str(rj.get("name"))
        count = int(((rj.get("template") or {}).get("spec") or {}).get("parallelism") or 1)
        if _ancestor(rj) == "trainer" and policy:
            count = int(policy.get("numNodes") or 1)
        if mpi is not None:  # the launcher keeps the runtime's count
            if name == "node" and trainer.get("numNodes") is not None:
                as_node = bool(mpi.get("runLauncherAsNode"))
                count = max(num_nodes - 1, 1) if as_node else num_nodes
        elif _ancestor(rj) == "trainer" and trainer.get("numNodes") is not None:
            count = num_nodes
        out[name] = count
    return out


TORCHTUNE_ENTRYPOINT = ["tune", "run"]
# constants.go:317-318 (TorchTuneImmutableConfigs)
TORCHTUNE_IMMUTABLE = {"output_dir", "tokenizer.path", "checkpointer.checkpoint_dir",
                       "tokenizer.merges_file"}  # fmt: skip


def _runtime_node_resources(runtime: dict[str, Any]) -> dict[str, Any]:
    for rj in ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "replicatedJobs"
    ) or []:
        if _ancestor(rj) == "trainer" or rj.get("name") == "node":
            for c in _pod_spec(rj).get("containers") or []:
                if c.get("name") == "node":
                    return c.get("resources") or {}
    return {}


def _bool_arg(args: list[str], item: str) -> bool:
    """torchtune.go isBoolArgEnabled."""
    for arg in args:
        name, sep, value = arg.partition("=")
        if sep and item in name and value.strip().lower() == "true":
            return True
    return False


def torchtune_command(
    tj: dict[str, Any], runtime: dict[str, Any], num_nodes: int, runtime_command: list[str]
) -> list[str]:
    """The command the Trainer gives a `tune run` TrainJob (torch.go:175-200 at v2.3.0):
    `tune run [--rdzv_endpoint=<job>-node-0-0.<job>:29500] <recipe> --config <config>` plus the
    runtime command's immutable overrides (extractOverridesFromRuntime); the TrainJob's args
    (the user's overrides) stay args. Recipe and config: torchtune.go getRecipeAndConfig."""
    name = tj["metadata"]["name"]
    trainer = (tj.get("spec") or {}).get("trainer") or {}
    args = [str(a) for a in trainer.get("args") or []]
    nproc: Any = trainer.get("numProcPerNode")
    resources = trainer.get("resourcesPerNode") or _runtime_node_resources(runtime)
    gpus = trainer_plugins.gpus_per_node(resources)
    if nproc is None and gpus == 0:  # torch.go:133-135: auto without GPUs counts the CPUs
        nproc = max(1, trainer_plugins.cpus_per_node(resources))
    command = list(TORCHTUNE_ENTRYPOINT)
    multi = num_nodes > 1 or (isinstance(nproc, int) and nproc > 1) or (nproc is None and gpus > 1)
    if multi:
        command.append(f"--rdzv_endpoint={name}-node-0-0.{name}:29500")
    qlora = not _bool_arg(args, "model.use_dora") and _bool_arg(args, "model.quantize_base")
    lora = any("model.lora_attn_modules" in a for a in args)
    recipe, suffix = "full_finetune_distributed", "_full"
    if num_nodes == 1 and (nproc == 1 or gpus == 1):
        if qlora:
            recipe, suffix = "lora_finetune_single_device", "_qlora_single_device"
        elif lora:
            recipe, suffix = "lora_finetune_single_device", "_lora_single_device"
        else:
            recipe, suffix = "full_finetune_single_device", "_full_single_device"
    elif num_nodes == 1 and qlora:
        recipe, suffix = "lora_finetune_distributed", "_qlora"
    elif num_nodes == 1 and lora:
        recipe, suffix = "lora_finetune_distributed", "_lora"
    elif num_nodes > 1:
        suffix = "_full_multinode"
    fields = str((tj.get("spec") or {}).get("runtimeRef", {}).get("name", "")).split("-")
    model = f"{fields[1].replace('.', '_')}/{fields[2].upper()}" if len(fields) == 3 else ""
    command += [recipe, "--config", f"{model}{suffix}"]
    command += [a for a in runtime_command if a.split("=")[0] in TORCHTUNE_IMMUTABLE]
    return command


def build_jobset(tj: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The JobSet the Trainer applies for `tj` (jobset plugin Build + builder.go Trainer)."""
    meta = tj["metadata"]
    tspec = tj.get("spec") or {}
    trainer = tspec.get("trainer") or {}
    spec = merge_patches(tj, runtime)
    counts = pod_counts(tj, runtime, spec)
    mpi_as_node = bool((_policy(runtime).get("mpi") or {}).get("runLauncherAsNode"))
    for rj in spec.get("replicatedJobs") or []:
        job_spec = rj.setdefault("template", {}).setdefault("spec", {})
        job_spec["parallelism"] = job_spec["completions"] = counts[rj["name"]]
        is_trainer = _ancestor(rj) == "trainer"
        if is_trainer:
            rj["replicas"] = 1
        for c in _pod_spec(rj).get("containers") or []:
            if c.get("name") != "node":
                continue
            if is_trainer:
                runtime_command = list(c.get("command") or [])
                for src, dst in (("image", "image"), ("command", "command"), ("args", "args")):
                    if trainer.get(src) is not None:
                        c[dst] = trainer[src]
                if "torch" in _policy(runtime) and trainer.get("command") == TORCHTUNE_ENTRYPOINT:
                    c["command"] = torchtune_command(
                        tj, runtime, counts[rj["name"]], runtime_command
                    )
            if is_trainer or (mpi_as_node and rj["name"] == "node"):
                env = {e["name"]: e for e in c.get("env") or []}
                env.update({e["name"]: e for e in trainer.get("env") or []})
                if env:
                    c["env"] = list(env.values())
                if trainer.get("resourcesPerNode"):
                    c["resources"] = strategic_merge(
                        c.get("resources") or {}, trainer["resourcesPerNode"]
                    )
    # the plugins' env, ports, volumes and mounts (trainer_plugins.py)
    trainer_plugins.enforce_ml_policy(tj, runtime, spec, counts)
    labels: dict[str, str] = {}
    for p in tspec.get("runtimePatches") or []:
        pmeta = ((p.get("trainingRuntimeSpec") or {}).get("template") or {}).get("metadata") or {}
        labels.update(pmeta.get("labels") or {})
    if tspec.get("suspend") is not None:
        spec["suspend"] = bool(tspec["suspend"])
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            **({"labels": labels} if labels else {}),
            "ownerReferences": [
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


# -- the JobSet webhook (jobset v0.12.0 pkg/webhooks/jobset_webhook.go) ----------------------


def _dns1035(value: str) -> list[str]:
    """k8s.io/apimachinery validation.IsDNS1035Label messages."""
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not DNS1035.match(value):
        errs.append(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
            "with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',"
            "  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        )
    return errs


JOB_NAME_TOO_LONG = (
    "JobSet name is too long, job names generated for this JobSet will exceed 63 characters"
)
POD_NAME_TOO_LONG = (
    "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"
)


def jobset_errors(js: dict[str, Any]) -> list[str]:
    """The name checks of the JobSet webhook's ValidateCreate, as Go field errors print."""
    errs: list[str] = []
    name = js["metadata"]["name"]
    for i, rj in enumerate((js.get("spec") or {}).get("replicatedJobs") or []):
        path = f"spec.replicatedJobs[{i}].name"
        replicas = int(rj.get("replicas") if rj.get("replicas") is not None else 1)
        job_name = f"{name}-{rj['name']}-{replicas - 1}"
        for msg in _dns1035(job_name):
            if "must be no more than 63 characters" in msg:
                msg = JOB_NAME_TOO_LONG
            errs.append(f'{path}: Invalid value: "{job_name}": {msg}')
        job_spec = (rj.get("template") or {}).get("spec") or {}
        indexed = job_spec.get("completionMode", "Indexed") == "Indexed"
        if indexed and job_spec.get("completions") is not None:
            pod = f"{job_name}-{int(job_spec['completions']) - 1}-abcde"
            for msg in _dns1035(pod):
                if "must be no more than 63 characters" in msg:
                    msg = POD_NAME_TOO_LONG
                errs.append(f'{path}: Invalid value: "{job_name}": {msg}')
    return errs


def jobset_invalid_message(js: dict[str, Any], errs: list[str]) -> str:
    """apierrors.NewInvalid's message for the JobSet."""
    body = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
    return f'JobSet.jobset.x-k8s.io "{js["metadata"]["name"]}" is invalid: {body}'


# -- the Trainer webhook (trainer v2.3.0 pkg/webhooks/trainjob_webhook.go + plugins) ---------


def _go_value(value: Any) -> str:
    """How the harness prints a Go field.Invalid value: JSON (real Go prints its own syntax)."""
    return json.dumps(value, separators=(",", ":"))


def _reserved(env: list[dict[str, Any]], names: set[str]) -> list[str]:
    return sorted({e.get("name", "") for e in env} & names)


_DOMAIN_PREFIXED = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$"
)


def trainer_errors(
    tj: dict[str, Any],
    old: dict[str, Any] | None,
    runtime: dict[str, Any] | None,
    jobset_active: list[str] | None = None,
) -> list[str]:
    """The Trainer webhook's field errors for `tj` (`old` on update; `runtime` None: not found;
    `jobset_active`: replicated jobs of the existing JobSet with active pods)."""
    spec = tj.get("spec") or {}
    ref = spec.get("runtimeRef") or {}
    kind = ref.get("kind", "ClusterTrainingRuntime")
    if runtime is None:
        what = "clusterTrainingRuntime" if kind == "ClusterTrainingRuntime" else "trainingRuntime"
        path = "spec.RuntimeRef" if kind == "ClusterTrainingRuntime" else "spec.runtimeRef"
        res = "clustertrainingruntimes" if kind == "ClusterTrainingRuntime" else "trainingruntimes"
        return [
            f"{path}: Invalid value: {_go_value(ref)}: {res}.trainer.kubeflow.org "
            f'"{ref.get("name")}" not found: specified {what} must be created before the '
            "TrainJob is created"
        ]
    errs: list[str] = []
    policy = _policy(runtime)
    trainer = spec.get("trainer") or {}
    env = trainer.get("env") or []
    merged = merge_patches(tj, runtime)
    rjobs = {rj.get("name"): rj for rj in merged.get("replicatedJobs") or []}
    if "torch" in policy:
        targets = ((policy["torch"] or {}).get("envInjection") or {}).get("targets") or []
        for t in targets:
            names = {c.get("name") for c in _pod_spec(rjobs.get(t.get("jobName"), {})).get(
                "containers") or []}  # fmt: skip
            for cname in t.get("containerNames") or []:
                if cname not in names:
                    errs.append(
                        f"spec.runtimeRef: Invalid value: {_go_value(t)}: envInjection target "
                        f'podSet "{t.get("jobName")}" container "{cname}" not found in runtime '
                        "template"
                    )
        bad = _reserved(env, TORCH_RESERVED)
        if bad:
            errs.append(
                f"spec.trainer.env: Invalid value: {_go_value(env)}: must not have reserved "
                f"envs, invalid envs configured: [{' '.join(bad)}]"
            )
    if "mpi" in policy:
        mpi = policy["mpi"] or {}
        if int(trainer.get("numNodes") or 1) >= 2 and mpi.get("runLauncherAsNode"):
            if "launcher" not in rjobs or "node" not in rjobs:
                errs.append(
                    f"spec.trainer.numNodes: Invalid value: {trainer.get('numNodes')}: must have "
                    "1 when MPI trainingRuntime with enabled runLauncherAsNode does not have "
                    "either launcher and node"
                )
        bad = _reserved(env, MPI_RESERVED)
        if bad:
            errs.append(
                f"spec.trainer.env: Invalid value: {_go_value(env)}: must not have reserved "
                f"envs, invalid envs configured: [{' '.join(bad)}]"
            )
    if "xgboost" in policy:
        for i, e in enumerate(env):
            if e.get("name") in XGBOOST_RESERVED:
                errs.append(
                    f"spec.trainer.env[{i}]: Forbidden: {e['name']} is reserved for the XGBoost "
                    "runtime"
                )
    errs += _jobset_plugin_errors(tj, old, rjobs, jobset_active or [])
    return errs


def _jobset_plugin_errors(
    tj: dict[str, Any],
    old: dict[str, Any] | None,
    rjobs: dict[str, dict[str, Any]],
    jobset_active: list[str],
) -> list[str]:
    """jobset.go Validate: initializers, runtime patches (against the merged template)."""
    spec = tj.get("spec") or {}
    ref = _go_value(spec.get("runtimeRef") or {})
    patches = spec.get("runtimePatches") or []
    errs: list[str] = []
    containers = {
        n: {c.get("name") for c in (_pod_spec(rj).get("initContainers") or [])}
        | {c.get("name") for c in (_pod_spec(rj).get("containers") or [])}
        for n, rj in rjobs.items()
    }
    for kind, key in (("dataset", "datasetConfig"), ("model", "modelConfig")):
        if not ((spec.get("initializer") or {}).get(kind)):
            continue
        rjob = f"{kind}-initializer"
        if rjob not in containers:
            errs.append(
                f"spec.runtimeRef: Invalid value: {ref}: must have {rjob} job when trainJob is "
                f"configured with input {key}"
            )
        elif rjob not in containers[rjob]:
            errs.append(
                f"spec.runtimeRef: Invalid value: {ref}: must have container with name - {rjob} "
                f"in the {rjob} job"
            )
        else:
            mounts = [
                m.get("name")
                for c in _pod_spec(rjobs[rjob]).get("containers") or []
                if c.get("name") == rjob
                for m in c.get("volumeMounts") or []
            ]
            if "initializer" not in mounts:
                errs.append(
                    f"spec.runtimeRef: Invalid value: {ref}: must have volumeMount with name - "
                    f"initializer in container {rjob} of the {rjob} job"
                )
    if old is not None:
        old_spec = old.get("spec") or {}
        strip = [{k: v for k, v in p.items() if k != "time"} for p in patches]
        old_strip = [{k: v for k, v in p.items() if k != "time"}
                     for p in old_spec.get("runtimePatches") or []]  # fmt: skip
        if strip != old_strip:
            if not old_spec.get("suspend") and not spec.get("suspend"):
                errs.append(
                    "spec.runtimePatches: Forbidden: RuntimePatches can only be modified when "
                    "the TrainJob is suspended before or after the update"
                )
            else:
                for name in jobset_active:
                    errs.append(
                        "spec.runtimePatches: Forbidden: RuntimePatches cannot be modified when "
                        f"the JobSet's ReplicatedJob {name} is still active"
                    )
    pvalue = _go_value(patches)
    for p in patches:
        manager = str(p.get("manager") or "")
        if not _DOMAIN_PREFIXED.match(manager):
            errs.append(
                f'spec.runtimePatches.manager: Invalid value: "{manager}": must be a '
                'domain-prefixed path (such as "acme.io/foo")'
            )
        pspec = ((p.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rjp in pspec.get("replicatedJobs") or []:
            have = containers.get(rjp.get("name"))
            if have is None:
                errs.append(
                    f"spec.runtimePatches: Invalid value: {pvalue}: must not have replicated "
                    "job that doesn't exist in the runtime job template"
                )
                continue
            pod = _pod_spec(rjp)
            for c in pod.get("initContainers") or []:
                if c.get("name") not in have:
                    errs.append(
                        f"spec.runtimePatches: Invalid value: {pvalue}: must not have "
                        f"initContainer that doesn't exist in the runtime job {rjp.get('name')}"
                    )
            for c in pod.get("containers") or []:
                if c.get("name") not in have:
                    errs.append(
                        f"spec.runtimePatches: Invalid value: {pvalue}: must not have container "
                        f"that doesn't exist in the runtime job {rjp.get('name')}"
                    )
                elif c.get("env") and c.get("name") in (
                    "dataset-initializer",
                    "model-initializer",
                    "node",
                ):
                    errs.append(
                        f"spec.runtimePatches: Invalid value: {pvalue}: must not have envs for "
                        "the dataset-initializer, model-initializer, node containers"
                    )
    return errs


def aggregate(errs: list[str]) -> str:
    """utilerrors.Aggregate's message: one error as is, several in brackets."""
    return errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
