"""Sweeps on a cluster: the trials are TrainJobs this client creates; the record is a ConfigMap.

Kubeflow Trainer v2.3.0 has no OptimizationJob API and no release has a controller for it
(docs/decisions.md, "OptimizationJob on the harness"), so nothing on the cluster runs a sweep.
The client does, with the backend-neutral `SweepEngine`, as the local backend does:

- **the driver** is a detached process on the machine that called `optimize()` (its own
  session, the kernel's environment and working directory), so the sweep goes on when the kernel
  restarts or the notebook closes. It creates each trial as the TrainJob `<sweep>-trial-<n>`
  (labels `kf-jupyter.io/sweep`, `kf-jupyter.io/sweep-trial`; parameters in annotations and as
  `KUBEFLOW_TRAINER_OPT_<NAME>` in `spec.trainer.env`, as the OptimizationJob KEP says its
  controller will), `parallel_trials` at a time, and reads their `trainerStatus` and logs;
- **the record** (`engine.new_record`: spec, status, every trial's parameters, status, metrics
  and curve) is the ConfigMap `<sweep>` in the namespace (key `sweep.json`, label
  `kf-jupyter.io/sweep-record`), so any process with access to the namespace, on any machine,
  lists, follows, cancels and deletes the sweep. The driver renews the annotation
  `kf-jupyter.io/sweep-heartbeat` every `HEARTBEAT_SECONDS`; a record whose driver stopped
  renewing it for `DRIVER_LOST_SECONDS` reads `Failed` / `DriverLost` (running trials go on
  until deleted);
- **cancel** is the annotation `kf-jupyter.io/sweep-cancel` (the driver then suspends the
  running trials, which keeps their TrainJobs and metrics); **delete** cancels, then deletes
  every TrainJob labelled with the sweep, then the ConfigMap.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pickle
import shutil
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..backends.kubernetes.config import KubernetesBackendConfig
from ..constants import (
    CREATED_BY_LABEL,
    CREATED_BY_VALUE,
    GROUP,
    SWEEP_LABEL,
    VERSION,
)
from ..errors import JobNotFoundError, KFJupyterError, ValidationError
from . import engine as eng
from .fit import RECORD_MAX_BYTES, fit_record

RECORD_LABEL = "kf-jupyter.io/sweep-record"
CANCEL_ANNOTATION = "kf-jupyter.io/sweep-cancel"
HEARTBEAT_ANNOTATION = "kf-jupyter.io/sweep-heartbeat"
DRIVER_ANNOTATION = "kf-jupyter.io/sweep-driver"
RECORD_KEY = "sweep.json"
REASON_DRIVER_LOST = "DriverLost"
#: How often the driver says it is alive, and after how long without a word a reader calls
#: it lost (generous: the reader's clock is compared with the driver's).
HEARTBEAT_SECONDS = 15.0
DRIVER_LOST_SECONDS = 120.0
#: How often the driver looks at its running trials (each look reads each one's TrainJob and
#: pods: two requests per running trial).
POLL_SECONDS = 1.0
#: How long the driver rides out an API server that does not answer before it gives up.
GIVE_UP_SECONDS = 300.0
#: A running trial's log is re-read whole for its curve; on a cluster each read is a pod list
#: and a log request per pod, so the driver does it every 5 s (the engine's default is 1 s).
LIVE_READ_SECONDS = 5.0
#: Set by the driver when the API server refuses its record (the reason): readers say
#: `Failed` / `RecordRefused` at once rather than `DriverLost` minutes later.
REFUSED_ANNOTATION = "kf-jupyter.io/sweep-record-refused"
REASON_RECORD_REFUSED = "RecordRefused"
#: The resource the Trainer's (post-v2.3.0, controller-less) OptimizationJob CRD serves.
OPTIMIZATIONJOB_PLURAL = "optimizationjobs"
#: Where the driver's hand-over files and log live: `<local state dir>/kube-sweeps/<ns>/<name>`.
DRIVERS = "kube-sweeps"


def _now() -> float:
    return time.time()


def optimizationjob_served(api: Any) -> bool:
    """Whether the cluster serves `trainer.kubeflow.org/v1alpha1` `optimizationjobs` (API
    discovery: one GET of the group version's resource list)."""
    try:
        found = api.custom.get_api_resources(GROUP, VERSION, _request_timeout=(10, 30))
    except Exception:
        return False
    return any(r.name == OPTIMIZATIONJOB_PLURAL for r in getattr(found, "resources", None) or [])


def why_client_runs_trials(served: bool) -> str:
    """The event text that says where the sweep's loop runs, and why."""
    if served:
        return (
            "The cluster serves the OptimizationJob API (added to Kubeflow Trainer after "
            "v2.3.0), but no Trainer release has a controller that runs it: this client runs "
            "the trials as TrainJobs (docs/sweeps.md, 'On a cluster')."
        )
    return (
        "Kubeflow Trainer v2.3.0 has no OptimizationJob API: this client runs the trials as "
        "TrainJobs (docs/sweeps.md, 'On a cluster')."
    )


class ConfigMapStore:
    """`engine.SweepStore` on the sweep's ConfigMap (the driver's side).

    A request that fails for a passing reason (connection, 429, 5xx) is retried for up to
    `GIVE_UP_SECONDS`, so a blip of the API server does not end the sweep. A record deleted
    under the driver (kubectl delete configmap) means cancel: the driver stops its trials.
    """

    def __init__(self, api: Any, name: str) -> None:
        self.api = api
        self.name = name
        self.cancelled = threading.Event()
        self.gone = False
        self._beat = 0.0
        #: The most bytes of record it writes (`fit.fit_record`).
        self.limit = RECORD_MAX_BYTES

    def _call(self, fn: Any, *args: Any) -> Any:
        from ..backends.kubernetes.errors import retryable

        deadline = time.monotonic() + GIVE_UP_SECONDS
        delay = 0.5
        while True:
            try:
                return fn(*args)
            except Exception as exc:
                if getattr(exc, "status", None) == 404:
                    self.gone = True
                    raise
                if not retryable(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 10.0)

    def save(self, record: dict[str, Any]) -> None:
        """Write the record (and the heartbeat); nothing to do once the record is gone."""
        if self.gone:
            return
        self._beat = _now()
        patch = {
            "metadata": {"annotations": {HEARTBEAT_ANNOTATION: _iso(self._beat)}},
            "data": {RECORD_KEY: fit_record(record, self.limit)},
        }
        try:
            self._call(
                self.api.core.patch_namespaced_config_map, self.name, self.api.namespace, patch
            )
        except Exception as exc:
            if self.gone:
                return
            if getattr(exc, "status", None) in (413, 422):
                raise self._refused(exc) from None
            raise

    def _refused(self, exc: Any) -> Exception:
        """The API server refused the record: say so on the ConfigMap (an annotation, small
        enough to pass) so readers show `Failed` / `RecordRefused` at once; the error the
        driver stops with."""
        why = _api_message(exc)
        message = (
            f"The API server refused the sweep's record ({getattr(exc, 'status', '?')}: {why}), "
            "so its driver stopped: no more trials start. Trials already running go on; "
            "delete the sweep to stop them."
        )
        note = {"metadata": {"annotations": {REFUSED_ANNOTATION: message}}}
        with contextlib.suppress(Exception):
            self.api.core.patch_namespaced_config_map(self.name, self.api.namespace, note)
        return KFJupyterError(message)

    def cancel_requested(self) -> bool:
        """A SIGTERM, the cancel annotation, or the record deleted (read every look; the
        heartbeat is renewed every `HEARTBEAT_SECONDS`)."""
        if self.cancelled.is_set() or self.gone:
            return True
        try:
            obj = self._call(
                self.api.core.read_namespaced_config_map, self.name, self.api.namespace
            )
        except Exception:
            if self.gone:
                return True
            raise
        notes = obj.metadata.annotations or {}
        if _now() - self._beat > HEARTBEAT_SECONDS:
            self._beat = _now()
            beat = {"metadata": {"annotations": {HEARTBEAT_ANNOTATION: _iso(self._beat)}}}
            with contextlib.suppress(Exception):
                self.api.core.patch_namespaced_config_map(self.name, self.api.namespace, beat)
        return notes.get(CANCEL_ANNOTATION) == "true"


class PatientClient:
    """kf-jupyter's `TrainerClient` for the driver: `get_job` rides out a passing failure of
    the API server (up to `GIVE_UP_SECONDS`) instead of recording the trial as lost."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_job(self, name: str) -> Any:
        """The trial's job; a missing job or a refusal raises at once."""
        from ..errors import BackendError, ClusterUnreachableError

        deadline = time.monotonic() + GIVE_UP_SECONDS
        delay = 0.5
        while True:
            try:
                return self._client.get_job(name)
            except KFJupyterError as exc:
                passing = type(exc) in (ClusterUnreachableError, BackendError)
                if not passing or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 10.0)


