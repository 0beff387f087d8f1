"""Build a job in phases, as the Trainer controller does: validate -> policy -> options -> build.

`build_trainjob` gives the TrainJob manifest a cluster accepts; `build_launch_plan` turns that
same manifest into the processes a local run starts. Both are pure: no I/O, no clock reads
except the random name suffix; the one read is a `script=` file's text, at submit time.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import own_setup, program
from .config import RuntimeConfig, SecretRef
from .constants import (
    API_VERSION,
    CREATED_BY_LABEL,
    CREATED_BY_VALUE,
    FRAMEWORK_ANNOTATION,
    GROUP,
    MULTIKUEUE_MANAGER,
    QUEUE_LABEL,
    TRAINER_ANNOTATION,
    TRAINJOB_KIND,
)
from .errors import OptionError, RuntimeMismatchError, ValidationError
from .options import KUBERNETES, Name, PodSecurity, apply_options, backend_name
from .policies import (
    OWN_ENV_PREFIX,
    TRAINER_POLICIES,
    JobShape,
    Payload,
    get_policy,
    gpus_per_node,
)
from .runtimes import Runtime
from .script import SCRIPT_FUNC_NAME, load_script, validate_script_args
from .trainers import BaseTrainer
from .validation import validate_job_name


def generate_name(prefix: str) -> str:
    """A fresh RFC 1035 job name like `torch-3f9c2a1b`."""
    return f"{prefix}-{secrets.token_hex(4)}"


def _check_env(runtime_config: RuntimeConfig | None, policy_name: str) -> None:
    if not runtime_config or not runtime_config.env:
        return
    if runtime_config.index_urls and "PIP_INDEX_URL" in runtime_config.env:
        raise ValidationError(
            "The pip index is given twice: as pip_index_urls and as env PIP_INDEX_URL. Keep "
            "one: pip_index_urls for a URL, env={'PIP_INDEX_URL': SecretRef(...)} to keep a "
            "URL with credentials in a Kubernetes Secret."
        )
    reserved = get_policy(policy_name).reserved_env
    for key in runtime_config.env:
        if key in reserved:
            raise ValidationError(
                f"Environment variable {key} is set by the Kubeflow Trainer for the "
                f"{policy_name} policy; a job may not set it. Remove it from RuntimeConfig.env "
                "(the trainer's num_nodes / num_proc_per_node control it)."
            )
        if key.startswith(OWN_ENV_PREFIX):
            raise ValidationError(
                f"Environment variable {key} is reserved for kf-jupyter's own runner "
                f"(names starting with {OWN_ENV_PREFIX}). Rename it."
            )


def _env_list(env: Mapping[str, str | SecretRef] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key, value in (env or {}).items():
        if isinstance(value, SecretRef):
            out.append(
                {"name": key, "valueFrom": {"secretKeyRef": {"name": value.name, "key": value.key}}}
            )
        else:
            out.append({"name": key, "value": value})
    return out


def _payload(trainer: BaseTrainer, rc: RuntimeConfig) -> Payload:
    """What the command ships: a function's source, or a script's text (read now), and argv."""
    if trainer.script is not None:
        sc = load_script(trainer.script)
        source, func_name, argv0 = sc.source, SCRIPT_FUNC_NAME, sc.name
    else:
        fs = program.function_source(trainer.func)  # type: ignore[arg-type]
        source, func_name = fs.source, fs.name
        argv0 = getattr(trainer.func, "__kf_argv0__", "")
    return Payload(
        source=source,
        func_name=func_name,
        args_json=program.encode_args(trainer.func_args),
        runner=program.runner_source(),
        packages=tuple(rc.packages),
        index_urls=tuple(rc.index_urls),
        argv0=argv0 if isinstance(argv0, str) else "",
        argv=validate_script_args(trainer.script_args),
        env_names=tuple(rc.env or ()),
    )


def node_resources(trainer: BaseTrainer, runtime: Runtime) -> dict[str, Any]:
    """The resources per node the Trainer reads: the job's `resourcesPerNode` (sent as requests
    and limits), else the runtime's `node` container's (ExtractResourcePerNodeFromRuntime)."""
    resources = trainer.resources()
    if resources:
        return {"requests": dict(resources), "limits": dict(resources)}
    return dict(runtime.node_resources)


def job_shape(trainer: BaseTrainer, runtime: Runtime, name: str) -> JobShape:
    """Nodes, processes per node (and why) and GPUs per node for this trainer on this runtime,
    as the Trainer's plugin for the policy derives them (the same on both backends)."""
    policy = get_policy(trainer.policy)
    resources = node_resources(trainer, runtime)
    procs = policy.procs_per_node(trainer.procs_per_node, runtime.num_proc_per_node, resources)
    mpi = policy.name == "mpi"
    return JobShape(
        name=name,
        num_nodes=trainer.num_nodes or runtime.num_nodes or 1,
        num_proc_per_node=procs.count,
        gpus_per_node=gpus_per_node(resources),
        nproc_env=procs.env,
        procs_reason=procs.reason,
        launcher_as_node=mpi and runtime.run_launcher_as_node,
        launcher_first=mpi and runtime.launcher_first,
    )


