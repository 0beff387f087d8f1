"""TrainJobs: submit (and dry run), list, get, delete, and wait for a status."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from ... import pod_security
from ...build import build_trainjob, describe_processes, fit_runtime_patches, job_shape
from ...config import RuntimeConfig, mask_object, mask_secrets
from ...constants import (
    FRAMEWORK_ANNOTATION,
    GROUP,
    JOBSET_NAME_LABEL,
    LAUNCHER_JOB,
    MULTIKUEUE_MANAGER,
    QUEUE_LABEL,
    STEP_NAMES,
    SUSPENDED_BY_USER_ANNOTATION,
    TRAINJOB_PLURAL,
    VERSION,
)
from ...errors import (
    JobFailedError,
    JobNotFoundError,
    JobStateError,
    KFJupyterError,
    NamespaceNotFoundError,
    ValidationError,
    WaitTimeoutError,
)
from ...failure import failure_from_pods, failure_text, short_message
from ...progress import parse_time, parse_trainer_status
from ...runtimes import Runtime
from ...trainers import BaseTrainer
from ...types import COMPLETE, CREATED, FAILED, RUNNING, STATUSES, TERMINAL, TrainJob
from ..base import StatusCallback, resolve_runtime_arg
from . import workspace
from .api import REQUEST_TIMEOUT
from .errors import Where
from .pods import POD_SELECTOR, newest_pods, pod_selector, pod_step
from .restarts import (
    FAILED_ANNOTATION,
    STOP_ANNOTATION,
    failed_annotation,
    failure_records,
    first_failed_run,
    mark_stop_on_failure,
    restart_note,
    stopped_failure,
    stopped_record,
)
from .runtimes import RuntimesMixin
from .status import (
    DEADLINE_EXCEEDED,
    conditions,
    job_status,
    reconcile_failure,
    will_not_start,
)
from .trainer_packages import with_trainer_packages
from .waiting import pods_phase
from .watch import SYNC

log = logging.getLogger("kf_jupyter.kubernetes")


def suspend_patch(suspend: bool) -> dict[str, Any]:
    """The merge patch `suspend_job` / `resume_job` send (spec.suspend and our annotation)."""
    return {
        "metadata": {"annotations": {SUSPENDED_BY_USER_ANNOTATION: "true" if suspend else None}},
        "spec": {"suspend": suspend},
    }


def _rjob_names(rt: Runtime | None) -> tuple[str, ...]:
    """The replicated jobs whose Jobs' events may be about a TrainJob on runtime `rt`."""
    return tuple(rj.name for rj in rt.replicated_jobs) if rt and rt.replicated_jobs else STEP_NAMES


def _pods_missing(job: TrainJob) -> bool:
    """A Created job with no reason yet and fewer trainer pods than nodes: pods that do not exist
    (a failed reconcile, a refused pod) are explained only by events."""
    if job.status != CREATED or job.reason:
        return False
    trainers = [s for s in job.steps if s.name == LAUNCHER_JOB or s.name.startswith("node-")]
    return len(trainers) < max(1, job.num_nodes)


