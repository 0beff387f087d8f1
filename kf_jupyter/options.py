"""Training options: small callables `option(job_spec, trainer, backend)` that edit the TrainJob.

Write your own as any callable with that signature. Built-in options declare the backends they
mean something on (`backends`); placement-only ones (node selector, tolerations, volumes, ...)
are skipped on the local backend with one warning naming them, others raise `OptionError` there.

Trainer v2.2 removed `spec.labels`, `spec.annotations` and `spec.podTemplateOverrides`; the
options that used to write there (`SpecLabels`, `SpecAnnotations`, `PodTemplateOverrides`) write
`spec.runtimePatches` entries under kf-jupyter's manager instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .constants import (
    MULTIKUEUE_MANAGER,
    PATCH_MANAGER,
    QUEUE_LABEL,
    TRAINER_CONTAINER,
    TRAINJOB_MANAGER,
)
from .errors import OptionError
from .validation import (
    validate_annotation_value,
    validate_job_name,
    validate_label_key,
    validate_label_value,
)

log = logging.getLogger("kf_jupyter.options")

LOCAL = "local"
KUBERNETES = "kubernetes"
ALL_BACKENDS = frozenset({LOCAL, KUBERNETES})

Option = Callable[[dict[str, Any], Any, Any], None]


def backend_name(backend: Any) -> str:
    """The name of a backend given as an object with `.name` or as a string."""
    if backend is None:
        return KUBERNETES
    return str(getattr(backend, "name", backend))


class _Option:
    """Shared behaviour of built-in options."""

    backends: ClassVar[frozenset[str]] = ALL_BACKENDS
    placement: ClassVar[bool] = False
    unique: ClassVar[bool] = False

    def supports(self, backend: Any) -> bool:
        """The option means something on this backend."""
        return backend_name(backend) in self.backends

    def _check_backend(self, backend: Any) -> bool:
        if self.supports(backend):
            return True
        if self.placement:
            return False
        raise OptionError(
            f"{type(self).__name__} option is not compatible with the {backend_name(backend)} "
            f"backend (it works on: {', '.join(sorted(self.backends))}). Remove it for this run."
        )


def _runtime_patch(job_spec: dict[str, Any]) -> dict[str, Any]:
    patches = job_spec.setdefault("spec", {}).setdefault("runtimePatches", [])
    for p in patches:
        if p.get("manager") == PATCH_MANAGER:
            return p.setdefault("trainingRuntimeSpec", {}).setdefault("template", {})
    entry: dict[str, Any] = {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {}}}
    patches.append(entry)
    return entry["trainingRuntimeSpec"]["template"]


@dataclass
class Name(_Option):
    """Name the TrainJob (an RFC 1035 label, at most 63 characters)."""

    name: str
    unique: ClassVar[bool] = True

    def __post_init__(self) -> None:
        validate_job_name(self.name)

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        self._check_backend(backend)
        job_spec.setdefault("metadata", {})["name"] = self.name


@dataclass
class Labels(_Option):
    """Labels on the TrainJob's metadata."""

    labels: dict[str, str]

    def __post_init__(self) -> None:
        for k, v in self.labels.items():
            validate_label_key(k)
            validate_label_value(k, v)

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        self._check_backend(backend)
        job_spec.setdefault("metadata", {}).setdefault("labels", {}).update(self.labels)


@dataclass
class Annotations(_Option):
    """Annotations on the TrainJob's metadata."""

    annotations: dict[str, str]

    def __post_init__(self) -> None:
        for k, v in self.annotations.items():
            validate_label_key(k)
            validate_annotation_value(k, v)

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        self._check_backend(backend)
        job_spec.setdefault("metadata", {}).setdefault("annotations", {}).update(self.annotations)


@dataclass
class SpecLabels(_Option):
    """Labels on the JobSet the Trainer creates (a runtime patch of the JobSet template)."""

    labels: dict[str, str]
    backends: ClassVar[frozenset[str]] = frozenset({KUBERNETES})
    placement: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for k, v in self.labels.items():
            validate_label_key(k)
            validate_label_value(k, v)

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        if self._check_backend(backend):
            meta = _runtime_patch(job_spec).setdefault("metadata", {})
            meta.setdefault("labels", {}).update(self.labels)