def describe_processes(shape: JobShape, policy: str) -> dict[str, Any]:
    """What the dry run says about the processes: per node, in all, and why."""
    out: dict[str, Any] = {
        "num_nodes": shape.num_nodes,
        "processes_per_node": shape.procs,
        "world_size": shape.world_size,
        "why": shape.procs_reason,
    }
    if policy == "mpi":
        out["hosts"] = shape.hosts
        if shape.launcher_as_node:
            out["why"] += (
                f"; runLauncherAsNode: {shape.node_pods} node pod(s) plus the launcher are the "
                f"hosts, {shape.procs} slot(s) each"
            )
    return out


def build_trainjob(
    trainer: BaseTrainer,
    runtime: Runtime,
    runtime_config: RuntimeConfig | None = None,
    options: Iterable[Any] | None = (),
    name: str | None = None,
    backend: Any = "kubernetes",
) -> dict[str, Any]:
    """The TrainJob manifest (`trainer.kubeflow.org/v1alpha1`) for a trainer on a runtime."""
    if not isinstance(trainer, BaseTrainer):
        raise ValidationError(
            f"trainer must be a TorchTrainer, MPITrainer, JAXTrainer or XGBoostTrainer, got "
            f"{type(trainer).__name__}."
        )
    if runtime_config is not None and not isinstance(runtime_config, RuntimeConfig):
        raise ValidationError(
            f"runtime_config must be a RuntimeConfig, got {type(runtime_config).__name__}."
        )
    if not runtime.fits(trainer):
        raise RuntimeMismatchError(
            f"Runtime {runtime.name!r} (framework {runtime.framework!r}, policy "
            f"{runtime.ml_policy!r}) does not fit {type(trainer).__name__}, which runs on "
            f"{list(trainer.supported_frameworks)}. Choose a runtime of that framework."
        )
    options = list(options or [])
    if name is not None:
        validate_job_name(name)
        if any(isinstance(o, Name) for o in options):
            raise OptionError("A job name was given both as name= and as a Name option; keep one.")
    policy = get_policy(trainer.policy)
    _check_env(runtime_config, policy.name)
    job_name = name or generate_name(trainer.framework)
    shape = job_shape(trainer, runtime, job_name)

    spec_trainer: dict[str, Any] = {}
    if trainer.image:
        spec_trainer["image"] = trainer.image
    if trainer.func is not None or trainer.script is not None:
        payload = _payload(trainer, runtime_config or RuntimeConfig())
        if trainer.policy == "torch":
            mismatch = own_setup.lightning_count_mismatch(
                payload.source, shape.num_nodes, shape.num_proc_per_node
            )
            mismatch = mismatch or own_setup.accelerate_count_mismatch(
                payload.source,
                shape.num_nodes,
                shape.num_proc_per_node,
                frozenset((runtime_config.env or {}) if runtime_config else ()),
            )
            if mismatch:
                raise ValidationError(mismatch)
        script = policy.script(trainer, payload, shape)
        if backend_name(backend) == KUBERNETES and policy.name not in TRAINER_POLICIES:
            script = policy.command_env(shape) + script  # the Trainer does not inject it
        spec_trainer["command"] = ["bash", "-c", script]
    if trainer.num_nodes is not None:
        spec_trainer["numNodes"] = trainer.num_nodes
    if trainer.procs_per_node is not None:
        spec_trainer["numProcPerNode"] = trainer.procs_per_node
    resources = trainer.resources()
    if resources:
        spec_trainer["resourcesPerNode"] = {"limits": dict(resources), "requests": dict(resources)}
    env = _env_list(runtime_config.env if runtime_config else None)
    shipped = trainer.func is not None or trainer.script is not None
    if shipped and runtime_config and runtime_config.packages:
        # Credentials in index URLs stay out of the command (see program.index_env).
        env += _env_list(program.index_env(runtime_config.index_urls))
    if env:
        spec_trainer["env"] = env

    job: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": TRAINJOB_KIND,
        "metadata": {
            "name": job_name,
            "labels": {CREATED_BY_LABEL: CREATED_BY_VALUE},
            "annotations": {
                FRAMEWORK_ANNOTATION: runtime.framework
                if runtime.framework != "unknown"
                else trainer.framework,
                TRAINER_ANNOTATION: type(trainer).__name__,
            },
        },
        "spec": {
            "runtimeRef": {"name": runtime.name, "apiGroup": GROUP, "kind": runtime.kind},
            "trainer": spec_trainer,
        },
    }
    apply_options(job, options, trainer, backend)
    own_command = job["spec"]["trainer"]
    if trainer.policy == "torch" and "command" in own_command and not shipped:
        # A TrainerCommand: the processes per node are the job's when set or one per GPU; an
        # `auto` without GPUs is not compared (accelerate launch then decides them itself).
        counted = trainer.procs_per_node is not None or shape.gpus_per_node > 0
        mismatch = own_setup.accelerate_launch_mismatch(
            [*own_command.get("command", []), *own_command.get("args", [])],
            shape.num_nodes,
            shape.num_proc_per_node if counted else None,
        )
        if mismatch:
            raise ValidationError(mismatch)
    if backend_name(backend) == KUBERNETES:  # once all options ran: on the runtime's jobs
        for o in options:
            if isinstance(o, PodSecurity):
                o.apply(job, runtime)
    validate_job_name(job["metadata"]["name"])
    if not job["spec"]["trainer"]:
        del job["spec"]["trainer"]
    if backend_name(backend) == KUBERNETES:
        check_managed_by(job)
        check_child_names(job, runtime)
        check_patch_targets(job, runtime)
        check_initializers(job, runtime)
    return job


