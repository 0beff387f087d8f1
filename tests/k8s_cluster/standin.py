"""TEST STAND-IN, not a product component: plays the Kubeflow Trainer controller, JobSet, the
garbage collector and one kubelet against a real API server, because none of them can run here.

Written from ``../shared/docs/kubeflow-facts.md`` only; it never imports kf_jupyter, because its
job is to check what kf_jupyter builds. For every new TrainJob (all namespaces) it resolves the
runtime, creates one Pod per node index (``<job>-node-0-<i>``, JobSet labels, ``nodeName`` =
``standin-node``) with the env the Trainer's EnforceMLPolicy plugins inject (torch ``PET_*``,
jax ``JAX_*``, xgboost ``DMLC_*``, MPI: a ``launcher`` pod with a hostfile and ``OMPI_MCA_*``, whose
ranks get their own pod's env: ``mpirun_standin.py``),
runs each pod's command as a local subprocess, reports pod phases and the TrainJob status
(``Complete``/``AllJobsCompleted`` or ``Failed``/``FailedJobs``, ``jobsStatus``), and serves
``/containerLogs/NS/POD/CONTAINER`` (``follow``, ``tailLines``) over HTTPS as a kubelet would, so
``GET .../pods/NAME/log`` goes through the real API server.

It also plays the Trainer's status server (facts doc "Progress") when the TrainJobStatus gate is
on (off by default, as in Trainer v2.3.0; ``trainer_plugins.FEATURE_GATES``): every
trainer container gets ``KUBEFLOW_TRAINER_SERVER_URL`` / ``_CA_CERT`` / ``_TOKEN``; a ``POST`` to
``/apis/trainer.kubeflow.org/v1alpha1/namespaces/NS/trainjobs/NAME/status`` with that job's bearer
token and ``{"trainerStatus": {...}}`` is written to the TrainJob's ``status.trainerStatus``
through the status subresource (so the real API server validates it against the CRD schema);
errors are ``metav1.Status`` JSON (403 token, 422 payload, 413 size, 404 path).

``spec.suspend`` (facts doc "Lifecycle"): a running TrainJob's pods are killed and
deleted, condition ``Suspended`` True / ``Suspended``; unsuspending sets it False / ``Resumed``
and creates new pods. The scheduler and kubelet parts also refuse GPU pods (the node has
none: ``Unschedulable`` / ``FailedScheduling``) and images on a ``.invalid`` registry
(``ErrImagePull``, then ``ImagePullBackOff``).

Volumes: the ``volumes`` / ``volumeMounts`` (container ``node``) of the TrainJob's runtimePatches
are put on the Pods, and configMap volumes are materialised as a kubelet would (a file per key,
``binaryData`` decoded; a missing ConfigMap keeps the pod Pending with ``FailedMount`` until it
exists); as garbage collector it also deletes the ConfigMaps a deleted TrainJob owns.

The one deliberate deviation (there is no cluster DNS): in the *process* environment, command
and args, the master host ``<job>-node-0-0.<job>`` becomes ``127.0.0.1`` and port 29500 becomes
a free port per job (``/etc/mpi/hostfile`` becomes a local file, all slots on ``localhost``; a volume's mountPath
becomes the folder its files were written to).
The Pod objects keep the real values.

Initializers (facts doc: replicated jobs ``dataset-initializer`` / ``model-initializer`` run
before ``node``): a TrainJob with ``spec.initializer`` gets a pod per entry
(``<job>-dataset-initializer-0-0``, container of the same name, ``STORAGE_URI`` in its env) that
prints what it "downloads"; the trainer pods are created only once all of them succeed (a failed
one fails the job). Test knob: while the file ``hold_initializers`` exists they keep running.

The JobSet: for each TrainJob it first creates, through the API server, the JobSet the Trainer
builds (``trainer_model.build_jobset``: runtime template, runtime patches merged strategically,
the trainer's image, command, env and resources, counts); the JobSet webhook (``admission.py``)
may refuse it, which is then only a ``TrainJobResourcesCreationFailed`` event; otherwise the pods
are made from its replicated jobs. Kueue is played for queued TrainJobs (``_kueue``) and
``managedBy: kueue.x-k8s.io/multikueue`` jobs are left alone, as the Trainer does.

``activeDeadlineSeconds``: when it runs out (from creation, or from the resume) the TrainJob
fails with ``DeadlineExceeded`` and its JobSet and pods are deleted, as the Trainer does.

Pods the API server refuses (the Pod Security webhook, ``pod_security.py``): no pod, a
``FailedCreate`` event on the Job a real cluster would have, retried with the Job controller's
back-off (``pod_creation.py``).

Restarts (``restarts.py``): pods get the JobSet webhook's ``restartPolicy: OnFailure``; a failed
container is restarted in its pod with the kubelet's back-off (``CrashLoopBackOff``,
``lastState``, ``restartCount``, ``previous=true`` logs) until its Job's ``backoffLimit``; then
the Job fails, its pods are deleted and the TrainJob fails (``FailedJobs``).

Ranks see their image's packages: a ``pytorch/pytorch`` pod's processes cannot import
``transformers``, ``accelerate`` or ``peft`` unless the pod pip-installed them
(``image_packages.py``).

Not modelled: pod deletion by users, log timestamps, a ``Never`` pod's replacement.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import datetime as dt
import functools
import http.server
import logging
import math
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from tests.k8s_cluster import (
    image_packages,
    mpirun_standin,
    reconcile_events,
    trainer_plugins,
    tune_standin,
)
from tests.k8s_cluster import restarts as crashloop
from tests.k8s_cluster.apiserver import free_port
from tests.k8s_cluster.pod_creation import create_pods
from tests.k8s_cluster.trainer_model import build_jobset

log = logging.getLogger("k8s-standin")
GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
NODE_NAME = "standin-node"
MASTER_PORT = 29500
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
PORT_ENV = {"PET_MASTER_PORT", "DMLC_TRACKER_PORT", "MASTER_PORT"}
# The Trainer's status server, as the TrainJobStatus plugin names it in the pods' env (facts doc).
STATUS_SERVICE = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
STATUS_MOUNT = "/var/run/secrets/kubeflow/trainer"
STATUS_MAX_BODY = 1 << 16
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Pod template fields the stand-in copies from the JobSet onto its pods (scheduling ones are
# recorded, not acted on: there is one node).
POD_FIELDS = ("nodeSelector", "tolerations", "serviceAccountName", "imagePullSecrets",
              "securityContext", "terminationGracePeriodSeconds")  # fmt: skip
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
KUEUE_MANAGER = "kueue.x-k8s.io/manager"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
T = TypeVar("T")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _ConfigError(Exception):
    """A pod's env cannot be resolved (kubelet: CreateContainerConfigError)."""


class _MountError(Exception):
    """A pod's volume cannot be mounted yet (kubelet: FailedMount, pod stays Pending)."""


@dataclass
class PodRun:
    namespace: str
    name: str
    rjob: str  # replicated job: node | launcher
    index: int
    body: dict[str, Any]
    cwd: Path
    argv: list[str]  # empty: nothing to run (MPI worker, which would run sshd)
    localize: Callable[[str], str]
    port: int  # the free port standing in for 29500
    proc: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    waiting: str | None = None  # CreateContainerConfigError message
    done: threading.Event = field(default_factory=threading.Event)
    # restarts in place (restarts.py): the pod's policy, its Job's limit, the kubelet's count,
    # its back-off, when the next run starts, the last run's end and its log
    restart_policy: str = "Never"
    backoff_limit: int = crashloop.JOB_BACKOFF_LIMIT
    restarts: int = 0
    backoff: float = 0.0
    restart_at: float | None = None
    last_state: dict[str, Any] | None = None
    last_log: Path | None = None
    ended_logs: set[Path] = field(default_factory=set)

    @property
    def container(self) -> str:
        return str(self.body["spec"]["containers"][0]["name"])

    @property
    def log_path(self) -> Path:
        """The log of the container's current (latest) run."""
        return self.cwd / (
            "container.log" if not self.restarts else f"container.{self.restarts}.log"
        )


@dataclass
class JobRun:
    namespace: str
    name: str
    uid: str
    pods: list[PodRun] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    last_status: dict[str, Any] | None = None
    deadline: float | None = None  # time.monotonic() when activeDeadlineSeconds runs out
    gave_up: bool = False  # a Job reached its backoffLimit (restarts.py)


