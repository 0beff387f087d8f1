"""Training runtimes as data, and the pure rules that pick one for a trainer."""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .constants import (
    ANCESTOR_LABEL,
    CLUSTER_RUNTIME_KIND,
    DEFAULT_RUNTIME_ANNOTATION,
    DEPRECATED,
    FRAMEWORK_LABEL,
    SUPPORT_LABEL,
)
from .errors import (
    AmbiguousRuntimeError,
    RuntimeMismatchError,
    RuntimeNotFoundError,
    did_you_mean,
)
from .trainers import BaseTrainer

log = logging.getLogger("kf_jupyter.runtimes")

UNKNOWN = "unknown"
ML_POLICIES = ("torch", "mpi", "jax", "xgboost", "flux")


@dataclass(frozen=True)
class ReplicatedJob:
    """One replicated job of a runtime's JobSet template: what names and counts depend on."""

    name: str
    trainer: bool = False  # labelled trainjob-ancestor-step: trainer
    replicas: int = 1
    parallelism: int = 1
    containers: tuple[str, ...] = ()
    #: Of `containers`, the init containers.
    init_containers: tuple[str, ...] = ()
    #: The pod spec of the runtime's template (what Pod Security admission reads of it).
    pod: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Runtime:
    """A TrainingRuntime or ClusterTrainingRuntime (or a backend's built-in equivalent)."""

    name: str
    kind: str = CLUSTER_RUNTIME_KIND
    framework: str = UNKNOWN
    ml_policy: str = "plain"
    image: str | None = None
    num_nodes: int = 1
    num_proc_per_node: int | None = None
    deprecated: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    namespace: str | None = None
    trainer_job: str = "node"
    #: The replicated jobs of the runtime's JobSet template (names and counts of what it creates).
    replicated_jobs: tuple[ReplicatedJob, ...] = ()
    #: MPI: `mlPolicy.mpi.runLauncherAsNode` (the launcher is a host of the world).
    run_launcher_as_node: bool = False
    #: The `node` container's resources in the runtime template (`{"requests", "limits"}`):
    #: what numProcPerNode `auto` and the GPU count use when the job sets no resources.
    node_resources: Mapping[str, Any] = field(default_factory=dict)
    #: MPI: the runtime lists `launcher` before `node` (its line comes first in the hostfile).
    launcher_first: bool = False
    #: The kf-jupyter plugin that brings this runtime (None: the cluster's or the default's).
    plugin: str | None = None

    @classmethod
    def from_manifest(cls, obj: Mapping[str, Any]) -> Runtime:
        """Parse a TrainingRuntime/ClusterTrainingRuntime object as the API server returns it."""
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        labels = dict(meta.get("labels") or {})
        annotations = dict(meta.get("annotations") or {})
        ml = spec.get("mlPolicy") or {}
        policy = next((p for p in ML_POLICIES if p in ml and ml[p] is not None), "plain")
        nproc = None
        sub = ml.get(policy) if policy != "plain" else None
        if isinstance(sub, Mapping) and isinstance(sub.get("numProcPerNode"), int):
            nproc = sub["numProcPerNode"]
        image, trainer_job = _trainer_image(spec)
        replicated = _replicated_jobs(spec)
        jobs = [rj.name for rj in replicated]
        return cls(
            name=meta.get("name", ""),
            kind=obj.get("kind") or CLUSTER_RUNTIME_KIND,
            framework=labels.get(FRAMEWORK_LABEL) or UNKNOWN,
            ml_policy=policy,
            image=image,
            num_nodes=int(ml.get("numNodes") or 1),
            num_proc_per_node=nproc,
            deprecated=labels.get(SUPPORT_LABEL) == DEPRECATED,
            labels=labels,
            annotations=annotations,
            namespace=meta.get("namespace"),
            trainer_job=trainer_job,
            replicated_jobs=replicated,
            run_launcher_as_node=bool(isinstance(sub, Mapping) and sub.get("runLauncherAsNode")),
            node_resources=_node_resources(spec),
            launcher_first="launcher" in jobs
            and "node" in jobs
            and jobs.index("launcher") < jobs.index("node"),
        )

    def pod_counts(self, num_nodes: int | None) -> dict[str, int]:
        """Pods per replicated job for a job of `num_nodes` (None: the runtime's), as the
        Trainer sizes them: the trainer step gets numNodes; on MPI the launcher keeps the
        runtime's count and `node` gets numNodes (one less, at least 1, with runLauncherAsNode)."""
        out: dict[str, int] = {}
        for rj in self.replicated_jobs:
            count = rj.parallelism
            if rj.trainer:
                count = self.num_nodes or 1
            if self.ml_policy == "mpi":
                if rj.name == "node" and num_nodes is not None:
                    count = max(num_nodes - 1, 1) if self.run_launcher_as_node else num_nodes
            elif rj.trainer and num_nodes is not None:
                count = num_nodes
            out[rj.name] = count
        return out

    def longest_child_suffix(self, num_nodes: int | None) -> tuple[str, str]:
        """(replicated job, longest `-<job>-<i>-<j>-xxxxx` the JobSet adds to the job name for
        its pods); ('', '') when the runtime's template is unknown."""
        counts = self.pod_counts(num_nodes)
        best = ("", "")
        for rj in self.replicated_jobs:
            replicas = 1 if rj.trainer else rj.replicas
            suffix = f"-{rj.name}-{replicas - 1}-{counts[rj.name] - 1}-xxxxx"
            if len(suffix) > len(best[1]):
                best = (rj.name, suffix)
        return best

    @property
    def is_default(self) -> bool:
        """An admin marked this runtime as the default for its framework."""
        return str(self.annotations.get(DEFAULT_RUNTIME_ANNOTATION, "")).lower() == "true"

    def fits(self, trainer: BaseTrainer) -> bool:
        """The runtime's framework label or ML policy fits the trainer."""
        return self.framework in trainer.supported_frameworks or (
            self.ml_policy == trainer.policy and trainer.policy != "plain"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (widgets, server extension)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "framework": self.framework,
            "ml_policy": self.ml_policy,
            "image": self.image,
            "num_nodes": self.num_nodes,
            "num_proc_per_node": self.num_proc_per_node,
            "deprecated": self.deprecated,
            "namespace": self.namespace,
            "plugin": self.plugin,
        }