def check_managed_by(job: Mapping[str, Any]) -> None:
    """`ManagedBy(kueue.x-k8s.io/multikueue)` needs a Kueue queue: the Trainer skips such a job
    (trainjob_controller.go), so without MultiKueue dispatching it nothing ever runs it."""
    if (job.get("spec") or {}).get("managedBy") != MULTIKUEUE_MANAGER:
        return
    if QUEUE_LABEL not in ((job.get("metadata") or {}).get("labels") or {}):
        raise OptionError(
            f"ManagedBy({MULTIKUEUE_MANAGER}) hands the job to Kueue's MultiKueue, and the "
            "Trainer on this cluster leaves it alone; without a Queue(...) option naming a queue "
            "whose ClusterQueue dispatches to MultiKueue worker clusters, nothing would ever run "
            "it. Add Queue('<local queue>'), or drop ManagedBy."
        )


def check_initializers(job: Mapping[str, Any], runtime: Runtime) -> None:
    """Refuse a dataset/model initializer on a runtime without that step (the Trainer's webhook
    refuses it: 'must have dataset-initializer job when trainJob is configured with input ...')."""
    if not runtime.replicated_jobs:
        return
    have = {rj.name: rj.containers for rj in runtime.replicated_jobs}
    for kind in (job.get("spec") or {}).get("initializer") or {}:
        step = f"{kind}-initializer"
        if step not in have or step not in have[step]:
            with_step = "has no" if step not in have else f"has a {step} job without a container"
            raise ValidationError(
                f"Runtime {runtime.name!r} {with_step} {step} step, so the cluster refuses a "
                f"job with a {kind} initializer. Pick a runtime with that step (client."
                "list_runtimes() shows them), or fetch the data in your training function."
            )


#: The TrainJob CRD's maxItems of spec.runtimePatches.
MAX_RUNTIME_PATCHES = 16
#: The runtime patch Kueue's webhook adds to every TrainJob created where Kueue's TrainJob
#: integration runs, queued or not; Kueue fills it when it admits the job (kueue
#: pkg/controller/jobs/trainjob trainjob_webhook.go Default, trainjob_controller.go).
KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"
#: JobSet's limit on the names of the Jobs and Pods it creates (an RFC 1035 label).
CHILD_NAME_LIMIT = 63