@dataclass
class SpecAnnotations(_Option):
    """Annotations on the JobSet the Trainer creates (a runtime patch of the JobSet template)."""

    annotations: dict[str, str]
    backends: ClassVar[frozenset[str]] = frozenset({KUBERNETES})
    placement: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for k, v in self.annotations.items():
            validate_label_key(k)
            validate_annotation_value(k, v)

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        if self._check_backend(backend):
            meta = _runtime_patch(job_spec).setdefault("metadata", {})
            meta.setdefault("annotations", {}).update(self.annotations)


@dataclass
class ContainerOverride:
    """Changes to one container of the pods (env of side containers, mounts, security)."""

    name: str
    env: list[dict[str, Any]] | None = None
    volume_mounts: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The PodSpecPatch container entry."""
        out: dict[str, Any] = {"name": self.name}
        if self.env is not None:
            out["env"] = self.env
        if self.volume_mounts is not None:
            out["volumeMounts"] = self.volume_mounts
        if self.security_context is not None:
            out["securityContext"] = self.security_context
        return out


@dataclass
class PodSpecOverride:
    """The pod-level fields a runtime patch may set (Trainer's PodSpecPatch)."""

    service_account_name: str | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[dict[str, Any]] | None = None
    affinity: dict[str, Any] | None = None
    volumes: list[dict[str, Any]] | None = None
    init_containers: list[ContainerOverride] | None = None
    containers: list[ContainerOverride] | None = None
    scheduling_gates: list[dict[str, Any]] | None = None
    image_pull_secrets: list[dict[str, Any]] | None = None
    security_context: dict[str, Any] | None = None
    termination_grace_period_seconds: int | None = None

    _FIELDS: ClassVar[dict[str, str]] = {
        "service_account_name": "serviceAccountName",
        "node_selector": "nodeSelector",
        "tolerations": "tolerations",
        "affinity": "affinity",
        "volumes": "volumes",
        "scheduling_gates": "schedulingGates",
        "image_pull_secrets": "imagePullSecrets",
        "security_context": "securityContext",
        "termination_grace_period_seconds": "terminationGracePeriodSeconds",
    }

    def to_dict(self) -> dict[str, Any]:
        """The PodSpecPatch dict."""
        out: dict[str, Any] = {}
        for attr, key in self._FIELDS.items():
            value = getattr(self, attr)
            if value is not None:
                out[key] = value
        if self.init_containers is not None:
            out["initContainers"] = [c.to_dict() for c in self.init_containers]
        if self.containers is not None:
            out["containers"] = [c.to_dict() for c in self.containers]
        return out

    def set_fields(self) -> list[str]:
        """Names of the fields that are set (for warnings)."""
        names = [a for a in self._FIELDS if getattr(self, a) is not None]
        names += [a for a in ("init_containers", "containers") if getattr(self, a) is not None]
        return names


@dataclass
class PodTemplateOverride:
    """Pod metadata and spec changes for the named replicated jobs (`node`, `launcher`, ...)."""

    target_jobs: list[str]
    metadata: dict[str, Any] | None = None
    spec: PodSpecOverride | None = None

    def __post_init__(self) -> None:
        if isinstance(self.target_jobs, str) or not self.target_jobs:
            raise OptionError(
                "PodTemplateOverride.target_jobs must be a non-empty list of replicated job "
                "names, for example ['node'] or ['node', 'launcher']."
            )
        for c in (self.spec.containers or []) if self.spec else []:
            if c.env and c.name in (TRAINER_CONTAINER, "dataset-initializer", "model-initializer"):
                raise OptionError(
                    f"PodTemplateOverride sets env on container {c.name!r}, which the Trainer "
                    "does not allow through a runtime patch. Put trainer environment variables "
                    "in RuntimeConfig(env=...) instead; side containers may take env here."
                )


@dataclass(init=False)
class PodTemplateOverrides(_Option):
    """Per-replicated-job pod overrides, written as a runtime patch (placement-only locally)."""

    overrides: list[PodTemplateOverride] = field(default_factory=list)
    backends: ClassVar[frozenset[str]] = frozenset({KUBERNETES})
    placement: ClassVar[bool] = True

    def __init__(self, *overrides: PodTemplateOverride) -> None:
        if len(overrides) == 1 and isinstance(overrides[0], list | tuple):
            overrides = tuple(overrides[0])
        for o in overrides:
            if not isinstance(o, PodTemplateOverride):
                raise OptionError(
                    "PodTemplateOverrides takes PodTemplateOverride objects, got "
                    f"{type(o).__name__}."
                )
        self.overrides = list(overrides)

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        if not self._check_backend(backend):
            return
        template = _runtime_patch(job_spec)
        jobs = template.setdefault("spec", {}).setdefault("replicatedJobs", [])
        for o in self.overrides:
            for target in o.target_jobs:
                entry = next((j for j in jobs if j.get("name") == target), None)
                if entry is None:
                    entry = {"name": target, "template": {"spec": {"template": {}}}}
                    jobs.append(entry)
                pod = entry["template"]["spec"]["template"]
                if o.metadata:
                    meta = pod.setdefault("metadata", {})
                    for part in ("labels", "annotations"):
                        if o.metadata.get(part):
                            meta.setdefault(part, {}).update(o.metadata[part])
                if o.spec is not None:
                    pod.setdefault("spec", {}).update(o.spec.to_dict())

    def describe(self) -> str:
        """What the overrides set, for the local backend's warning."""
        fields = sorted({f for o in self.overrides if o.spec for f in o.spec.set_fields()})
        return f"PodTemplateOverrides({', '.join(fields) or 'metadata'})"


@dataclass
class RuntimePatch(_Option):
    """A raw `spec.runtimePatches` entry (parity with the Kubeflow SDK 0.5)."""

    training_runtime_spec: dict[str, Any]
    manager: str = "trainer.kubeflow.org/kubeflow-sdk"
    backends: ClassVar[frozenset[str]] = frozenset({KUBERNETES})
    placement: ClassVar[bool] = True

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        if not self._check_backend(backend):
            return
        patches = job_spec.setdefault("spec", {}).setdefault("runtimePatches", [])
        if any(p.get("manager") == self.manager for p in patches):
            raise OptionError(
                f"Two runtime patches have manager {self.manager!r}; runtimePatches is a list "
                "keyed by manager. Merge them into one RuntimePatch or give another manager."
            )
        if len(patches) >= 16:
            raise OptionError("A TrainJob holds at most 16 runtime patches.")
        patches.append({"manager": self.manager, "trainingRuntimeSpec": self.training_runtime_spec})


@dataclass
class PodSecurity(_Option):
    """Make every pod of the job pass a namespace's Pod Security level (`restricted`).

    Sets, through kf-jupyter's runtime patch, on every replicated job of the runtime: the pod's
    `runAsNonRoot: true`, `runAsUser` (`run_as_user`, 1000 by default) and
    `seccompProfile: RuntimeDefault`, and on each of its containers and init containers
    `allowPrivilegeEscalation: false` and `capabilities: {drop: [ALL]}`. The command then runs
    as a non-root user whose $HOME may not be writable (it works in a writable temporary
    folder). Kubernetes backend only (skipped locally with a warning).
    """

    level: str = "restricted"
    run_as_user: int = 1000
    backends: ClassVar[frozenset[str]] = frozenset({KUBERNETES})
    placement: ClassVar[bool] = True
    unique: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.level != "restricted":
            raise OptionError(
                f"PodSecurity takes level 'restricted', got {self.level!r}: the default "
                "runtimes' pods already pass 'baseline', and 'privileged' asks nothing."
            )
        if (
            isinstance(self.run_as_user, bool)
            or not isinstance(self.run_as_user, int)
            or self.run_as_user <= 0
        ):
            raise OptionError(
                f"PodSecurity(run_as_user=...) takes a non-root user id (an int > 0), got "
                f"{self.run_as_user!r}."
            )

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        # the fields go on every replicated job of the runtime: build_trainjob calls `apply`
        # with it once every option has run
        self._check_backend(backend)

    def apply(self, job_spec: dict[str, Any], runtime: Any) -> None:
        """Write the fields into kf-jupyter's runtime patch for each of `runtime`'s replicated
        jobs (merged with what other options put there)."""
        from .pod_security import restricted_patch

        template = _runtime_patch(job_spec)
        jobs = template.setdefault("spec", {}).setdefault("replicatedJobs", [])
        targets = [
            (rj.name, [c for c in rj.containers if c not in rj.init_containers],
             list(rj.init_containers))
            for rj in runtime.replicated_jobs
        ]  # fmt: skip
        if not targets:  # the template is unknown (an offline dry run): the trainer's jobs
            names = dict.fromkeys(["node", getattr(runtime, "trainer_job", "node") or "node"])
            targets = [(n, [TRAINER_CONTAINER], []) for n in names]
        for name, containers, inits in targets:
            entry = next((j for j in jobs if j.get("name") == name), None)
            if entry is None:
                entry = {"name": name, "template": {"spec": {"template": {}}}}
                jobs.append(entry)
            pod = entry["template"]["spec"]["template"].setdefault("spec", {})
            patch = restricted_patch(containers, inits, self.run_as_user)
            pod.setdefault("securityContext", {}).update(patch["securityContext"])
            for key in ("initContainers", "containers"):
                have = pod.setdefault(key, []) if patch.get(key) else pod.get(key, [])
                for c in patch.get(key) or []:
                    mine = next((x for x in have if x.get("name") == c["name"]), None)
                    if mine is None:
                        have.append(c)
                    else:
                        mine.setdefault("securityContext", {}).update(c["securityContext"])


def _check_argv(what: str, items: Any) -> list[str]:
    if isinstance(items, str) or not isinstance(items, list | tuple):
        raise OptionError(f"{what} takes a list of strings, for example ['python', 'train.py'].")
    if not all(isinstance(a, str) for a in items) or any("\x00" in a for a in items):
        raise OptionError(f"{what} takes strings without NUL bytes only.")
    return list(items)


@dataclass
class TrainerCommand(_Option):
    """Replace the trainer container's command (only for a trainer without a function)."""

    command: list[str]
    unique: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.command = _check_argv("TrainerCommand", self.command)

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        self._check_backend(backend)
        if getattr(trainer, "func", None) is not None:
            raise OptionError(
                "TrainerCommand replaces the command that runs your function, so it cannot be "
                "used with a trainer that has func=. Drop func to run your own command, or drop "
                "TrainerCommand."
            )
        job_spec.setdefault("spec", {}).setdefault("trainer", {})["command"] = self.command


@dataclass
class TrainerArgs(_Option):
    """Set the trainer container's args (only for a trainer without a function)."""

    args: list[str]
    unique: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.args = _check_argv("TrainerArgs", self.args)

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        self._check_backend(backend)
        if getattr(trainer, "func", None) is not None:
            raise OptionError(
                "TrainerArgs would be appended to the command that runs your function; pass "
                "values to the function with func_args instead, or drop func."
            )
        job_spec.setdefault("spec", {}).setdefault("trainer", {})["args"] = self.args


@dataclass
class ActiveDeadlineSeconds(_Option):
    """Fail the job when it runs longer than this (locally: its processes are stopped)."""

    seconds: int
    unique: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, int) or self.seconds < 1:
            raise OptionError(
                f"ActiveDeadlineSeconds takes a whole number of seconds ≥ 1, got {self.seconds!r}."
            )

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        self._check_backend(backend)
        job_spec.setdefault("spec", {})["activeDeadlineSeconds"] = self.seconds