def _replicated_jobs(spec: Mapping[str, Any]) -> tuple[ReplicatedJob, ...]:
    jobs = (((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs")) or []
    out = []
    for rj in jobs:
        if not isinstance(rj, Mapping) or not rj.get("name"):
            continue
        tmpl = rj.get("template") or {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        job_spec = tmpl.get("spec") or {}
        pod = (job_spec.get("template") or {}).get("spec") or {}
        names = [c.get("name", "") for c in (pod.get("initContainers") or [])]
        names += [c.get("name", "") for c in (pod.get("containers") or [])]
        out.append(
            ReplicatedJob(
                name=str(rj["name"]),
                trainer=labels.get(ANCESTOR_LABEL) == "trainer",
                replicas=int(rj.get("replicas") or 1),
                parallelism=int(job_spec.get("parallelism") or 1),
                containers=tuple(str(n) for n in names),
                init_containers=tuple(
                    str(c.get("name", "")) for c in pod.get("initContainers") or []
                ),
                pod=copy.deepcopy(dict(pod)),
            )
        )
    return tuple(out)


def _node_resources(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The first `node` container's resources of the job named node or marked as the trainer
    step (ExtractResourcePerNodeFromRuntime, pkg/runtime/runtime.go:254-277)."""
    jobs = (((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs")) or []
    for rj in jobs:
        if not isinstance(rj, Mapping):
            continue
        tmpl = rj.get("template") or {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        if rj.get("name") != "node" and labels.get(ANCESTOR_LABEL) != "trainer":
            continue
        pod = ((tmpl.get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in pod.get("containers") or []:
            if c.get("name") == "node" and c.get("resources") is not None:
                res = c["resources"]
                return {
                    "requests": dict(res.get("requests") or {}),
                    "limits": dict(res.get("limits") or {}),
                }
    return {}


def _trainer_image(spec: Mapping[str, Any]) -> tuple[str | None, str]:
    jobs = (((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs")) or []
    chosen = None
    for rj in jobs:
        rj_labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if rj_labels.get(ANCESTOR_LABEL) == "trainer":
            chosen = rj
            break
    if chosen is None:
        chosen = next((rj for rj in jobs if rj.get("name") == "node"), None)
    if chosen is None:
        return None, "node"
    pod = (
        (((chosen.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
    ) or {}
    for c in pod.get("containers") or []:
        if c.get("name") == "node":
            return c.get("image"), chosen.get("name", "node")
    containers = pod.get("containers") or []
    return (containers[0].get("image") if containers else None), chosen.get("name", "node")


class Selection(NamedTuple):
    """The runtime chosen for a trainer and the reason, in words."""

    runtime: Runtime
    reason: str


def _describe(runtimes: Iterable[Runtime]) -> str:
    items = [f"{r.name} (framework {r.framework}, policy {r.ml_policy})" for r in runtimes]
    return ", ".join(items) if items else "none"


def resolve_runtime(
    trainer: BaseTrainer, runtimes: Iterable[Runtime], name: str | None = None
) -> Selection:
    """Pick the runtime for `trainer` among `runtimes` and say why (see `select_runtime`)."""
    runtimes = list(runtimes)
    tname = type(trainer).__name__
    if name is not None:
        named = [r for r in runtimes if r.name == name]
        if not named:
            raise RuntimeNotFoundError(
                f"No training runtime named {name!r}."
                f"{did_you_mean(name, (r.name for r in runtimes))} Available runtimes: "
                f"{_describe(runtimes)}. Check the name with client.list_runtimes() "
                "(or %kf_runtimes)."
            )
        rt = named[0]
        if not rt.fits(trainer):
            raise RuntimeMismatchError(
                f"Runtime {name!r} has framework {rt.framework!r} and ML policy {rt.ml_policy!r}, "
                f"but {tname} runs on frameworks {list(trainer.supported_frameworks)} "
                f"(policy {trainer.policy!r}). Pick a runtime of one of those frameworks, or "
                "leave the runtime out to have one chosen."
            )
        return Selection(rt, f"runtime {name!r} was named explicitly")
    usable = [r for r in runtimes if not r.deprecated]
    for fw in trainer.supported_frameworks:
        matches = [r for r in usable if r.framework == fw]
        if not matches:
            continue
        if len(matches) == 1:
            return Selection(matches[0], f"the only runtime labelled framework={fw}")
        defaults = [r for r in matches if r.is_default]
        if len(defaults) == 1:
            return Selection(
                defaults[0], f"annotated {DEFAULT_RUNTIME_ANNOTATION}=true among {len(matches)}"
            )
        canonical = [r for r in matches if r.name == f"{fw}-distributed"]
        if len(canonical) == 1 and not defaults:
            return Selection(
                canonical[0], f"the canonical name {fw}-distributed among {len(matches)}"
            )
        pool = defaults or matches
        raise AmbiguousRuntimeError(
            f"{len(pool)} runtimes fit {tname} (framework {fw}): {_describe(pool)}. Pick one "
            "with runtime='<name>' (or --runtime), or have an admin annotate one of them "
            f'{DEFAULT_RUNTIME_ANNOTATION}: "true".'
        )
    skipped = [r for r in runtimes if r.deprecated and r.fits(trainer)]
    hint = f" Deprecated runtimes skipped: {_describe(skipped)}." if skipped else ""
    raise RuntimeNotFoundError(
        f"No training runtime for {tname}: it needs one labelled "
        f"{FRAMEWORK_LABEL} in {list(trainer.supported_frameworks)}. Available runtimes: "
        f"{_describe(runtimes)}.{hint} Install a runtime for the framework or name one "
        "explicitly with runtime='<name>'."
    )


def select_runtime(
    trainer: BaseTrainer, runtimes: Iterable[Runtime], name: str | None = None
) -> Runtime:
    """Pick the runtime for `trainer`.

    An explicit `name` wins if its framework or ML policy fits the trainer. Otherwise walk
    `trainer.supported_frameworks` in order, skipping deprecated runtimes; one match is taken;
    several are resolved by the `kf-jupyter.io/default: "true"` annotation, then by the canonical
    name `<framework>-distributed`, else `AmbiguousRuntimeError` lists the candidates.
    """
    sel = resolve_runtime(trainer, runtimes, name)
    log.info("runtime %s chosen for %s: %s", sel.runtime.name, type(trainer).__name__, sel.reason)
    return sel.runtime