def check_child_names(job: Mapping[str, Any], runtime: Runtime) -> None:
    """Refuse a name the JobSet webhook would refuse for this runtime (its longest pod name,
    `<name>-<job>-<i>-<j>-<5 random>`, must fit in 63 characters): on a cluster the TrainJob is
    created and then never starts."""
    name = str(job["metadata"]["name"])
    num_nodes = ((job.get("spec") or {}).get("trainer") or {}).get("numNodes")
    rjob, suffix = runtime.longest_child_suffix(num_nodes)
    if not suffix or len(name) + len(suffix) <= CHILD_NAME_LIMIT:
        return
    limit = CHILD_NAME_LIMIT - len(suffix)
    nodes = num_nodes if num_nodes is not None else runtime.num_nodes
    raise ValidationError(
        f"Job name {name!r} has {len(name)} characters; on runtime {runtime.name!r} with "
        f"{nodes} node(s) it may have at most {limit}. The JobSet the Trainer creates names its "
        f"pods '{name}{suffix.replace('xxxxx', '<5 random>')}' (replicated job {rjob!r}), and "
        f"those names must fit in {CHILD_NAME_LIMIT} characters, or the cluster accepts the "
        "TrainJob but never starts it. Choose a shorter name (Name option or name=)."
    )


def check_patch_targets(job: Mapping[str, Any], runtime: Runtime) -> None:
    """Refuse a runtime patch aimed at a replicated job or container the runtime lacks (the
    Trainer merges it in as a new, incomplete replicated job, whose pods never start)."""
    if not runtime.replicated_jobs:
        return
    have = {rj.name: rj.containers for rj in runtime.replicated_jobs}
    for patch in (job.get("spec") or {}).get("runtimePatches") or []:
        tmpl = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rj in tmpl.get("replicatedJobs") or []:
            target = rj.get("name")
            if target not in have:
                raise OptionError(
                    f"A runtime patch (manager {patch.get('manager')!r}) changes replicated job "
                    f"{target!r}, which runtime {runtime.name!r} does not have; it has "
                    f"{', '.join(repr(n) for n in have)}. Aim the override (target_jobs of "
                    "PodTemplateOverride, or the RuntimePatch) at one of those."
                )
            pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec"
            ) or {}
            for part in ("initContainers", "containers"):
                for c in pod.get(part) or []:
                    if c.get("name") not in have[target]:
                        raise OptionError(
                            f"A runtime patch (manager {patch.get('manager')!r}) changes "
                            f"container {c.get('name')!r} of replicated job {target!r}, which "
                            f"runtime {runtime.name!r} does not have there; its containers are "
                            f"{', '.join(repr(n) for n in have[target]) or 'none'}. Name one "
                            "of those (or add a volume mount to 'node')."
                        )