class StandIn:
    """Trainer controller + JobSet + kubelet stand-in. ``start()`` / ``stop()``; one per cluster."""

    def __init__(self, kubeconfig: str, cert_file: str, key_file: str) -> None:
        self._api = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self._api)
        self.custom = client.CustomObjectsApi(self._api)
        self._cert = (cert_file, key_file)
        self.workdir = Path(tempfile.mkdtemp(prefix="kf-standin-"))
        self._jobs: dict[str, JobRun] = {}  # by TrainJob uid
        self._pods: dict[tuple[str, str], PodRun] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # the Trainer controller's retries and event recorder (reconcile_events.py)
        self._backoff = reconcile_events.Backoff()
        self._recorder = reconcile_events.EventSeriesRecorder(self._api)
        self._threads: list[threading.Thread] = []
        self._httpd: http.server.ThreadingHTTPServer | None = None
        self._watch_resp: Any = None
        self._bin_dir = str(Path(sys.prefix) / "bin")
        self._status_httpd: http.server.ThreadingHTTPServer | None = None
        self._status_tokens: dict[tuple[str, str], str] = {}  # (namespace, TrainJob) -> token
        # test knob: while this file exists, initializer pods keep running (see hold_initializers)
        self.hold_initializers = self.workdir / "hold-initializers"
        # test knob: the kubelet's restart back-off (10 s doubling to 5 min) times this
        self.backoff_scale = 1.0
        # Kueue: queues that admit nothing until kueue_release(queue); admitted TrainJob uids
        self.kueue_held: set[str] = set()
        self._admitted: set[str] = set()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> StandIn:
        self._httpd = _KubeletServer(self)
        self._spawn(self._httpd.serve_forever, "kubelet")
        self._register_node(self._httpd.server_address[1])
        self._status_httpd = _StatusServer(self)
        self._spawn(self._status_httpd.serve_forever, "status-server")
        self._spawn(self._watch_trainjobs, "trainjob-watch")
        return self

    def stop(self) -> None:
        self._stop.set()
        sock = getattr(getattr(self._watch_resp, "connection", None), "sock", None)
        if sock is not None:  # end the watch now (close() would wait for the reading thread)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.cancelled.set()
            self._kill(job)
        for job in jobs:
            if job.thread is not None:
                job.thread.join(10)
        for httpd in (self._httpd, self._status_httpd):
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()
        for t in self._threads:
            t.join(2)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _spawn(self, target: Callable[[], object], name: str) -> threading.Thread:
        t = threading.Thread(target=target, name=f"standin-{name}", daemon=True)
        t.start()
        self._threads.append(t)
        return t

    def _retry(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call the API, riding out an API server restart (5xx / connection errors) for 60 s."""
        deadline = time.monotonic() + 60
        kwargs.setdefault("_request_timeout", 30)
        while True:
            try:
                return fn(*args, **kwargs)
            except ApiException as e:
                if 0 < e.status < 500 and e.status != 429:
                    raise
                err: Exception = e
            except Exception as e:  # urllib3 connection errors while the server restarts
                err = e
                self._wait_ready()
            if time.monotonic() > deadline or self._stop.is_set():
                raise err
            time.sleep(0.3)

    def _wait_ready(self, timeout: float = 120.0) -> None:
        """Poll /readyz with short plain requests. A kubernetes-client request sent while the API
        server is starting can stall ~13 s (even with a request timeout); after /readyz it won't."""
        cfg = self._api.configuration
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        headers = {"Authorization": cfg.api_key.get("authorization", "")}
        req = urllib.request.Request(f"{cfg.host}/readyz", headers=headers)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._stop.is_set():
            try:
                with urllib.request.urlopen(req, timeout=1, context=ctx):
                    return
            except OSError:
                time.sleep(0.2)

    def _register_node(self, port: int) -> None:
        status = {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kf-jupyter test stand-in",
                    "lastHeartbeatTime": _now(),
                    "lastTransitionTime": _now(),
                }
            ],
        }
        body = {"metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}}}
        try:
            self._retry(self.core.create_node, {**body, "status": status})
        except ApiException as e:
            if e.status != 409:
                raise
        self._retry(self.core.patch_node_status, NODE_NAME, {"status": status})

    # -- TrainJob watch ----------------------------------------------------------------------
    def _watch_trainjobs(self) -> None:
        @functools.wraps(self.custom.list_cluster_custom_object)
        def list_and_keep(*args: Any, **kwargs: Any) -> Any:
            self._watch_resp = self.custom.list_cluster_custom_object(*args, **kwargs)
            return self._watch_resp  # kept so that stop() can close the stream

        while not self._stop.is_set():
            try:
                lst = self._retry(
                    self.custom.list_cluster_custom_object, GROUP, VERSION, "trainjobs"
                )
                log.debug("trainjob watch: listed %d", len(lst["items"]))
                self._resync(lst["items"])
                w = watch.Watch()
                for ev in w.stream(
                    list_and_keep,
                    GROUP,
                    VERSION,
                    "trainjobs",
                    resource_version=lst["metadata"]["resourceVersion"],
                    timeout_seconds=60,
                ):
                    if self._stop.is_set():
                        break
                    if ev["type"] == "ERROR":
                        break
                    self._on_event(ev["type"], ev["object"])
            except Exception as e:  # server restarting, 410 Gone, ...: list again
                if not self._stop.is_set():
                    log.debug("trainjob watch: %s; relisting", e)
                    time.sleep(0.2)
                    self._wait_ready()

    def _resync(self, items: list[dict[str, Any]]) -> None:
        uids = {i["metadata"]["uid"] for i in items}
        with self._lock:
            gone = [j for uid, j in self._jobs.items() if uid not in uids]
        for job in gone:
            self._teardown(job.uid)
        for item in items:
            self._on_event("ADDED", item)

    def _on_event(self, kind: str, tj: dict[str, Any]) -> None:
        meta = tj["metadata"]
        uid = meta["uid"]
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            self._teardown(uid, tj if kind != "DELETED" else None)
            return
        if tj["spec"].get("managedBy") == MULTIKUEUE:
            return  # the Trainer skips it (trainjob_controller.go:89): it runs on a worker cluster
        conds = {c["type"]: c for c in tj.get("status", {}).get("conditions", [])}
        finished = any(conds.get(t, {}).get("status") == "True" for t in ("Complete", "Failed"))
        if not finished and self._kueue(tj):
            return  # Kueue changed the job: its next event carries the change
        with self._lock:
            running = uid in self._jobs
        if running:
            if tj["spec"].get("suspend") and not finished:
                # spec.suspend on a running TrainJob: the JobSet is suspended, its pods deleted
                self._teardown(uid, deleted=False)
                self._set_condition(tj, "Suspended", "True", "Suspended", "TrainJob is suspended")
            return
        if finished:
            return  # finished before we saw it
        if tj["spec"].get("suspend"):
            if conds.get("Suspended", {}).get("status") != "True":
                self._set_condition(tj, "Suspended", "True", "Suspended", "TrainJob is suspended")
            return
        if "Suspended" in conds:
            self._set_condition(tj, "Suspended", "False", "Resumed", "TrainJob is resumed")
        resumed = "Suspended" in conds  # the deadline counts from now
        job = JobRun(meta["namespace"], meta["name"], uid, deadline=_deadline(tj, resumed))
        with self._lock:
            self._jobs[uid] = job
        job.thread = threading.Thread(
            target=self._run_job, args=(job, tj), name=f"standin-job-{job.name}", daemon=True
        )
        job.thread.start()

    def _teardown(self, uid: str, tj: dict[str, Any] | None = None, deleted: bool = True) -> None:
        """TrainJob deleted: kill its processes, delete its pods (we are the GC), drop finalizers.

        `deleted=False`: the TrainJob is only suspended; what it owns (ConfigMaps) stays."""
        with self._lock:
            job = self._jobs.pop(uid, None)
        if job is not None:
            with self._lock:
                self._status_tokens.pop((job.namespace, job.name), None)
            job.cancelled.set()
            self._kill(job)
            for pod in job.pods:
                with self._lock:
                    self._pods.pop((pod.namespace, pod.name), None)
                try:
                    self._retry(
                        self.core.delete_namespaced_pod,
                        pod.name,
                        pod.namespace,
                        grace_period_seconds=0,
                    )
                except ApiException as e:
                    if e.status != 404:
                        log.warning("deleting pod %s: %s", pod.name, e)
            if deleted:
                self._collect_owned_configmaps(job)
                self._collect_owned_secrets(job)
                self._delete_jobset(job.namespace, job.name)
        fins = (tj or {}).get("metadata", {}).get("finalizers") or []
        gc = {"foregroundDeletion", "orphan"}
        if tj is not None and any(f in gc for f in fins):
            keep = [f for f in fins if f not in gc]
            meta = tj["metadata"]
            try:
                self._retry(
                    self.custom.patch_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    meta["namespace"],
                    "trainjobs",
                    meta["name"],
                    {"metadata": {"finalizers": keep or None}},
                )
            except ApiException as e:
                if e.status != 404:
                    log.warning("dropping finalizers of %s: %s", meta["name"], e)

    def _collect_owned_configmaps(self, job: JobRun) -> None:
        """Garbage collector: delete the ConfigMaps whose ownerReferences name this TrainJob."""
        try:
            cms = self._retry(self.core.list_namespaced_config_map, job.namespace).items
        except ApiException as e:
            log.warning("listing configmaps of %s: %s", job.name, e)
            return
        for cm in cms:
            owners = cm.metadata.owner_references or []
            if any(o.uid == job.uid and o.kind == "TrainJob" for o in owners):
                try:
                    self._retry(
                        self.core.delete_namespaced_config_map, cm.metadata.name, job.namespace
                    )
                except ApiException as e:
                    if e.status != 404:
                        log.warning("deleting configmap %s: %s", cm.metadata.name, e)

    def _collect_owned_secrets(self, job: JobRun) -> None:
        """Garbage collector: delete the Secrets (MPI's SSH keys) this TrainJob owns."""
        try:
            secrets = self._retry(self.core.list_namespaced_secret, job.namespace).items
        except ApiException as e:
            log.warning("listing secrets of %s: %s", job.name, e)
            return
        for sec in secrets:
            owners = sec.metadata.owner_references or []
            if any(o.uid == job.uid and o.kind == "TrainJob" for o in owners):
                with contextlib.suppress(ApiException):
                    self._retry(
                        self.core.delete_namespaced_secret, sec.metadata.name, job.namespace
                    )

    def _kill(self, job: JobRun, grace: float = 5.0) -> None:
        procs = [p.proc for p in job.pods if p.proc is not None and p.proc.poll() is None]
        for proc in procs:
            _killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    # -- Trainer controller + JobSet: build the pods ------------------------------------------
    def _get_runtime(self, tj: dict[str, Any]) -> dict[str, Any]:
        ref = tj["spec"]["runtimeRef"]
        if ref.get("kind", "ClusterTrainingRuntime") == "TrainingRuntime":
            return self._retry(
                self.custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                tj["metadata"]["namespace"],
                "trainingruntimes",
                ref["name"],
            )
        return self._retry(
            self.custom.get_cluster_custom_object,
            GROUP,
            VERSION,
            "clustertrainingruntimes",
            ref["name"],
        )

    def _plan(
        self, tj: dict[str, Any], rt: dict[str, Any], cwd: Path, js: dict[str, Any] | None = None
    ) -> list[PodRun]:
        """The pods of the JobSet `js` (the runtime's template when None): its replicated jobs'
        pod templates (patches merged, the trainer's image, command, env, resources) and counts."""
        ns, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
        trainer = tj["spec"].get("trainer") or {}
        policy = rt["spec"].get("mlPolicy") or {}
        num_nodes = int(trainer.get("numNodes") or policy.get("numNodes") or 1)
        template = js if js is not None else build_jobset(tj, rt)
        rjobs = {r["name"]: r for r in template["spec"]["replicatedJobs"]}
        step_label = "trainer.kubeflow.org/trainjob-ancestor-step"
        trainer_rjob = next(
            (
                n
                for n, r in rjobs.items()
                if r.get("template", {}).get("metadata", {}).get("labels", {}).get(step_label)
                == "trainer"
            ),
            "node",
        )
        if js is not None and policy.get("mpi") is None:  # the trainer step's count
            counted = ((rjobs.get(trainer_rjob) or {}).get("template") or {}).get("spec") or {}
            num_nodes = int(counted.get("completions") or num_nodes)
        master = f"{name}-node-0-0.{name}"
        port = free_port()
        hostfile = cwd / "launcher-0" / "hostfile"

        status_dir = cwd / "kubeflow-trainer"  # stands in for the projected token volume
        status_port = self._status_httpd.server_address[1] if self._status_httpd else 0
        token = base64.urlsafe_b64encode(os.urandom(24)).decode()
        status_dir.mkdir(parents=True, exist_ok=True)
        (status_dir / "token").write_text(token)
        shutil.copyfile(self._api.configuration.ssl_ca_cert, status_dir / "ca.crt")
        with self._lock:
            self._status_tokens[(ns, name)] = token

        def localize(s: str) -> str:
            s = s.replace(f"{master}:{MASTER_PORT}", f"127.0.0.1:{port}")
            s = s.replace(STATUS_SERVICE, f"https://127.0.0.1:{status_port}")
            s = s.replace(STATUS_MOUNT, str(status_dir))
            return s.replace(master, "127.0.0.1").replace("/etc/mpi/hostfile", str(hostfile))

        pods: list[PodRun] = []
        mpi = policy.get("mpi")
        if mpi is not None:
            # The JobSet's counts (mpi.go:116-126) and the hostfile the MPI plugin put in the
            # `<name>-mpi-hostfile` ConfigMap (mpi.go:331-346); locally all slots on one host.
            workers = int(rjobs["node"]["template"]["spec"].get("parallelism") or 1)
            real = trainer_plugins.hostfile(tj, rt, template["spec"])
            slots = sum(int(line.rsplit("=", 1)[1]) for line in real.splitlines())
            hostfile.parent.mkdir(parents=True)
            hostfile.write_text(f"localhost slots={slots}\n")
            (hostfile.parent / "hostfile.k8s").write_text(real)
            plan = [("launcher", 0)] + [("node", i) for i in range(workers)]
        else:
            plan = [(trainer_rjob, i) for i in range(num_nodes)]

        for rjob, i in plan:
            is_trainer = rjob == trainer_rjob
            tmpl = rjobs.get(rjob, {}).get("template", {}).get("spec", {}).get("template", {})
            ctr = next(
                (c for c in tmpl.get("spec", {}).get("containers", []) if c["name"] == "node"),
                {"name": "node"},
            )
            # The JobSet's pod template holds the trainer's and the plugins' env
            # (trainer_plugins.py), as the Job controller gives it to every pod.
            env = {e["name"]: e for e in ctr.get("env", [])}
            # The Job controller's env for an Indexed Job's pods (JobSet's jobs are Indexed;
            # kubernetes pkg/controller/job/indexed_job_utils.go addCompletionIndexEnvVariable).
            env.setdefault("JOB_COMPLETION_INDEX", {"name": "JOB_COMPLETION_INDEX", "valueFrom": {
                "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}})  # fmt: skip
            image = (trainer.get("image") if is_trainer else None) or ctr.get("image", "none")
            # the JobSet's container already has the trainer's command (for `tune run`, as the
            # Trainer's torch plugin completed it); without a JobSet, the TrainJob's
            from_tj = is_trainer and js is None
            command = list((trainer.get("command") if from_tj else None) or ctr.get("command", []))
            args = list((trainer.get("args") if is_trainer else None) or ctr.get("args", []))
            pod_name = f"{name}-{rjob}-0-{i}"
            labels = {
                **tmpl.get("metadata", {}).get("labels", {}),
                **_patch_pod_labels(tj, rjob),
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": str(i),
                "batch.kubernetes.io/job-name": f"{name}-{rjob}-0",
            }
            resources = (trainer.get("resourcesPerNode") if is_trainer else None) or ctr.get(
                "resources", {}
            )
            # the JobSet webhook's default (restarts.py); the Job's backoffLimit
            policy_name = (
                tmpl.get("spec", {}).get("restartPolicy") or crashloop.JOBSET_RESTART_POLICY
            )
            job_spec = rjobs.get(rjob, {}).get("template", {}).get("spec", {})
            limit = job_spec.get("backoffLimit")
            spec: dict[str, Any] = {
                "nodeName": NODE_NAME,
                "restartPolicy": policy_name,
                "subdomain": name,
                "containers": [
                    {
                        "name": "node",
                        "image": image,
                        "command": command,
                        "args": args,
                        "env": list(env.values()),
                        "resources": resources,
                    }
                ],
            }
            if ctr.get("securityContext"):  # (Pod Security admission reads it)
                spec["containers"][0]["securityContext"] = ctr["securityContext"]
            for key in POD_FIELDS:  # what the (patched) pod template sets
                if tmpl.get("spec", {}).get(key) is not None:
                    spec[key] = tmpl["spec"][key]
            # the API server's ServiceAccount admission names `default` when the template does
            # not (plugin/pkg/admission/serviceaccount/admission.go); a projected token volume,
            # as the TrainJobStatus plugin adds, is refused without one
            spec.setdefault("serviceAccountName", "default")
            if _gpus(resources):  # the stand-in node has no GPU: the scheduler cannot bind it
                del spec["nodeName"]
            # the template's volumes: the runtime's, the patches', the MPI and TrainJobStatus
            # plugins' (trainer_plugins.py)
            volumes = list(tmpl.get("spec", {}).get("volumes") or [])
            # (a mount of a volume the JobSet controller adds from `volumeClaimPolicies`, as the
            # torchtune runtimes' `initializer`, is left out: the stand-in has no PVCs)
            names = {v.get("name") for v in volumes}
            mounts = [m for m in ctr.get("volumeMounts") or [] if m.get("name") in names]
            if ctr.get("ports"):
                spec["containers"][0]["ports"] = ctr["ports"]
            if volumes:
                spec["volumes"] = volumes
            if mounts:
                spec["containers"][0]["volumeMounts"] = mounts
            if len(pod_name) <= 63:
                spec["hostname"] = pod_name
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": ns,
                    "labels": labels,
                    "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
                },
                "spec": spec,
            }
            runs = mpi is None or rjob == "launcher"  # MPI workers would only run sshd
            pcwd = cwd / f"{rjob}-{i}"
            pcwd.mkdir(parents=True, exist_ok=True)
            argv = [localize(a) for a in command + args] if runs else []
            run = PodRun(ns, pod_name, rjob, i, body, pcwd, argv, localize, port)
            run.restart_policy = policy_name
            run.backoff_limit = crashloop.JOB_BACKOFF_LIMIT if limit is None else int(limit)
            pods.append(run)
        return pods

    # -- kubelet: run the pods --------------------------------------------------------------
    def _run_job(self, job: JobRun, tj: dict[str, Any]) -> None:
        try:
            self._run_job_inner(job, tj)
        except Exception:
            if not job.cancelled.is_set() and not self._stop.is_set():
                log.exception("stand-in: job %s/%s", job.namespace, job.name)

    def _run_job_inner(self, job: JobRun, tj: dict[str, Any]) -> None:
        built = self._reconcile_resources(job, tj)
        if built is None:
            return
        rt, js = built
        cwd = self.workdir / job.namespace / f"{job.name}-{job.uid[:8]}"
        run = 1
        while cwd.exists():  # resumed: new pods, new (empty) logs, as on a cluster
            run += 1
            cwd = self.workdir / job.namespace / f"{job.name}-{job.uid[:8]}-run{run}"
        trainers = self._plan(tj, rt, cwd, js)
        inits = self._plan_initializers(tj, cwd)
        job.pods = []
        failed: list[PodRun] = []
        for stage in [inits, trainers] if inits else [trainers]:  # JobSet dependsOn: in order
            job.pods += stage
            failed = self._run_stage(job, tj, stage)
            if failed or job.cancelled.is_set():
                break
        if job.cancelled.is_set():
            return
        self._kill(job)  # on failure, JobSet fails the whole set
        if job.gave_up:  # past backoffLimit: the pods are deleted before the TrainJob fails
            self._delete_pods(job)
            for pod in job.pods:
                pod.done.set()
                if pod.exit_code is None:
                    pod.exit_code = 137
        for pod in job.pods:
            if pod.exit_code is None:
                rc = pod.proc.wait() if pod.proc is not None else (0 if not failed else 137)
                self._finish_pod(pod, rc)
        self._patch_job(tj, job, final=True)

    # -- Kueue (kueue pkg/controller/jobs/trainjob, jobframework) -----------------------------
    def _patch_tj(self, tj: dict[str, Any], body: dict[str, Any]) -> None:
        meta = tj["metadata"]
        self._retry(
            self.custom.patch_namespaced_custom_object,
            GROUP, VERSION, meta["namespace"], "trainjobs", meta["name"], body,
        )  # fmt: skip

    def _kueue(self, tj: dict[str, Any]) -> bool:
        """Play Kueue for a TrainJob with a queue label; True when it changed the job.

        Suspended at creation by Kueue's webhook (admission.py); admitted at once unless its
        queue is in ``kueue_held``: its podset info written into Kueue's own runtime patch while
        still suspended, then unsuspended (RunWithPodSetsInfo). An admitted job that someone
        suspends is unsuspended again (the workload is still admitted); an unadmitted one that
        someone unsuspends is suspended again.
        """
        meta, spec = tj["metadata"], tj["spec"]
        queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
        if not queue:
            return False
        uid = meta["uid"]
        with self._lock:
            admitted = uid in self._admitted
        try:
            if spec.get("suspend"):
                if not admitted and queue in self.kueue_held:
                    return False
                if not admitted:
                    rt = self._get_runtime(tj)
                    names = [rj["name"] for rj in rt["spec"]["template"]["spec"]["replicatedJobs"]]
                    patches = [dict(p) for p in spec.get("runtimePatches") or []]
                    info = {"template": {"spec": {"replicatedJobs": [
                        {"name": n, "template": {"spec": {"template": {"metadata": {
                            "labels": {"kueue.x-k8s.io/podset": n}}}}}} for n in names]}}}  # fmt: skip
                    kp = next((p for p in patches if p.get("manager") == KUEUE_MANAGER), None)
                    if kp is None:
                        patches.append({"manager": KUEUE_MANAGER, "trainingRuntimeSpec": info})
                    else:
                        kp["trainingRuntimeSpec"] = info
                    self._patch_tj(tj, {"spec": {"runtimePatches": patches}})
                    with self._lock:
                        self._admitted.add(uid)
                self._patch_tj(tj, {"spec": {"suspend": False}})
                return True
            if not admitted:
                if queue in self.kueue_held:
                    self._patch_tj(tj, {"spec": {"suspend": True}})
                    return True
                with self._lock:
                    self._admitted.add(uid)
        except ApiException as e:
            if e.status != 404:
                log.warning("kueue stand-in: %s: %s", meta["name"], e)
        return False

    def kueue_release(self, queue: str) -> None:
        """Let a held queue admit its jobs now."""
        self.kueue_held.discard(queue)
        for tj in self._retry(self.custom.list_cluster_custom_object, GROUP, VERSION, "trainjobs")[
            "items"
        ]:
            if (tj["metadata"].get("labels") or {}).get(QUEUE_LABEL) == queue:
                self._on_event("MODIFIED", tj)

    def kueue_preempt(self, namespace: str, name: str) -> None:
        """Kueue evicts an admitted job (Stop): suspend it, then clear its podset info."""
        tj = self._retry(
            self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, "trainjobs", name
        )
        with self._lock:
            self._admitted.discard(tj["metadata"]["uid"])
        self._patch_tj(tj, {"spec": {"suspend": True}})
        patches = [dict(p) for p in tj["spec"].get("runtimePatches") or []]
        for p in patches:
            if p.get("manager") == KUEUE_MANAGER:
                p["trainingRuntimeSpec"] = {"template": {"spec": {}}}
        self._patch_tj(tj, {"spec": {"runtimePatches": patches}})

    def _deadline_exceeded(self, job: JobRun, tj: dict[str, Any]) -> None:
        """activeDeadlineSeconds ran out (trainjob_controller.go reconcileDeadline): the TrainJob
        fails with reason DeadlineExceeded and its JobSet is deleted, its pods (and logs) with it."""
        job.cancelled.set()
        self._kill(job, grace=2.0)
        self._delete_jobset(job.namespace, job.name)
        self._set_condition(
            tj, "Failed", "True", "DeadlineExceeded", "TrainJob exceeded its active deadline"
        )
        for pod in job.pods:
            with self._lock:
                self._pods.pop((pod.namespace, pod.name), None)
            with contextlib.suppress(ApiException):
                self._retry(
                    self.core.delete_namespaced_pod, pod.name, pod.namespace, grace_period_seconds=0
                )

    def _reconcile_resources(
        self, job: JobRun, tj: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(runtime, JobSet) once the TrainJob's resources exist. A failed reconcile (runtime
        gone, JobSet refused) is only a ``TrainJobResourcesCreationFailed`` event, its note
        `TrainJob resources reconciliation failed: <error, 950 characters at most> ...`
        (trainjob_controller.go:104-119), and is retried with controller-runtime's back-off,
        the event growing a series (reconcile_events.py). None: the job went away meanwhile."""
        key = job.uid
        while not job.cancelled.is_set() and not self._stop.is_set():
            js: dict[str, Any] | None = None
            try:
                rt = self._get_runtime(tj)
            except ApiException as e:
                if e.status != 404:
                    raise
                ref = tj["spec"]["runtimeRef"]
                kind = ref.get("kind", "ClusterTrainingRuntime")
                plural = "trainingruntimes" if kind == "TrainingRuntime" else (
                    "clustertrainingruntimes")  # fmt: skip
                error = f'{plural}.trainer.kubeflow.org "{ref["name"]}" not found'
            else:
                js, error = self._apply_jobset(tj, rt)
            if js is not None:
                self._backoff.forget(key)
                return rt, js
            note = f"TrainJob resources reconciliation failed: {error[:950]}"
            if len(error) > 950:
                note += " ..."
            self._recorder.warning(tj, "TrainJobResourcesCreationFailed", "Reconciling", note)
            until = time.monotonic() + self._backoff.when(key)
            while time.monotonic() < until:
                if job.cancelled.wait(min(0.5, until - time.monotonic())) or self._stop.is_set():
                    return None
            try:  # the next reconcile reads the TrainJob again
                meta = tj["metadata"]
                tj = self._retry(
                    self.custom.get_namespaced_custom_object,
                    GROUP, VERSION, meta["namespace"], "trainjobs", meta["name"],
                )  # fmt: skip
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
        return None

    def flush_event_series(self) -> None:
        """client-go's periodic refresh of event series (every 30 min on a cluster): write the
        count the reconcile-failure events have reached."""
        self._recorder.flush()

    def reconcile_failures(self, uid: str) -> int:
        """How many reconciles of the TrainJob `uid` have failed in a row (a test's probe)."""
        return self._backoff.failures(uid)

    def _apply_jobset(
        self, tj: dict[str, Any], rt: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, str]:
        """Create the JobSet the Trainer builds, through the API server (so the JobSet webhook
        checks it); the stand-in then runs its pods from it. Refused: (None, the API server's
        error), which the reconciler reports only as an event; the TrainJob's status says
        nothing."""
        js = build_jobset(tj, rt)
        try:
            created = self._retry(
                self.custom.create_namespaced_custom_object,
                "jobset.x-k8s.io",
                "v1alpha2",
                tj["metadata"]["namespace"],
                "jobsets",
                js,
            )
            self._apply_plugin_objects(tj, rt, js)
            return created, ""
        except ApiException as e:
            if e.status == 409:
                self._apply_plugin_objects(tj, rt, js)
                return js, ""  # resumed: the JobSet is still there
            return None, _api_message(e)

    def _apply_plugin_objects(
        self, tj: dict[str, Any], rt: dict[str, Any], js: dict[str, Any]
    ) -> None:
        """The MPI and TrainJobStatus plugins' Secret and ConfigMaps (trainer_plugins.py); an
        existing Secret is kept (immutable, mpi.go:258-270), ConfigMaps are replaced."""
        ns = tj["metadata"]["namespace"]
        ca = Path(self._api.configuration.ssl_ca_cert).read_text()
        for obj in trainer_plugins.plugin_objects(tj, rt, js["spec"], ca):
            secret = obj["kind"] == "Secret"
            create = self.core.create_namespaced_secret if secret else (
                self.core.create_namespaced_config_map)  # fmt: skip
            try:
                self._retry(create, ns, obj)
            except ApiException as e:
                if e.status != 409:
                    raise
                if not secret:
                    name = obj["metadata"]["name"]
                    self._retry(self.core.replace_namespaced_config_map, name, ns, obj)

    def _delete_jobset(self, namespace: str, name: str) -> None:
        try:
            self._retry(
                self.custom.delete_namespaced_custom_object,
                "jobset.x-k8s.io",
                "v1alpha2",
                namespace,
                "jobsets",
                name,
            )
        except ApiException as e:
            if e.status != 404:
                log.warning("deleting jobset %s: %s", name, e)

    def _plan_initializers(self, tj: dict[str, Any], cwd: Path) -> list[PodRun]:
        """A pod per ``spec.initializer`` entry (``dataset-initializer``, ``model-initializer``).

        It "downloads" by printing its ``STORAGE_URI``; while the file ``hold_initializers``
        names exists (a test knob) it keeps running.
        """
        ns, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
        pods = []
        for kind, init in ((tj["spec"].get("initializer") or {}) or {}).items():
            rjob = f"{kind}-initializer"
            pod_name = f"{name}-{rjob}-0-0"
            env = [{"name": "STORAGE_URI", "value": str(init.get("storageUri", ""))}]
            env += list(init.get("env") or [])
            script = (
                f"while [ -e '{self.hold_initializers}' ]; do sleep 0.1; done; "
                'echo "stand-in: downloaded $STORAGE_URI"'
            )
            body = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": ns,
                    "labels": {
                        "jobset.sigs.k8s.io/jobset-name": name,
                        "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                        "jobset.sigs.k8s.io/job-index": "0",
                        "batch.kubernetes.io/job-completion-index": "0",
                        "batch.kubernetes.io/job-name": f"{name}-{rjob}-0",
                    },
                },
                "spec": {
                    "nodeName": NODE_NAME,
                    "restartPolicy": "Never",
                    "subdomain": name,
                    "containers": [
                        {"name": rjob, "image": f"ghcr.io/kubeflow/trainer/{rjob}", "env": env}
                    ],
                },
            }
            pcwd = cwd / f"{rjob}-0"
            pcwd.mkdir(parents=True, exist_ok=True)
            argv = ["bash", "-c", script]
            pods.append(PodRun(ns, pod_name, rjob, 0, body, pcwd, argv, lambda s: s, 0))
        return pods

    def _run_stage(self, job: JobRun, tj: dict[str, Any], stage: list[PodRun]) -> list[PodRun]:
        """Create and run one stage's pods until one fails (returned) or all succeed."""
        # a refused pod is no pod: FailedCreate on its Job, retried with back-off
        if not create_pods(self, job, tj, stage):
            return []
        last_retry = 0.0
        failed: list[PodRun] = []
        while not job.cancelled.is_set():
            if job.deadline is not None and time.monotonic() > job.deadline:
                self._deadline_exceeded(job, tj)
                return []
            if time.monotonic() - last_retry > 2:  # (re)try to start waiting pods
                last_retry = time.monotonic()
                for pod in stage:
                    if pod.waiting is not None or not pod.log_path.exists():
                        if not job.cancelled.is_set():
                            self._start_pod(pod)
                self._patch_job(tj, job)
            for pod in stage:
                if pod.proc is not None and pod.exit_code is None and pod.restart_at is None:
                    rc = pod.proc.poll()
                    if rc is not None:
                        if rc != 0 and pod.restart_policy == "OnFailure":
                            self._crash(pod, rc)
                        else:
                            self._finish_pod(pod, rc)
                        self._patch_job(tj, job)
                if pod.restart_at is not None and time.monotonic() >= pod.restart_at:
                    self._restart(pod)
            runners = [p for p in stage if p.argv]
            given_up = self._past_backoff_limit(stage)
            if given_up:
                job.gave_up = True
                for pod in given_up:  # the Job failed: its pods are deleted, their runs end
                    pod.exit_code = int((pod.last_state or {}).get("terminated", {}).get(
                        "exitCode", 1))  # fmt: skip
                return given_up
            failed = [p for p in runners if p.exit_code not in (None, 0)]
            if failed or all(p.exit_code == 0 for p in runners):
                break
            time.sleep(0.05)
        return failed

    # -- restarts in place (restarts.py) ------------------------------------------------------
    def _crash(self, pod: PodRun, rc: int) -> None:
        """kubelet: the container failed under OnFailure: record the run in lastState and
        restart it in the same pod, at once the first time, else after the back-off."""
        code = rc if rc >= 0 else 128 - rc
        term: dict[str, Any] = {
            "exitCode": code,
            "reason": "Error",
            "finishedAt": _now(),
            "containerID": crashloop.container_id(pod.name, pod.restarts),
        }
        with contextlib.suppress(OSError):
            message = (pod.cwd / "termination-log").read_text()[:4096]
            if message:
                term["message"] = message
        pod.ended_logs.add(pod.log_path)
        delay, pod.backoff = crashloop.next_backoff(pod.backoff)
        pod.restart_at = time.monotonic() + delay * self.backoff_scale
        # the run that just ended: state.terminated until the kubelet acts on it
        self._pod_status(pod, "Running", {"terminated": term})
        pod.last_state, pod.last_log = {"terminated": term}, pod.log_path
        if delay:
            uid = pod.body["metadata"].get("uid", "")
            target = f"container={pod.container} pod={pod.name}_{pod.namespace}({uid})"
            waiting = {"reason": "CrashLoopBackOff",
                       "message": f"back-off {delay:g}s restarting failed {target}"}  # fmt: skip
            self._pod_status(pod, "Running", {"waiting": waiting})
            self._event(pod.body, "Warning", "BackOff",
                        f"Back-off restarting failed container {pod.container} in pod "
                        f"{pod.name}_{pod.namespace}({uid})", "kubelet")  # fmt: skip

    def _restart(self, pod: PodRun) -> None:
        """kubelet: the next run of the container, with a new (empty) log."""
        pod.restart_at = None
        pod.restarts += 1
        pod.proc = None
        self._start_pod(pod)

    def _past_backoff_limit(self, stage: list[PodRun]) -> list[PodRun]:
        """The Job controller: the pods of a Job whose restarts reached its backoffLimit."""
        out: list[PodRun] = []
        for rjob in dict.fromkeys(p.rjob for p in stage):
            pods = [p for p in stage if p.rjob == rjob and p.restart_policy == "OnFailure"]
            active = [p for p in pods if p.exit_code is None]
            if active and crashloop.past_backoff_limit(
                [p.restarts for p in active], active[0].backoff_limit
            ):
                out += [p for p in active if p.restarts or p.restart_at is not None]
        return out

    def _delete_pods(self, job: JobRun) -> None:
        """The Job controller deletes a failed Job's active pods; the JobSet deletes its other
        active Jobs and the garbage collector their pods (restarts.py)."""
        for pod in job.pods:
            with self._lock:
                self._pods.pop((pod.namespace, pod.name), None)
            try:
                self._retry(
                    self.core.delete_namespaced_pod, pod.name, pod.namespace, grace_period_seconds=0
                )
            except ApiException as e:
                if e.status != 404:
                    log.warning("deleting pod %s: %s", pod.name, e)

    def _create_pod(self, pod: PodRun) -> None:
        try:
            self._retry(self.core.create_namespaced_pod, pod.namespace, pod.body)
        except ApiException as e:
            if e.status != 409:
                raise
            # a leftover pod of an earlier TrainJob with the same name: replace it
            self._retry(
                self.core.delete_namespaced_pod, pod.name, pod.namespace, grace_period_seconds=0
            )
            self._retry(self.core.create_namespaced_pod, pod.namespace, pod.body)

    def _mount_volumes(self, pod: PodRun) -> dict[str, str]:
        """kubelet: write each configMap volume's files into the pod's folder; mountPath -> dir.

        A missing ConfigMap keeps the pod Pending (ContainerCreating, event FailedMount) until it
        appears, as a kubelet does. Mount paths are remapped to these folders in the process's
        argv and env (the same deviation as for the hostfile).
        """
        spec = pod.body["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        out: dict[str, str] = {}
        for m in spec["containers"][0].get("volumeMounts") or []:
            vol = volumes.get(m["name"], {})
            ref = vol.get("configMap")
            if ref is None:
                continue
            try:
                cm = self._retry(self.core.read_namespaced_config_map, ref["name"], pod.namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                raise _MountError(
                    f'MountVolume.SetUp failed for volume "{m["name"]}" : configmap '
                    f'"{ref["name"]}" not found'
                ) from None
            files: dict[str, bytes] = {k: v.encode() for k, v in (cm.data or {}).items()}
            files.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
            target = pod.cwd / "volumes" / m["name"]
            shutil.rmtree(target, ignore_errors=True)
            items = ref.get("items") or [{"key": k, "path": k} for k in files]
            for item in items:
                path = target / item["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(files[item["key"]])
            out[m["mountPath"]] = str(target)
        return out

    def _start_pod(self, pod: PodRun) -> None:
        c = pod.body["spec"]["containers"][0]
        if self._cannot_start(pod, c):
            return
        try:
            mounts = self._mount_volumes(pod)
        except _MountError as e:
            if pod.waiting != str(e):
                pod.waiting = str(e)
                self._pod_status(pod, "Pending", {"waiting": {"reason": "ContainerCreating"}})
                self._event(pod.body, "Warning", "FailedMount", str(e))
            return

        def remap(text: str) -> str:
            for mount_path, local in mounts.items():
                text = text.replace(mount_path, local)
            return text

        try:
            env = {k: remap(v) for k, v in self._resolve_env(pod, c.get("env", [])).items()}
        except _ConfigError as e:
            if pod.waiting != str(e):
                pod.waiting = str(e)
                self._pod_status(
                    pod,
                    "Pending",
                    {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}},
                )
                self._event(pod.body, "Warning", "Failed", f"Error: {e}")
            return
        pod.waiting = None
        pod.log_path.touch()
        if pod.argv:
            tune = tune_standin.install(str(self.workdir / "tune-standin"))  # `tune run` images
            penv = {**os.environ, "PATH": f"{tune}:{self._bin_dir}:{os.environ.get('PATH', '')}"}
            penv["HOSTNAME"] = pod.body["spec"].get("hostname", pod.name)
            (pod.cwd / "tmp").mkdir(exist_ok=True)
            penv["TMPDIR"] = str(pod.cwd / "tmp")  # a container's own /tmp
            penv.update(env)
            # the image's packages, not the test venv's extras (image_packages.py)
            penv.update(image_packages.env(str(c.get("image") or ""), self.workdir / "image-site",
                                           pod.cwd, penv.get("PYTHONPATH", "")))  # fmt: skip
            # What a kubelet mounts at terminationMessagePath (/dev/termination-log).
            (pod.cwd / "termination-log").write_text("")
            penv["KF_JUPYTER_TERMINATION_LOG"] = str(pod.cwd / "termination-log")
            if os.geteuid() == 0 and pod.rjob == "launcher":
                penv.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            if pod.rjob == "launcher":  # ranks get their own pod's env (mpirun_standin.py)
                shim = str(self.workdir / "mpirun-standin")
                penv.update(mpirun_standin.install(shim))
                penv["PATH"] = f"{shim}:{penv['PATH']}"
                penv["STANDIN_POD_ENV"] = ",".join(e["name"] for e in c.get("env", []))
            with pod.log_path.open("ab") as out:
                try:
                    pod.proc = subprocess.Popen(
                        [remap(a) for a in pod.argv],
                        cwd=pod.cwd,
                        env=penv,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        preexec_fn=_die_with_parent,
                    )
                except OSError as e:
                    out.write(f"stand-in: cannot start {pod.argv[:1]}: {e}\n".encode())
                    self._finish_pod(pod, 128)
                    return
        self._pod_status(pod, "Running", {"running": {"startedAt": _now()}}, ready=True)
        self._event(pod.body, "Normal", "Started", f"Started container {c['name']}")

    def _cannot_start(self, pod: PodRun, c: dict[str, Any]) -> bool:
        """The scheduler or the kubelet stops the pod here: a GPU (the node has none), or an
        image on a registry that cannot resolve (RFC 2606 `.invalid`). Reported as they do."""
        gpus = _gpus(c.get("resources") or {})
        image = str(c.get("image") or "")
        if gpus:
            msg = (
                "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes "
                "are available: 1 No preemption victims found for incoming pod."
            )
            if pod.waiting != msg:
                pod.waiting = msg
                cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": msg, "lastTransitionTime": _now()}  # fmt: skip
                self._patch_pod(pod, {"phase": "Pending", "conditions": [cond]})
                self._event(pod.body, "Warning", "FailedScheduling", msg, "default-scheduler")
            return True
        if image.split("/")[0].endswith(".invalid"):
            host = image.split("/")[0]
            pull = (
                f'failed to pull and unpack image "{image}": failed to resolve reference '
                f'"{image}": dial tcp: lookup {host}: no such host'
            )
            first = pod.waiting is None
            reason, msg = ("ErrImagePull", pull) if first else (
                "ImagePullBackOff", f'Back-off pulling image "{image}"'
            )  # fmt: skip
            if pod.waiting != msg:
                pod.waiting = msg
                self._pod_status(pod, "Pending", {"waiting": {"reason": reason, "message": msg}})
                event = f'Failed to pull image "{image}": {pull}' if first else msg
                self._event(pod.body, "Warning", "Failed" if first else "BackOff", event)
            return True
        return False

    def _patch_pod(self, pod: PodRun, status: dict[str, Any]) -> None:
        try:
            self._retry(
                self.core.patch_namespaced_pod_status, pod.name, pod.namespace, {"status": status}
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def _finish_pod(self, pod: PodRun, rc: int) -> None:
        pod.exit_code = rc if rc >= 0 else 128 - rc
        term = {
            "exitCode": pod.exit_code,
            "reason": "Completed" if rc == 0 else "Error",
            "finishedAt": _now(),
        }
        with contextlib.suppress(OSError):
            message = (pod.cwd / "termination-log").read_text()[:4096]
            if message:
                term["message"] = message
        pod.done.set()
        self._pod_status(pod, "Succeeded" if rc == 0 else "Failed", {"terminated": term})

    def _resolve_env(self, pod: PodRun, env: list[dict[str, Any]]) -> dict[str, str]:
        """The process env of a pod: literal values, secretKeyRef/configMapKeyRef, fieldRef."""
        out: dict[str, str] = {}
        meta = pod.body["metadata"]
        for e in env:
            name, src = e["name"], e.get("valueFrom")
            if src is None:
                value = str(e.get("value", ""))
            elif "secretKeyRef" in src or "configMapKeyRef" in src:
                secret = "secretKeyRef" in src
                ref = src["secretKeyRef" if secret else "configMapKeyRef"]
                what = "secret" if secret else "configmap"
                try:
                    read = (
                        self.core.read_namespaced_secret
                        if secret
                        else self.core.read_namespaced_config_map
                    )
                    data = self._retry(read, ref["name"], pod.namespace).data or {}
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    if ref.get("optional"):
                        continue
                    raise _ConfigError(f'{what} "{ref["name"]}" not found') from None
                if ref["key"] not in data:
                    if ref.get("optional"):
                        continue
                    raise _ConfigError(
                        f"couldn't find key {ref['key']} in {what.title()} "
                        f"{pod.namespace}/{ref['name']}"
                    )
                raw = data[ref["key"]]
                value = base64.b64decode(raw).decode() if secret else raw
            elif "fieldRef" in src:
                path = src["fieldRef"]["fieldPath"]
                m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
                fields = {
                    "metadata.name": pod.name,
                    "metadata.namespace": pod.namespace,
                    "spec.nodeName": NODE_NAME,
                    "status.podIP": "127.0.0.1",
                    "status.hostIP": "127.0.0.1",
                }
                value = meta[m[1]].get(m[2], "") if m else fields.get(path, "")
            else:
                continue  # resourceFieldRef: not modelled
            out[name] = pod.localize(value)
            if name in PORT_ENV and value == str(MASTER_PORT):
                out[name] = str(pod.port)
        return out

    # -- status writes -----------------------------------------------------------------------
    def _pod_status(
        self, pod: PodRun, phase: str, state: dict[str, Any], ready: bool = False
    ) -> None:
        c = pod.body["spec"]["containers"][0]
        cond = "True" if ready else "False"
        if "running" in state:
            state = {"running": {**state["running"],
                     "containerID": crashloop.container_id(pod.name, pod.restarts)}}  # fmt: skip
        status = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "startTime": _now(),
            "conditions": [
                {"type": t, "status": cond, "lastTransitionTime": _now()}
                for t in ("Ready", "ContainersReady")
            ]
            + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c["image"],
                    "imageID": "",
                    "ready": ready,
                    "restartCount": pod.restarts,
                    "started": "running" in state,
                    "state": state,
                    **({"lastState": pod.last_state} if pod.last_state else {}),
                }
            ],
        }
        try:
            self._retry(
                self.core.patch_namespaced_pod_status, pod.name, pod.namespace, {"status": status}
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def _patch_job(self, tj: dict[str, Any], job: JobRun, final: bool = False) -> None:
        jobs_status = []
        for rjob in dict.fromkeys(p.rjob for p in job.pods):
            pods = [p for p in job.pods if p.rjob == rjob]
            failed = any(p.exit_code not in (None, 0) for p in pods)
            succeeded = all(p.exit_code == 0 for p in pods)
            started = all(p.proc is not None or (not p.argv and p.waiting is None) for p in pods)
            active = not failed and not succeeded
            jobs_status.append(
                {
                    "name": rjob,
                    "active": int(active),
                    "ready": int(active and started),
                    "succeeded": int(succeeded),
                    "failed": int(failed),
                    "suspended": 0,
                }
            )
        status: dict[str, Any] = {"jobsStatus": jobs_status}
        if final:
            bad = [p for p in job.pods if p.exit_code not in (None, 0)]
            if bad:
                msg = "; ".join(f"pod {p.name} exited with code {p.exit_code}" for p in bad)
                cond = ("Failed", "FailedJobs", f"jobset failed: {msg}")
            else:
                cond = ("Complete", "AllJobsCompleted", "jobset completed successfully")
            status["conditions"] = self._conditions(tj, cond[0], "True", cond[1], cond[2])
        if status == job.last_status:
            return
        job.last_status = status
        self._patch_status(tj, status)

    def _conditions(
        self, tj: dict[str, Any], ctype: str, status: str, reason: str, message: str
    ) -> list[dict[str, Any]]:
        try:
            cur = self._retry(
                self.custom.get_namespaced_custom_object,
                GROUP,
                VERSION,
                tj["metadata"]["namespace"],
                "trainjobs",
                tj["metadata"]["name"],
            )
            conds = [c for c in cur.get("status", {}).get("conditions", []) if c["type"] != ctype]
        except ApiException:
            conds = []
        return [
            *conds,
            {
                "type": ctype,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": _now(),
            },
        ]

    def _set_condition(
        self, tj: dict[str, Any], ctype: str, status: str, reason: str, message: str
    ) -> None:
        self._patch_status(tj, {"conditions": self._conditions(tj, ctype, status, reason, message)})

    def _patch_status(self, tj: dict[str, Any], status: dict[str, Any]) -> None:
        meta = tj["metadata"]
        try:
            self._retry(
                self.custom.patch_namespaced_custom_object_status,
                GROUP,
                VERSION,
                meta["namespace"],
                "trainjobs",
                meta["name"],
                {"status": status},
            )
        except ApiException as e:
            if e.status != 404:
                raise

    def _event(
        self, obj: dict[str, Any], etype: str, reason: str, message: str, component: str = ""
    ) -> None:
        meta = obj["metadata"]
        kind = obj.get("kind", "Pod")
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": kind,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "apiVersion": obj.get("apiVersion", "v1"),
                "uid": meta.get("uid"),
            },
            "type": etype,
            "reason": reason,
            "message": message,
            "count": 1,
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "source": {
                "component": component or ("kubelet" if kind == "Pod" else "trainjob-controller"),
                "host": NODE_NAME,
            },
        }
        try:
            self._retry(self.core.create_namespaced_event, meta["namespace"], body)
        except ApiException as e:
            log.debug("event: %s", e)

    # -- kubelet log endpoint ----------------------------------------------------------------
    def pod_run(self, namespace: str, name: str) -> PodRun | None:
        with self._lock:
            return self._pods.get((namespace, name))