@dataclass
class Queue(_Option):
    """Submit to a Kueue LocalQueue: the `kueue.x-k8s.io/queue-name` label (placement-only
    locally). Kueue then holds the job suspended until it admits it, and unsuspends it."""

    name: str
    backends: ClassVar[frozenset[str]] = frozenset({KUBERNETES})
    placement: ClassVar[bool] = True
    unique: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise OptionError(f"Queue takes the name of a Kueue LocalQueue, got {self.name!r}.")
        validate_label_value(QUEUE_LABEL, self.name)

    def describe(self) -> str:
        """`Queue(team-a)`, for the local backend's warning."""
        return f"Queue({self.name})"

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        if self._check_backend(backend):
            job_spec.setdefault("metadata", {}).setdefault("labels", {})[QUEUE_LABEL] = self.name


@dataclass
class ManagedBy(_Option):
    """`spec.managedBy`: which controller runs the TrainJob (`kueue.x-k8s.io/multikueue` lets
    MultiKueue dispatch it to a worker cluster); immutable once created. Placement-only locally."""

    manager: str
    backends: ClassVar[frozenset[str]] = frozenset({KUBERNETES})
    placement: ClassVar[bool] = True
    unique: ClassVar[bool] = True

    def __post_init__(self) -> None:
        allowed = (TRAINJOB_MANAGER, MULTIKUEUE_MANAGER)
        if self.manager not in allowed:
            raise OptionError(
                f"ManagedBy takes {' or '.join(repr(a) for a in allowed)} (what the TrainJob "
                f"API accepts), got {self.manager!r}."
            )

    def describe(self) -> str:
        """`ManagedBy(kueue.x-k8s.io/multikueue)`, for the local backend's warning."""
        return f"ManagedBy({self.manager})"

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        if self._check_backend(backend):
            job_spec.setdefault("spec", {})["managedBy"] = self.manager