def _merge_patch(a: Any, b: Any) -> Any:
    """Merge runtime patch `b` into `a`: maps key by key, lists of named items by name."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = _merge_patch(out[k], v) if k in out else copy.deepcopy(v)
        return out
    if isinstance(a, list) and isinstance(b, list):
        named = all(isinstance(x, dict) and "name" in x for x in a + b)
        if not named:
            return [*a, *(x for x in b if x not in a)]
        out_list = [copy.deepcopy(x) for x in a]
        for item in b:
            idx = next((i for i, x in enumerate(out_list) if x["name"] == item["name"]), None)
            if idx is None:
                out_list.append(copy.deepcopy(item))
            else:
                out_list[idx] = _merge_patch(out_list[idx], item)
        return out_list
    return copy.deepcopy(b)


def fit_runtime_patches(
    job: dict[str, Any],
    own_prefix: str = "kf-jupyter.io/",
    kueue: bool | Callable[[], bool] = False,
) -> None:
    """Keep `spec.runtimePatches` within the CRD's 16, counting the one Kueue's webhook adds:
    to every TrainJob created where Kueue runs (`kueue`: the cluster serves Kueue's API, a
    callable asked only when the count is at the limit), and always when the job is queued.
    kf-jupyter's own entries are merged into one if that is needed; past that, a clear error
    (the API server would refuse the TrainJob that Kueue's webhook made too long)."""
    spec = job.get("spec") or {}
    patches = spec.get("runtimePatches") or []
    if len(patches) + 1 <= MAX_RUNTIME_PATCHES:
        return  # fits even with Kueue's
    queued = QUEUE_LABEL in ((job.get("metadata") or {}).get("labels") or {})
    has_kueue = any(p.get("manager") == KUEUE_PATCH_MANAGER for p in patches)
    installed = not has_kueue and not queued and (kueue() if callable(kueue) else kueue)
    extra = 0 if has_kueue else 1 if queued or installed else 0
    if len(patches) + extra <= MAX_RUNTIME_PATCHES:
        return
    ours = [p for p in patches if str(p.get("manager", "")).startswith(own_prefix)]
    if len(ours) > 1:
        merged = {"manager": ours[0]["manager"], "trainingRuntimeSpec": {}}
        for p in ours:
            merged["trainingRuntimeSpec"] = _merge_patch(
                merged["trainingRuntimeSpec"], p.get("trainingRuntimeSpec") or {}
            )
        first = patches.index(ours[0])
        rest = [p for p in patches if p not in ours]
        patches = [*rest[:first], merged, *rest[first:]]
        spec["runtimePatches"] = patches
    if len(patches) + extra <= MAX_RUNTIME_PATCHES:
        return
    theirs = len(patches) - (1 if ours else 0)
    why = "the job is queued" if queued else "Kueue runs on this cluster"
    raise OptionError(
        f"This TrainJob would carry {len(patches) + extra} runtime patches ({theirs} from "
        f"RuntimePatch options{', 1 of kf-jupyter' if ours else ''}"
        f"{f', 1 that Kueue adds to every TrainJob it sees ({why})' if extra else ''}); a "
        f"TrainJob holds at most {MAX_RUNTIME_PATCHES}. Merge some RuntimePatch options into "
        "one (one manager may patch several replicated jobs)."
    )


@dataclass
class LaunchProcess:
    """One process of a local run: argv, the environment it adds, secret env to resolve."""

    name: str
    node_index: int
    argv: list[str]
    env: dict[str, str]
    secret_env: dict[str, SecretRef] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class LaunchPlan:
    """What a local run starts: the processes, in the order they start."""

    job_name: str
    policy: str
    shape: JobShape
    processes: list[LaunchProcess]
    deadline_seconds: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A printable form: secret values are never in it, only where they come from."""
        return {
            "job": self.job_name,
            "policy": self.policy,
            "num_nodes": self.shape.num_nodes,
            "num_proc_per_node": self.shape.num_proc_per_node,
            "world": describe_processes(self.shape, self.policy),
            "processes": [
                {
                    "name": p.name,
                    "argv": [
                        a if len(a) < 200 else a[:80] + f"... ({len(a)} chars)" for a in p.argv
                    ],
                    "env": dict(p.env),
                    "secret_env": {
                        k: f"<Secret {v.name}/{v.key}: from the kernel's ${k}>"
                        for k, v in p.secret_env.items()
                    },
                }
                for p in self.processes
            ],
            "deadline_seconds": self.deadline_seconds,
        }


def build_launch_plan(
    job: Mapping[str, Any],
    trainer: BaseTrainer,
    runtime: Runtime,
    port: int,
    job_dir: str,
) -> LaunchPlan:
    """The local processes for a TrainJob manifest built by `build_trainjob`.

    Each process runs the manifest's own command and args, with `trainer.env` and the policy's
    environment (hosts mapped to 127.0.0.1, the given free port). kf-jupyter's own variables
    (work dir, per-rank logs, result file) are added by the local backend.
    """
    job = copy.deepcopy(dict(job))
    spec = job.get("spec", {})
    st = spec.get("trainer", {})
    name = job["metadata"]["name"]
    argv = list(st.get("command") or []) + list(st.get("args") or [])
    if not argv:
        raise ValidationError(
            f"Job {name!r} has no command to run locally: give the trainer a func, or a "
            "TrainerCommand option."
        )
    shape = job_shape(trainer, runtime, name)
    policy = get_policy(trainer.policy)
    user_env: dict[str, str] = {}
    secret_env: dict[str, SecretRef] = {}
    for item in st.get("env") or []:
        if "valueFrom" in item:
            ref = item["valueFrom"].get("secretKeyRef") or {}
            secret_env[item["name"]] = SecretRef(ref.get("name", ""), ref.get("key", ""))
        else:
            user_env[item["name"]] = item.get("value", "")
    processes = []
    for ps in policy.local_processes(shape, port, job_dir):
        env = dict(user_env)
        env.update(ps.env)
        processes.append(
            LaunchProcess(ps.name, ps.node_index, argv, env, dict(secret_env), dict(ps.files))
        )
    return LaunchPlan(name, policy.name, shape, processes, spec.get("activeDeadlineSeconds"))
