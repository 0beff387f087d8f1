"""TEST STAND-IN for what a cluster does when a container of a JobSet's pod fails.

Read from the real sources:

- JobSet's defaulting webhook sets ``restartPolicy: OnFailure`` on every replicated job's pod
  template that has none (kubernetes-sigs/jobset v0.12.0 ``pkg/webhooks/jobset_webhook.go:
  124-126``); no default Trainer runtime sets ``restartPolicy`` or ``backoffLimit``, so the Job
  default ``backoffLimit: 6`` holds (kubernetes ``pkg/apis/batch/v1/defaults.go``).
- The kubelet restarts a failed container in the same pod: the first restart at once, then
  after a back-off that starts at 10 s and doubles up to 5 min, counted from the container's
  finish (``pkg/kubelet/kuberuntime/kuberuntime_manager.go`` doBackOff, ``flowcontrol.Backoff``;
  ``pkg/kubelet/kubelet.go`` backOffPeriod 10 s, MaxContainerBackOff 300 s). Meanwhile the
  container is ``waiting: CrashLoopBackOff`` with the failed run in ``lastState.terminated``;
  ``restartCount`` counts the restarts done. The pod stays phase Running.
- The Job controller fails an OnFailure Job once the restarts of its active pods add up to
  ``backoffLimit`` (``> 0`` when it is 0) (``pkg/controller/job/job_controller.go``
  pastBackoffLimitOnFailure) and deletes its active pods; the JobSet then fails (no failure
  policy: ``FailedJobs``) and deletes its other active Jobs (jobset v0.12.0
  ``pkg/controllers/jobset_controller.go:163-164``), whose pods the garbage collector removes.
  The pods, their logs and their termination messages are gone.
- ``GET .../log?previous=true`` reads ``lastState``'s container; a plain read reads the running
  container, else the terminated one, else ``lastState``'s (kubelet ``pkg/kubelet/
  kubelet_pods.go`` validateContainerLogStatus).

One knob, ``StandIn.backoff_scale`` (default 1): multiplies the back-off, so a test of the
whole give-up path need not wait five minutes.
"""

from __future__ import annotations

BACKOFF_INITIAL = 10.0  # kubelet backOffPeriod
BACKOFF_MAX = 300.0  # kubelet MaxContainerBackOff
JOB_BACKOFF_LIMIT = 6  # batch/v1 Job default
JOBSET_RESTART_POLICY = "OnFailure"  # jobset_webhook.go:124-126


def next_backoff(current: float) -> tuple[float, float]:
    """(how long to wait before this restart, the back-off after it): at once the first time,
    then the back-off in place (flowcontrol.Backoff.Next doubles it, up to 5 min)."""
    if not current:
        return 0.0, BACKOFF_INITIAL
    return current, min(current * 2, BACKOFF_MAX)


def past_backoff_limit(restarts: list[int], backoff_limit: int) -> bool:
    """pastBackoffLimitOnFailure: the restarts of a Job's active pods against its limit."""
    total = sum(restarts)
    return total > 0 if backoff_limit == 0 else total >= backoff_limit


def container_id(pod_name: str, attempt: int) -> str:
    """A container id per run of a pod's container (the runtime's would be a hash)."""
    return f"standin://{pod_name}-{attempt}"