def _deadline(tj: dict[str, Any], resumed: bool = False) -> float | None:
    """When activeDeadlineSeconds runs out, on the monotonic clock: counted from creation, or
    from the resume (Suspended False) as the Trainer does."""
    seconds = (tj.get("spec") or {}).get("activeDeadlineSeconds")
    if not seconds:
        return None
    if resumed:
        return time.monotonic() + int(seconds)
    start = tj["metadata"].get("creationTimestamp")
    for c in (tj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Suspended" and c.get("status") == "False":
            start = c.get("lastTransitionTime") or start
    try:
        began = dt.datetime.fromisoformat(str(start).replace("Z", "+00:00")).timestamp()
    except ValueError:
        began = time.time()
    return time.monotonic() + (began + int(seconds) - time.time())


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _gpus(resources: dict[str, Any]) -> int:
    """GPUs per node as the Trainer counts them (runtime.go GetNumGPUPerNode): the first
    resource whose name contains "gpu", requests before limits."""
    for part in ("requests", "limits"):
        for key, q in (resources.get(part) or {}).items():
            if "gpu" in str(key).lower() and q is not None:
                n = math.ceil(float(str(q)))
                if n:
                    return n
    return 0


def _patch_pod_labels(tj: dict[str, Any], rjob: str) -> dict[str, str]:
    """Pod template labels that the TrainJob's runtimePatches put on replicated job `rjob`."""
    out: dict[str, str] = {}
    for patch in tj["spec"].get("runtimePatches") or []:
        spec = patch.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {})
        for rj in spec.get("replicatedJobs") or []:
            if rj.get("name") == rjob:
                pod_meta = rj.get("template", {}).get("spec", {}).get("template", {})
                out.update(pod_meta.get("metadata", {}).get("labels") or {})
    return out