@dataclass
class Warm(_Option):
    """Local backend: start this job's ranks from the warm pool (the default) or cold (False).

    Written as the annotation `kf-jupyter.io/warm`; a cluster ignores it.
    """

    enabled: bool = True
    unique: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise OptionError(f"Warm takes True or False, got {self.enabled!r}.")

    def __call__(self, job_spec: dict[str, Any], trainer: Any, backend: Any) -> None:
        meta = job_spec.setdefault("metadata", {})
        meta.setdefault("annotations", {})["kf-jupyter.io/warm"] = (
            "true" if self.enabled else "false"
        )


def describe_option(option: Any) -> str:
    """A short name for an option, for warnings."""
    describe = getattr(option, "describe", None)
    return describe() if callable(describe) else type(option).__name__


def apply_options(
    job_spec: dict[str, Any], options: Iterable[Any] | None, trainer: Any, backend: Any
) -> list[str]:
    """Apply options in order; return the placement-only ones the backend skipped.

    Raises OptionError for a non-callable option, two options of a kind that may appear once
    (two `Name`s), or an option that does not fit the trainer or the backend.
    """
    opts = list(options or [])
    seen: dict[type, int] = {}
    for o in opts:
        if not callable(o):
            raise OptionError(
                f"Option {o!r} is not callable; an option is a callable "
                "option(job_spec, trainer, backend), like Name('my-job')."
            )
        if getattr(o, "unique", False):
            seen[type(o)] = seen.get(type(o), 0) + 1
            if seen[type(o)] == 2:
                raise OptionError(
                    f"Two {type(o).__name__} options were given; it may appear once. Keep one."
                )
    skipped: list[str] = []
    for o in opts:
        if isinstance(o, _Option) and o.placement and not o.supports(backend):
            skipped.append(describe_option(o))
            continue
        o(job_spec, trainer, backend)
    if skipped:
        log.warning(
            "Placement-only options skipped on the %s backend: %s",
            backend_name(backend),
            ", ".join(skipped),
        )
    return skipped


__all__ = [
    "ActiveDeadlineSeconds",
    "Annotations",
    "ContainerOverride",
    "Labels",
    "ManagedBy",
    "Name",
    "Option",
    "PodSecurity",
    "PodSpecOverride",
    "PodTemplateOverride",
    "PodTemplateOverrides",
    "Queue",
    "RuntimePatch",
    "SpecAnnotations",
    "SpecLabels",
    "TrainerArgs",
    "TrainerCommand",
    "Warm",
    "apply_options",
]