def _api_message(exc: Any) -> str:
    """The API server's one-line reason in a refusal (its Status message), cut short."""
    body = getattr(exc, "body", None)
    text = ""
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        text = str(json.loads(body).get("message") or "")
    text = text or str(getattr(exc, "reason", "") or exc)
    return " ".join(text.split())[:500]


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _parse_iso(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except (TypeError, ValueError):
        return None


class KubernetesSweeps:
    """Start, read, cancel and delete sweeps of one namespace (any process, any machine)."""

    def __init__(self, config: KubernetesBackendConfig | None = None, client: Any = None) -> None:
        from ..client import TrainerClient

        self.config = config or KubernetesBackendConfig()
        #: kf-jupyter's `TrainerClient` on the cluster (one may be passed to share it).
        self.client = client if client is not None else TrainerClient(self.config)
        self.api: Any = self.client.backend
        self.namespace: str = self.api.namespace

    # -- the ConfigMap ------------------------------------------------------------------------

    def _cm(self, verb: str, method: str, *args: Any, name: str | None = None, **kw: Any) -> Any:
        """One ConfigMap request, as raw JSON; a missing sweep and every other failure become
        kf-jupyter's one-paragraph errors (a 403 names the missing permission)."""
        from ..backends.kubernetes.errors import Where

        try:
            resp = getattr(self.api.core, method)(*args, _preload_content=False, **kw)
            return json.loads(resp.data) if resp.data else {}
        except Exception as exc:
            if getattr(exc, "status", None) == 404 and name is not None:
                raise JobNotFoundError(
                    f"No sweep named {name!r} in namespace {self.namespace!r}. "
                    "OptimizerClient(...).list_jobs() lists the sweeps."
                ) from None
            raise self.api._error(exc, Where(verb, "configmaps", self.namespace, name)) from None

    def _read_cm(self, name: str) -> dict[str, Any]:
        from .local import validate_sweep_name

        validate_sweep_name(name)
        cm = self._cm("get", "read_namespaced_config_map", name, self.namespace, name=name)
        if (cm.get("metadata", {}).get("labels") or {}).get(RECORD_LABEL) != name:
            raise JobNotFoundError(
                f"ConfigMap {name!r} in namespace {self.namespace!r} is not a kf-jupyter sweep."
            )
        return cm

    def _patch_cm(self, name: str, body: dict[str, Any]) -> None:
        self._cm("patch", "patch_namespaced_config_map", name, self.namespace, body, name=name)

    def _record(self, cm: dict[str, Any]) -> dict[str, Any]:
        rec: dict[str, Any] = json.loads((cm.get("data") or {}).get(RECORD_KEY) or "{}")
        notes = cm.get("metadata", {}).get("annotations") or {}
        if rec.get("status") in eng.SWEEP_TERMINAL:
            return rec
        if notes.get(REFUSED_ANNOTATION):
            rec.update(
                status=eng.FAILED, reason=REASON_RECORD_REFUSED, message=notes[REFUSED_ANNOTATION]
            )
            return rec
        beat = _parse_iso(notes.get(HEARTBEAT_ANNOTATION))
        if beat is not None and _now() - beat > DRIVER_LOST_SECONDS:
            rec.update(
                status=eng.FAILED,
                reason=REASON_DRIVER_LOST,
                message=(
                    f"The sweep's driver ({notes.get(DRIVER_ANNOTATION, 'a process')}) has not "
                    f"said it is alive for {int(_now() - beat)} s (killed, or its machine "
                    "stopped): no more trials start. Trials already running go on; delete the "
                    "sweep to stop them."
                ),
            )
        return rec

    def read(self, name: str, curves: bool = True) -> dict[str, Any]:
        """The sweep's record (a driver gone silent is said: `Failed` / `DriverLost`); the
        curves are in the record (thinned to fit), whatever `curves`."""
        return self._record(self._read_cm(name))

    def list(self) -> list[dict[str, Any]]:
        """Every sweep's record in the namespace, oldest first."""
        found = self._cm(
            "list", "list_namespaced_config_map", self.namespace, label_selector=RECORD_LABEL
        )
        items = found.get("items") or []
        out = []
        for cm in items or []:
            with contextlib.suppress(ValueError):
                out.append(self._record(cm))
        out.sort(key=lambda r: r.get("created") or "")
        return out

    # -- start --------------------------------------------------------------------------------

    def driver_folder(self, name: str) -> Path:
        """The driver's folder on this machine (hand-over files, `driver.log`)."""
        from ..backends.local.config import LocalBackendConfig

        root = LocalBackendConfig().resolved_state_dir / DRIVERS / self.namespace
        return root / name

    def start(self, spec: eng.SweepSpec, template: eng.TrialTemplate) -> str:
        """Check the template (a dry run of trial 1), create the record, start the driver."""
        from ..backends.local import supervisor as sv
        from .local import driver_command, encode_template, validate_sweep_name

        validate_sweep_name(spec.name, spec.num_trials)
        record = eng.new_record(spec, "kubernetes")
        first = record["trials"][0]
        trainer, runtime, rc, opts = template.for_trial(spec.name, 1, first["parameters"])
        self.client.dry_run(trainer, runtime=runtime, runtime_config=rc, options=opts)
        data = encode_template(template)
        cfg = copy.copy(self.config)
        cfg.namespace = self.namespace
        if cfg.config_file:
            cfg.config_file = str(Path(cfg.config_file).expanduser().resolve())
        try:
            cfg_bytes = pickle.dumps(cfg)
        except Exception as exc:
            raise ValidationError(
                f"The backend configuration cannot be handed to the sweep's driver ({exc}). "
                "Use KubernetesBackendConfig(config_file=..., context=...) rather than a "
                "client_configuration object."
            ) from None
        served = optimizationjob_served(self.api)
        eng_event = {"time": eng.now_iso(), "reason": "TrialsFromClient"}
        record["events"].append({**eng_event, "message": why_client_runs_trials(served)})
        record["optimizationjob_api"] = served
        host = os.uname().nodename
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": spec.name,
                "labels": {RECORD_LABEL: spec.name, CREATED_BY_LABEL: CREATED_BY_VALUE},
                "annotations": {
                    HEARTBEAT_ANNOTATION: _iso(_now()),
                    DRIVER_ANNOTATION: f"starting on {host}",
                },
            },
            "data": {RECORD_KEY: fit_record(record)},
        }
        self._cm("create", "create_namespaced_config_map", self.namespace, cm)
        d = self.driver_folder(spec.name)
        try:
            d.parent.mkdir(mode=sv.PRIVATE_DIR, parents=True, exist_ok=True)
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(mode=sv.PRIVATE_DIR)
            whole = json.dumps(record).encode()  # the ConfigMap's copy may leave trials out
            handover = (("template.pkl", data), ("config.pkl", cfg_bytes), (RECORD_KEY, whole))
            for fname, blob in handover:
                with os.fdopen(sv.private_open(str(d / fname)), "wb") as fh:
                    fh.write(blob)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            with os.fdopen(sv.private_open(str(d / "driver.log"), flags), "ab") as out:
                proc = subprocess.Popen(
                    driver_command("kf_jupyter.sweeps.kubernetes", d),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    close_fds=True,
                )
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            with contextlib.suppress(Exception):
                self._cm("delete", "delete_namespaced_config_map", spec.name, self.namespace)
            raise
        threading.Thread(target=proc.wait, name="kf-jupyter-sweep-reaper", daemon=True).start()
        return spec.name

    # -- cancel, delete -----------------------------------------------------------------------

    def cancel(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """Stop the sweep: no new trial starts, running trials are suspended (their TrainJobs
        and metrics are kept), finished ones kept; `Failed` / `Cancelled`. Returns the record."""
        rec = self.read(name)
        if rec.get("status") in eng.SWEEP_TERMINAL and rec.get("reason") != REASON_DRIVER_LOST:
            return rec
        patch = {"metadata": {"annotations": {CANCEL_ANNOTATION: "true"}}}
        self._patch_cm(name, patch)
        if rec.get("reason") != REASON_DRIVER_LOST:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                rec = self.read(name)
                if rec.get("status") in eng.SWEEP_TERMINAL:
                    if rec.get("reason") != REASON_DRIVER_LOST:
                        return rec
                    break
                time.sleep(0.5)
        # No driver (lost): cancel its running trials from here and say so in the record.
        for t in eng.trials_of(rec, [eng.TRIAL_RUNNING]):
            with contextlib.suppress(Exception):
                cancel_trial(self.client, t["name"])
        for t in rec.get("trials") or []:
            if t["status"] in (eng.TRIAL_RUNNING, eng.PENDING):
                t.update(status=eng.CANCELLED, reason=eng.CANCELLED, finished=eng.now_iso())
        rec.update(status=eng.FAILED, reason=eng.REASON_CANCELLED)
        rec.update(message="The sweep was cancelled.", finished=eng.now_iso())
        with contextlib.suppress(Exception):
            body = {"data": {RECORD_KEY: fit_record(rec)}}
            self._patch_cm(name, body)
        return rec

    def trial_jobs(self, name: str) -> list[str]:
        """The names of every TrainJob labelled with the sweep (what delete removes)."""
        data = self.api._list_trainjobs(label_selector=f"{SWEEP_LABEL}={name}")
        return [o["metadata"]["name"] for o in data.get("items") or []]

    def delete(self, name: str) -> None:
        """Cancel the sweep if it runs, delete every trial TrainJob, then the record."""
        self.cancel(name)
        for job in self.trial_jobs(name):
            with contextlib.suppress(JobNotFoundError):
                self.client.delete_job(job)
        with contextlib.suppress(Exception):
            self._cm("delete", "delete_namespaced_config_map", name, self.namespace, name=name)
        shutil.rmtree(self.driver_folder(name), ignore_errors=True)


def cancel_trial(client: Any, name: str) -> None:
    """Stop a running trial: suspend its TrainJob (kept with its trainerStatus); where it cannot
    be suspended (Kueue holds it, or it just ended) delete it."""
    try:
        client.suspend_job(name)
    except KFJupyterError:
        with contextlib.suppress(JobNotFoundError):
            client.delete_job(name)


def main(folder: str) -> None:
    """The driver: run the sweep whose hand-over files are in `folder` to its end."""
    from .local import read_handover

    os.umask(0o077)
    eng.LIVE_READ_SECONDS = LIVE_READ_SECONDS  # this process runs one cluster sweep only
    d = Path(folder)
    template, config = read_handover(d, remove=("template.pkl", "config.pkl"))
    whole = d / RECORD_KEY  # every trial (the ConfigMap's record may leave some out)
    sweeps = KubernetesSweeps(config)
    name = d.name
    store = ConfigMapStore(sweeps.api, name)
    signal.signal(signal.SIGTERM, lambda *_: store.cancelled.set())
    patch = {
        "metadata": {"annotations": {DRIVER_ANNOTATION: f"pid {os.getpid()} on {os.uname()[1]}"}}
    }
    sweeps._patch_cm(name, patch)
    try:
        record = json.loads(whole.read_text())
        whole.unlink()
    except (OSError, ValueError):
        record = sweeps.read(name)
    spec = eng.SweepSpec.from_dict(record["spec"])
    engine = eng.SweepEngine(
        PatientClient(sweeps.client),
        spec,
        template,
        store,
        record=record,
        poll_seconds=POLL_SECONDS,
        cancel_trial=lambda job: cancel_trial(sweeps.client, job),
    )
    eng.run_to_end(engine, store)


__all__ = [
    "CANCEL_ANNOTATION",
    "RECORD_LABEL",
    "REFUSED_ANNOTATION",
    "ConfigMapStore",
    "KubernetesSweeps",
    "cancel_trial",
    "fit_record",
    "main",
    "optimizationjob_served",
    "why_client_runs_trials",
]