class _KubeletServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, standin: StandIn) -> None:
        super().__init__(("127.0.0.1", 0), _KubeletHandler)
        self.standin = standin
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*standin._cert)
        self.socket = ctx.wrap_socket(self.socket, server_side=True)


class _KubeletHandler(http.server.BaseHTTPRequestHandler):
    server: _KubeletServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("kubelet: " + format, *args)

    def _error(self, code: int, msg: str) -> None:
        data = msg.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._error(404, "404 page not found")
        _, ns, name, container = parts
        standin = self.server.standin
        pod = standin.pod_run(ns, name)
        if pod is None:
            return self._error(404, f'pod "{name}" in namespace "{ns}" not found')
        if container != pod.container:
            return self._error(400, f'container "{container}" in pod "{name}" is not valid')
        path = pod.log_path
        if q.get("previous") == "true":
            if pod.last_log is None:  # lastState's container (restarts.py)
                return self._error(
                    400, f'previous terminated container "{container}" in pod "{name}" not found'
                )
            path = pod.last_log
        if not path.exists():
            reason = "CreateContainerConfigError" if pod.waiting else "ContainerCreating"
            return self._error(
                400, f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        follow = q.get("follow") == "true"
        tail = int(q["tailLines"]) if "tailLines" in q else None
        try:
            with path.open("rb") as f:
                data = f.read()
                if tail is not None:
                    lines = data.splitlines(keepends=True)
                    data = b"".join(lines[-tail:]) if tail > 0 else b""
                self.wfile.write(data)
                while follow and not standin._stop.is_set():
                    chunk = f.read(65536)
                    if chunk:
                        self.wfile.write(chunk)
                    elif pod.done.is_set() or path in pod.ended_logs:
                        rest = f.read()  # written between the last read and the exit
                        if rest:
                            self.wfile.write(rest)
                        break
                    else:
                        time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass


# -- the Trainer's status server (facts doc "Progress") ---------------------------------------


def _status_path(namespace: str, name: str) -> str:
    return f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


_STATUS_PATH = re.compile(
    r"/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status"
)


class _PayloadError(ValueError):
    pass


def _decode_trainer_status(body: bytes) -> dict[str, Any] | None:
    """The request's trainerStatus as the Trainer's Go types would decode it (None: absent)."""
    import json

    try:
        req = json.loads(body)
    except ValueError:
        raise _PayloadError("Invalid payload") from None
    if not isinstance(req, dict):
        raise _PayloadError("Invalid payload")
    ts = req.get("trainerStatus")
    if ts is None:
        return None
    if not isinstance(ts, dict):
        raise _PayloadError("Invalid payload")
    for key in ("progressPercentage", "estimatedRemainingSeconds"):
        v = ts.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or abs(v) >= 2**31):
            raise _PayloadError("Invalid payload")  # not an int32
    metrics = ts.get("metrics")
    if metrics is not None and not (
        isinstance(metrics, list)
        and all(
            isinstance(m, dict) and all(isinstance(m.get(k, ""), str) for k in ("name", "value"))
            for m in metrics
        )
    ):
        raise _PayloadError("Invalid payload")
    when = ts.get("lastUpdatedTime")
    if when is not None:
        if not isinstance(when, str):
            raise _PayloadError("Invalid payload")
        try:
            dt.datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            raise _PayloadError("Invalid payload") from None
    # The CRD's CEL rule (has(self.lastUpdatedTime)); the v1.20 API server here ignores CEL.
    if not when:
        raise _PayloadError("lastUpdatedTime is required when trainerStatus is present")
    return {
        "progressPercentage": ts.get("progressPercentage"),
        "estimatedRemainingSeconds": ts.get("estimatedRemainingSeconds"),
        "metrics": [{"name": m.get("name", ""), "value": m.get("value", "")} for m in metrics]
        if metrics
        else None,
        "lastUpdatedTime": when,
    }