class JobsMixin(RuntimesMixin):
    """The TrainJob calls of the backend protocol."""

    # -- submit -----------------------------------------------------------------------------
    def dry_run(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> dict[str, Any]:
        """The TrainJob `train` would create (runtime resolved on the cluster), creating nothing,
        and how many processes each node runs, and why."""
        rt = resolve_runtime_arg(self, trainer, runtime)
        runtime_config = with_trainer_packages(trainer, runtime_config)
        job = build_trainjob(trainer, rt, runtime_config, options, backend=self)
        mark_stop_on_failure(job, trainer)
        carrier = workspace.prepare(job, trainer, runtime_config, os.getcwd())
        fit_runtime_patches(job, kueue=self._serves_kueue)
        shape = job_shape(trainer, rt, job["metadata"]["name"])
        labels = self._namespace_labels()
        refused = pod_security.refusal(job, rt, labels, self.namespace)
        enforced = pod_security.enforced_level(labels)
        # A preview is printed and shown: credentials in index URLs are masked (train() sends
        # the real ones).
        return mask_object(
            {"backend": self.name, "namespace": self.namespace, "trainjob": job}
            | {"world": describe_processes(shape, trainer.policy)}
            | (carrier.preview() if carrier else {})
            | (
                {"pod_security": {"level": ":".join(enforced), "refused": refused}}
                if enforced
                else {}
            )
        )

    def _namespace_labels(self) -> dict[str, str] | None:
        """The namespace's labels (its Pod Security level), None when they cannot be read (a
        user without cluster-scoped `get namespaces` is common: then nothing is checked)."""
        try:
            ns = self.core.read_namespace(
                self.namespace, _request_timeout=self.config.request_timeout or REQUEST_TIMEOUT
            )
        except Exception:
            return None
        return dict(ns.metadata.labels or {})

    def _check_pod_security(self, job: dict[str, Any], rt: Runtime) -> None:
        """Refuse, before submitting, a job whose pods the namespace's Pod Security level
        would refuse one by one (the TrainJob would stay Created with only Job events)."""
        refused = pod_security.refusal(job, rt, self._namespace_labels(), self.namespace)
        if refused:
            raise ValidationError(refused)

    def train(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> str:
        """Create the TrainJob; return its name."""
        rt = resolve_runtime_arg(self, trainer, runtime)
        runtime_config = with_trainer_packages(trainer, runtime_config)
        job = build_trainjob(trainer, rt, runtime_config, options, backend=self)
        mark_stop_on_failure(job, trainer)
        carrier = workspace.prepare(job, trainer, runtime_config, os.getcwd())
        fit_runtime_patches(job, kueue=self._serves_kueue)
        self._check_pod_security(job, rt)
        name = job["metadata"]["name"]
        created = self._json(
            Where("create", TRAINJOB_PLURAL, self.namespace, name),
            self.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAINJOB_PLURAL,
            job,
        )
        workspace.ship(self, created, carrier)
        log.info("created TrainJob %s/%s", self.namespace, name)
        return str(name)

    # -- jobs -------------------------------------------------------------------------------
    def _to_trainjob(
        self,
        obj: dict[str, Any],
        pods: list[dict[str, Any]] | None,
        runtimes: dict[tuple[str, str], Runtime],
        events: list[dict[str, Any]] | None = None,
    ) -> TrainJob:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        trainer = spec.get("trainer") or {}
        rt = self._runtime_of(obj, runtimes)
        num_nodes = int(trainer.get("numNodes") or (rt.num_nodes if rt else 1) or 1)
        nproc_raw = trainer.get("numProcPerNode")
        nproc: int | None
        try:
            nproc = int(nproc_raw) if nproc_raw is not None else None
        except (TypeError, ValueError):
            nproc = None
        if nproc is None and rt is not None:
            nproc = rt.num_proc_per_node
        framework = (meta.get("annotations") or {}).get(FRAMEWORK_ANNOTATION) or (
            rt.framework if rt else "unknown"
        )
        chosen = newest_pods(pods) if pods is not None else None
        status, reason, message = job_status(obj, chosen, num_nodes)
        if status == CREATED and not reason and events:
            found = reconcile_failure(obj, events, _rjob_names(rt))
            reason, message = found or (reason, message)
        failure = None
        if status == FAILED:  # the stop record first: the pods may be gone, or a later run's
            failure = stopped_failure(obj) or failure_records(chosen) or failure_from_pods(chosen)
        elif status in (CREATED, RUNNING) and chosen:
            note = restart_note(chosen)  # restarted in place: the pod alone says Running
            if note:
                cause = failure_records(chosen)
                reason = reason or "Restarting"
                if cause is not None:
                    note += (
                        f": {cause.source} failed: {cause.exc_type}: {short_message(cause.message)}"
                    )
                message = note
        if spec.get("managedBy") == MULTIKUEUE_MANAGER and status == CREATED and not chosen:
            reason = "MultiKueue"
            message = (
                f"{message + ' ' if message else ''}MultiKueue runs this job on a worker cluster: "
                "its pods and logs are there, not on this cluster, which shows only the status "
                "Kueue copies back."
            )
        if status == FAILED and reason == DEADLINE_EXCEEDED:
            message = (
                f"The job ran past its deadline (activeDeadlineSeconds="
                f"{spec.get('activeDeadlineSeconds')}): the Trainer stopped it and deleted its "
                "pods, so their logs are gone from the cluster; the output shown while it ran is "
                "all there is. Give it more time with ActiveDeadlineSeconds(...)."
            )
        if failure is not None:
            message = f"{failure_text(failure)}\n({message or reason})"
        completion = None
        if status in TERMINAL:
            cond = conditions(obj).get(status) or {}
            completion = parse_time(
                cond.get("lastTransitionTime") or (stopped_record(obj) or {}).get("time")
            )
        return TrainJob(
            name=str(meta.get("name", "")),
            status=status,
            backend=self.name,
            runtime=str((spec.get("runtimeRef") or {}).get("name", "")),
            framework=str(framework),
            num_nodes=num_nodes,
            num_proc_per_node=nproc,
            reason=reason,
            message=mask_secrets(message),
            creation_time=parse_time(meta.get("creationTimestamp")),
            completion_time=completion,
            namespace=str(meta.get("namespace") or self.namespace),
            steps=[pod_step(p) for p in chosen or []],
            labels=dict(meta.get("labels") or {}),
            trainer_status=parse_trainer_status((obj.get("status") or {}).get("trainerStatus")),
            failure=failure,
            phase=pods_phase(chosen)
            if status in (CREATED, RUNNING)
            and chosen is not None
            and spec.get("managedBy") != MULTIKUEUE_MANAGER
            else "",
        )

    def _check_namespace(self) -> None:
        """After an empty list: say so plainly if the namespace does not exist."""
        try:
            self.core.read_namespace(
                self.namespace, _request_timeout=self.config.request_timeout or REQUEST_TIMEOUT
            )
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                raise NamespaceNotFoundError(
                    f"Namespace {self.namespace!r} does not exist on {self.host}. Create it, or "
                    "pass an existing one with KubernetesBackendConfig(namespace=...)."
                ) from None
            # 403 (no cluster-scoped read) or anything else: the empty list stands.

    def list_jobs(self) -> list[TrainJob]:
        """Every TrainJob of the namespace: one TrainJob list and one pod list, whatever the count."""
        items = self._list_trainjobs().get("items") or []
        if not items:
            self._check_namespace()
            return []
        pods_by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in self._list_pods(POD_SELECTOR):
            job = (pod.get("metadata", {}).get("labels") or {}).get(JOBSET_NAME_LABEL)
            if job:
                pods_by_job.setdefault(job, []).append(pod)
        runtimes = self._cached_runtimes() if any(map(self._needs_runtime, items)) else {}
        jobs = [
            self._to_trainjob(obj, pods_by_job.get(obj["metadata"]["name"], []), runtimes)
            for obj in items
        ]
        if any(_pods_missing(j) for j in jobs):
            # a job whose pods do not exist may never start: the Trainer (a failed reconcile)
            # and the Job controller (a refused pod) say why only in events
            events = self.trainjob_warnings()
            jobs = [
                self._to_trainjob(
                    obj, pods_by_job.get(obj["metadata"]["name"], []), runtimes, events
                )
                if _pods_missing(j)
                else j
                for obj, j in zip(items, jobs, strict=True)
            ]
        jobs.sort(key=lambda j: (j.creation_time is None, j.creation_time), reverse=True)
        return jobs

    def get_job(self, name: str) -> TrainJob:
        """One TrainJob with its steps (newest pod per replicated job and index)."""
        obj = self._get_trainjob(name)
        pods = self._list_pods(pod_selector(name))
        # a reader too stops a job at its failed run (a sweep's driver polls get_job)
        obj = self._stop_if_failed(obj, pods)
        runtimes = self._cached_runtimes() if self._needs_runtime(obj) else {}
        job = self._to_trainjob(obj, pods, runtimes)
        if _pods_missing(job):
            job = self._to_trainjob(obj, pods, runtimes, self.trainjob_warnings(name))
        return job

    def delete_job(self, name: str) -> None:
        """Delete the TrainJob; foreground propagation removes its JobSet and pods first."""
        self._json(
            Where("delete", TRAINJOB_PLURAL, self.namespace, name),
            self.custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAINJOB_PLURAL,
            name,
            propagation_policy="Foreground",
        )

    # -- suspend / resume -------------------------------------------------------------------
    def suspend_job(self, name: str) -> None:
        """Set the TrainJob's `spec.suspend` (the Trainer stops its pods and keeps the job)."""
        self._set_suspend(name, True)

    def resume_job(self, name: str) -> None:
        """Clear `spec.suspend` of a job suspended with `suspend_job` (its pods are recreated)."""
        self._set_suspend(name, False)

    def _set_suspend(self, name: str, suspend: bool) -> None:
        obj = self._get_trainjob(name)
        verb = "suspended" if suspend else "resumed"
        status = job_status(obj, None, 1)[0]
        if status in TERMINAL:
            raise JobStateError(
                f"TrainJob {name!r} is {status}, so it cannot be {verb}: only a job that has not "
                "finished can. Run it again instead."
            )
        meta = obj.get("metadata") or {}
        by_user = (meta.get("annotations") or {}).get(SUSPENDED_BY_USER_ANNOTATION) == "true"
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if suspend and queue and not by_user:
            raise JobStateError(
                f"TrainJob {name!r} runs under Kueue (queue {queue!r}): Kueue resumes a job it "
                "has admitted when anyone else suspends it, so suspend_job would not hold. To "
                "stop it and keep it, deactivate its Kueue Workload (kubectl patch workloads."
                'kueue.x-k8s.io <workload> --type=merge -p \'{"spec":{"active":false}}\'), '
                f"or delete it with client.delete_job({name!r})."
            )
        if not suspend and queue and not by_user and (obj.get("spec") or {}).get("suspend"):
            raise JobStateError(
                f"TrainJob {name!r} waits in Kueue queue {queue!r}: Kueue resumes it when it "
                "admits it. Look at the queue with kubectl get localqueue, workloads."
            )
        patch = suspend_patch(suspend)
        self._patch_trainjob(name, patch)
        log.info("%s TrainJob %s/%s", verb, self.namespace, name)

    def _patch_trainjob(self, name: str, patch: dict[str, Any]) -> Any:
        """Merge-patch TrainJob `name` in this namespace; the object the API server returns."""
        return self._json(
            Where("patch", TRAINJOB_PLURAL, self.namespace, name),
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            TRAINJOB_PLURAL,
            name,
            patch,
        )

    # -- a failed run when no restarts were asked (restarts.py) --------------------------------
    def _keep_logs(self, obj: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        """Save the pods' logs before they are deleted (the logs mixin does)."""

    def _stop_at_failure(
        self, obj: dict[str, Any], source: str, run: dict[str, Any], pods: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """What a careful user does by hand when a rank fails and no restarts were wanted: keep
        the logs, record the failed run on the TrainJob, and suspend it (its pods are deleted,
        so the kubelet does not run the function again). A job under Kueue is not suspended
        (Kueue resumes a suspended job it admitted): its record alone makes it Failed here."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        self._keep_logs(obj, pods)
        patch: dict[str, Any] = {
            "metadata": {"annotations": {FAILED_ANNOTATION: failed_annotation(source, run)}}
        }
        if not (meta.get("labels") or {}).get(QUEUE_LABEL):
            patch["spec"] = {"suspend": True}
        patched = self._patch_trainjob(name, patch)
        log.info("stopped TrainJob %s/%s: %s failed", self.namespace, name, source)
        return patched

    def _stop_if_failed(self, obj: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, Any]:
        """`obj`, stopped first when it asks to be at a failed run and its pods show one."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if annotations.get(STOP_ANNOTATION) != "true" or FAILED_ANNOTATION in annotations:
            return obj
        if job_status(obj, None, 1)[0] in TERMINAL:
            return obj
        found = first_failed_run(newest_pods(pods))
        if found is None:
            return obj
        try:
            return self._stop_at_failure(obj, found[0], found[1], pods)
        except KFJupyterError as exc:
            log.warning("stopping %s at its failed run: %s", obj["metadata"].get("name"), exc)
            return obj

    def _watch_for_failed_run(self, obj: dict[str, Any], deadline: float) -> Any:
        """A thread that watches the job's pods and stops the job at its first failed run;
        returns the pod watch (to close)."""
        name = str((obj.get("metadata") or {}).get("name"))
        pods_watch = self.pod_watch(pod_selector(name), deadline)

        def follow() -> None:
            seen: dict[str, dict[str, Any]] = {}
            try:
                for etype, payload in pods_watch:
                    items = payload if etype == SYNC else [payload]
                    if etype == SYNC:
                        seen.clear()
                    for pod in items:
                        uid = str((pod.get("metadata") or {}).get("uid"))
                        if etype == "DELETED":
                            seen.pop(uid, None)
                        else:
                            seen[uid] = pod
                    found = first_failed_run(list(seen.values()))
                    if found is not None:
                        fresh = self._get_trainjob(name)  # another reader may have stopped it
                        if FAILED_ANNOTATION not in (fresh["metadata"].get("annotations") or {}):
                            self._stop_at_failure(fresh, found[0], found[1], list(seen.values()))
                        return
            except KFJupyterError as exc:
                log.warning("watching the pods of %s for a failed run: %s", name, exc)

        threading.Thread(target=follow, name=f"kf-failed-run-{name}", daemon=True).start()
        return pods_watch

    # -- waiting ----------------------------------------------------------------------------
    def wait_for_job_status(
        self,
        name: str,
        status: set[str] | frozenset[str] = frozenset({COMPLETE}),
        timeout: float = 600,
        callbacks: list[StatusCallback] | None = None,
    ) -> TrainJob:
        """Block until the job reaches one of `status`, following a watch (it never polls).

        Requests: one list and one watch (more only if the watch breaks or expires), and one
        pod list at the end for the steps of the returned job; while the job is Created, one
        list and one watch of its events too (the Trainer reports a failed reconcile only there:
        such an event ends the wait with `JobFailedError`). Callbacks run on each change of
        status (the jobs they get carry no steps; the returned one does).
        """
        wanted = set(status)
        if not wanted or not wanted <= set(STATUSES):
            raise ValidationError(
                f"status must be a non-empty subset of {list(STATUSES)}, got {sorted(wanted)}."
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValidationError(f"timeout must be a number of seconds > 0, got {timeout!r}.")
        deadline = time.monotonic() + timeout
        runtimes: dict[tuple[str, str], Runtime] = {}
        last: TrainJob | None = None
        watch = self.trainjob_watch(name, deadline)
        events = self.trainjob_event_watch(name, deadline)
        stuck: list[tuple[str, str]] = []
        follower: threading.Thread | None = None
        pods_watch: Any = None  # the stop at a failed run (restarts.py)

        def follow_events(obj: dict[str, Any]) -> None:
            """The Trainer's reconcile failures and the Job controller's Pod Security refusals
            come only as events, and neither goes away by itself: stop the wait on one."""
            rjobs = _rjob_names(self._runtime_of(obj, runtimes))
            try:
                for etype, payload in events:
                    found = reconcile_failure(obj, payload if etype == SYNC else [payload], rjobs)
                    if found is not None and will_not_start(*found):
                        stuck.append(found)
                        watch.close()
                        return
            except KFJupyterError:
                pass  # the wait itself reports what it meets

        try:
            for etype, payload in watch:
                if etype == SYNC:
                    if not payload:
                        raise JobNotFoundError(
                            f"No TrainJob named {name!r} in namespace {self.namespace!r}. List "
                            "the jobs with client.list_jobs() and check the name."
                        )
                    obj = payload[0]
                elif etype == "DELETED":
                    raise JobNotFoundError(
                        f"TrainJob {name!r} was deleted while waiting for it to become "
                        f"{'/'.join(sorted(wanted))}."
                    )
                else:
                    obj = payload
                if not runtimes and self._needs_runtime(obj):
                    runtimes = self._cached_runtimes()
                job = self._to_trainjob(obj, None, runtimes)
                annotations = (obj.get("metadata") or {}).get("annotations") or {}
                if (
                    pods_watch is None
                    and annotations.get(STOP_ANNOTATION) == "true"
                    and job.status not in TERMINAL
                ):
                    pods_watch = self._watch_for_failed_run(obj, deadline)
                # while it has not started, follow its events too (a list and a watch)
                if follower is None and job.status == CREATED and CREATED not in wanted:
                    follower = threading.Thread(
                        target=follow_events, args=(obj,), name=f"kf-events-{name}", daemon=True
                    )
                    follower.start()
                elif follower is not None and job.status != CREATED:
                    events.close()
                if last is None or job.status != last.status:
                    for cb in callbacks or []:
                        cb(job)
                last = job
                if job.status == FAILED and FAILED not in wanted:
                    with contextlib.suppress(KFJupyterError):  # the pods hold the root cause
                        job = self._to_trainjob(obj, self._list_pods(pod_selector(name)), runtimes)
                    raise JobFailedError(
                        f"TrainJob {name!r} failed ({job.reason or 'Failed'}: "
                        f"{job.message or 'no message'}). Read its logs with "
                        f"client.get_job_logs({name!r}) and its events with "
                        f"client.get_job_events({name!r})."
                    )
                if job.status in wanted:
                    pods = self._list_pods(pod_selector(name))
                    return self._to_trainjob(obj, pods, runtimes)
        finally:
            watch.close()
            events.close()
            if pods_watch is not None:
                pods_watch.close()
        if stuck:
            reason, message = stuck[0]
            raise JobFailedError(
                f"TrainJob {name!r} will not start ({reason}): {message}. It stays Created on the "
                f"cluster: delete it with client.delete_job({name!r}) and submit again once the "
                "cause is fixed."
            )
        raise WaitTimeoutError(
            f"TrainJob {name!r} did not reach {'/'.join(sorted(wanted))} within {timeout:g} s "
            f"(last status: {last.status if last else 'unknown'}). Wait longer with timeout=..., "
            f"or look at client.get_job_events({name!r})."
        )
