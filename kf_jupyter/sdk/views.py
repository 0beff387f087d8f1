"""kf-jupyter's runtimes, jobs and events as the SDK's types (pure functions)."""

from __future__ import annotations

from ..constants import RUNTIME_KIND
from ..runtimes import Runtime as KFRuntime
from ..types import COMPLETE, CREATED, FAILED, RUNNING
from ..types import Event as KFEvent
from ..types import TrainJob as KFTrainJob
from .types import (
    UNKNOWN,
    Event,
    Runtime,
    RuntimeKind,
    RuntimeTrainer,
    Step,
    TrainerType,
    TrainJob,
)

LOCAL_IMAGE = "local"

_COMMANDS: dict[str, tuple[str, ...]] = {
    "torch": ("torchrun",),
    "mpi": ("mpirun", "--hostfile", "/etc/mpi/hostfile"),
}


def to_sdk_runtime(rt: KFRuntime, backend: str) -> Runtime:
    """The SDK view of a runtime (kf-jupyter's own stays in `.source`)."""
    builtin = rt.framework == "torchtune"
    trainer = RuntimeTrainer(
        trainer_type=TrainerType.BUILTIN_TRAINER if builtin else TrainerType.CUSTOM_TRAINER,
        framework=rt.framework,
        image=rt.image or (LOCAL_IMAGE if backend == "local" else ""),
        num_nodes=rt.num_nodes or 1,
        device_count=str(rt.num_proc_per_node * (rt.num_nodes or 1))
        if rt.ml_policy == "mpi" and rt.num_proc_per_node
        else UNKNOWN,
    )
    if builtin:
        trainer.set_command(("tune", "run"))
    else:
        trainer.set_command(_COMMANDS.get(rt.ml_policy, ("python3",)))
    namespaced = rt.kind == RUNTIME_KIND
    kind = RuntimeKind.TRAINING_RUNTIME if namespaced else RuntimeKind.CLUSTER_TRAINING_RUNTIME
    return Runtime(name=rt.name, trainer=trainer, kind=kind, source=rt)


def placeholder_runtime(name: str, framework: str, backend: str) -> Runtime:
    """The SDK view of a job's runtime that no longer exists (deleted since)."""
    return to_sdk_runtime(KFRuntime(name=name, framework=framework or "unknown"), backend)


# -- jobs out -----------------------------------------------------------------------------------

_LOCAL_PHASE = {CREATED: "Pending", RUNNING: "Running", COMPLETE: "Succeeded", FAILED: "Failed"}


def sdk_step_name(source: str, policy: str) -> str:
    """The SDK's name of a step: MPI jobs count the launcher as `node-0` and shift the nodes."""
    if policy != "mpi":
        return source
    if source == "launcher":
        return "node-0"
    if source.startswith("node-") and source[5:].isdigit():
        return f"node-{int(source[5:]) + 1}"
    return source


def to_sdk_job(job: KFTrainJob, runtime: Runtime) -> TrainJob:
    """The SDK view of a job: steps named and phased as the SDK names them on a cluster."""
    policy = getattr(runtime.source, "ml_policy", "") or ""
    count = str(job.num_proc_per_node) if job.num_proc_per_node else UNKNOWN
    steps = []
    for s in job.steps:
        status = _LOCAL_PHASE.get(s.status, s.status) if job.backend == "local" else s.status
        steps.append(
            Step(
                name=sdk_step_name(s.name, policy),
                status=status,
                pod_name=getattr(s, "pod_name", None) or s.name,
                device=s.device or UNKNOWN,
                device_count=getattr(s, "device_count", None) or count,
            )
        )
    steps.sort(key=lambda st: _step_order(st.name))
    return TrainJob(
        name=job.name,
        runtime=runtime,
        steps=steps,
        num_nodes=job.num_nodes,
        creation_timestamp=job.creation_time,
        status=job.status,
        reason=job.reason,
        message=job.message,
        trainer_status=getattr(job, "trainer_status", None),
    )


def _step_order(name: str) -> tuple[int, int, str]:
    if name.startswith("node-") and name[5:].isdigit():
        return (1, int(name[5:]), name)
    return (0, 0, name)


def to_sdk_event(ev: KFEvent, job: str) -> Event:
    """The SDK view of an event (`Kind/name` split; locally the TrainJob or a Process)."""
    kind, sep, name = (ev.involved_object or "").partition("/")
    if not sep:  # a local event: about the job, or one of its processes (node-0, launcher)
        name = ev.involved_object or job
        kind = "TrainJob" if name == job else "Process"
    return Event(
        involved_object_kind=kind,
        involved_object_name=name,
        message=ev.message,
        reason=ev.reason,
        event_time=ev.time,
    )