class _StatusServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, standin: StandIn) -> None:
        super().__init__(("127.0.0.1", 0), _StatusHandler)
        self.standin = standin
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*standin._cert)
        self.socket = ctx.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)


class _StatusHandler(http.server.BaseHTTPRequestHandler):
    server: _StatusServer

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("status server: " + format, *args)

    def _json(self, code: int, body: Any) -> None:
        import json

        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._json(
            code,
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": message, "reason": reason, "code": code},
        )  # fmt: skip

    def do_GET(self) -> None:
        self._status(404, "NotFound", "Not found")

    def do_POST(self) -> None:
        m = _STATUS_PATH.fullmatch(urllib.parse.urlsplit(self.path).path)
        if m is None:
            return self._status(404, "NotFound", "Not found")
        ns, name = m[1], m[2]
        length = int(self.headers.get("Content-Length") or 0)
        if length > STATUS_MAX_BODY:
            return self._status(413, "RequestEntityTooLarge", "Payload too large")
        standin = self.server.standin
        with standin._lock:
            token = standin._status_tokens.get((ns, name))
        auth = self.headers.get("Authorization") or ""
        if token is None or auth != f"Bearer {token}":
            return self._status(403, "Forbidden", "Forbidden")
        body = self.rfile.read(length)
        try:
            ts = _decode_trainer_status(body)
        except _PayloadError as e:
            return self._status(422, "Invalid", str(e))
        if ts is not None:
            try:
                # merge patch with nulls for the absent fields: the whole trainerStatus is
                # replaced, as the Trainer's server-side apply does
                standin.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, ns, "trainjobs", name, {"status": {"trainerStatus": ts}}
                )
            except ApiException as e:
                if e.status == 404:
                    return self._status(404, "NotFound", "Train job not found")
                if e.status in (400, 422):
                    return self._status(422, "Invalid", _api_message(e))
                return self._status(500, "InternalError", "Internal error")
        import json

        echo = json.loads(body)
        self._json(200, {"trainerStatus": echo.get("trainerStatus")})


def _api_message(e: ApiException) -> str:
    import json

    try:
        return str(json.loads(e.body).get("message") or "Validation failed")
    except (TypeError, ValueError):
        return "Validation failed"
