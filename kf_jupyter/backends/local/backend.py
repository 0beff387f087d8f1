"""LocalBackend: every rank a real subprocess, with the environment the cluster would give it.

`train()` builds the TrainJob manifest (the same one a cluster gets), turns it into a launch plan,
writes the job folder and starts a detached supervisor (`supervisor.py`) that owns the processes.
Everything else (list, get, logs, wait, delete, events, result) works from the job folder alone,
so any process that sees the state directory sees the same jobs. See docs/local-backend.md.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import pickle
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ... import phases
from ...build import LaunchPlan, build_launch_plan, build_trainjob
from ...config import RuntimeConfig, SecretRef, mask_object, mask_secrets
from ...errors import (
    BackendError,
    JobFailedError,
    JobNotFoundError,
    JobStateError,
    ValidationError,
    WaitTimeoutError,
)
from ...failure import failure_from_dict
from ...program import index_env
from ...progress import parse_trainer_status
from ...runtimes import Runtime
from ...trainers import BaseTrainer
from ...types import (
    COMPLETE,
    CREATED,
    FAILED,
    RUNNING,
    SUSPENDED,
    TERMINAL,
    Event,
    LogRecord,
    Step,
    TrainerStatus,
    TrainJob,
)
from ...workspace import ENV_DIR as WS_ENV_DIR
from ...workspace import ENV_RUN_DIR as WS_ENV_RUN_DIR
from ...workspace import copy_into, local_outputs, snapshot_for
from ..base import StatusCallback, human_records, resolve_runtime_arg, tag_records
from . import gpus as gpu
from . import index as job_index
from . import ports, supervisor_host
from . import supervisor as sv
from .config import LocalBackendConfig
from .envs import env_python_of, satisfied
from .logs import iter_records
from .runtimes import canonical_name, check_emulable, find_runtime, local_runtimes
from .status_endpoint import STATUS_FILE
from .waker import JobWaker
from .warm import launch as warm_launch
from .warm import pool as warm_pool

log = logging.getLogger("kf_jupyter.local")

WAIT_POLL_SECONDS = 0.02
WARM_ANNOTATION = "kf-jupyter.io/warm"
DELETE_WAIT_SECONDS = 8.0
CONTROL_WAIT_SECONDS = 30.0  # suspend: SIGTERM, grace, SIGKILL, then the status is written


def _time(value: Any) -> datetime | None:
    return datetime.fromtimestamp(float(value), UTC) if value else None


_PRIVATE_MARK = ".private-v1"


def make_store_private(state_dir: Path) -> None:
    """The state directory and everything in it owner-only (0700 dirs, 0600 files).

    New files are created that way; a store made by an older version (0755/0644) is tightened
    once, on first use: group and other bits are removed from everything in it (the owner's
    own bits, such as a venv's executables, stay).
    """
    try:
        state_dir.chmod(sv.PRIVATE_DIR)
    except OSError:  # not there yet (made private when created), or not ours: leave it
        return
    mark = state_dir / _PRIVATE_MARK
    if mark.exists():
        return
    for root, dirs, files in os.walk(state_dir):
        for entry in [*dirs, *files]:
            path = os.path.join(root, entry)
            with contextlib.suppress(OSError):
                mode = os.lstat(path).st_mode
                if not stat.S_ISLNK(mode) and mode & 0o077:
                    os.chmod(path, stat.S_IMODE(mode) & ~0o077)
    with contextlib.suppress(OSError):
        os.close(sv.private_open(str(mark)))


# The ports this process leased to the jobs it started, by job folder (issue 40); given back
# when the process ends (the job's supervisor holds its own).
_PORT_LEASES: dict[Path, ports.Lease] = {}
_PORT_LEASES_LOCK = threading.Lock()


@atexit.register
def _give_back_leases() -> None:
    with _PORT_LEASES_LOCK:
        for lease in _PORT_LEASES.values():
            lease.close()
        _PORT_LEASES.clear()


def _lease_port() -> ports.Lease:
    """A port leased machine-wide for a new job, after giving back the leases of jobs whose
    supervisor now holds its own port, or that are over."""
    with _PORT_LEASES_LOCK:
        for jd, lease in list(_PORT_LEASES.items()):
            if _lease_done(jd, lease.port):
                lease.close()
                del _PORT_LEASES[jd]
    try:
        return ports.lease_port()
    except ValueError as exc:  # a malformed KF_JUPYTER_PORT_RANGE
        raise ValidationError(str(exc)) from None
    except OSError as exc:
        raise BackendError(f"The job could not get a rendezvous port: {exc}") from None


def _lease_done(jd: Path, port: int) -> bool:
    if ports.held_by_supervisor(port):
        return True
    st = sv.read_json(str(jd / "status.json")) if (jd / "status.json").exists() else None
    return not isinstance(st, dict) or st.get("status") in TERMINAL


def _reap_in_background(proc: subprocess.Popen[bytes]) -> None:
    threading.Thread(target=proc.wait, name="kf-jupyter-reaper", daemon=True).start()


class LocalBackend:
    """The embedded default backend (see the module docstring)."""

    name = "local"

    def __init__(self, config: LocalBackendConfig | None = None) -> None:
        self.config = config or LocalBackendConfig()
        self._private = False
        self._index: job_index.JobIndex | None = None
        self._index_lock = threading.Lock()

    # ------------------------------------------------------------------ paths

    @property
    def state_dir(self) -> Path:
        """The state directory (jobs/ and envs/ live here)."""
        return self.config.resolved_state_dir

    @property
    def jobs_dir(self) -> Path:
        """One folder per job."""
        if not self._private:
            self._private = True
            make_store_private(self.state_dir)
        return self.state_dir / "jobs"

    def job_dir(self, name: str) -> Path:
        """The folder of job `name` (JobNotFoundError when there is none)."""
        if (
            not isinstance(name, str)
            or not name
            or "/" in name
            or name.startswith(".")
            or len(name.encode("utf-8", "surrogatepass")) > 255  # no file name is longer
        ):
            raise JobNotFoundError(f"No local job named {name!r}.")
        path = self.jobs_dir / name
        if not (path / "status.json").exists():
            known = ", ".join(sorted(self._job_names())[:20]) or "none"
            raise JobNotFoundError(
                f"No local job named {name!r} in {self.jobs_dir}. Jobs there: {known}. List "
                "them with client.list_jobs()."
            )
        return path

    def _job_names(self) -> list[str]:
        try:
            return [e.name for e in os.scandir(self.jobs_dir) if e.is_dir()]
        except FileNotFoundError:
            return []

    # ------------------------------------------------------------------ runtimes

    def list_runtimes(self, framework: str | None = None) -> list[Runtime]:
        """The default Trainer install's runtimes (torch-distributed, ...; see runtimes.py)."""
        return [r for r in local_runtimes() if framework is None or r.framework == framework]

    def get_runtime(self, name: str) -> Runtime:
        """One local runtime by name (the old `local-*` names still work, with a warning)."""
        return find_runtime(name)

    # ------------------------------------------------------------------ submit

    def _python(self) -> str:
        return self.config.python or sys.executable

    def _prepare(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None,
        runtime_config: RuntimeConfig | None,
        options: Iterable[Any] | None,
        job_dir: Path | None = None,
        lease: ports.Lease | None = None,
    ) -> tuple[dict[str, Any], LaunchPlan, Runtime, int]:
        if isinstance(runtime, str):
            runtime = canonical_name(runtime)
        rt = resolve_runtime_arg(self, trainer, runtime)
        check_emulable(rt)
        manifest = build_trainjob(trainer, rt, runtime_config, options, backend=self)
        name = manifest["metadata"]["name"]
        jd = job_dir or (self.jobs_dir / name)
        if lease is None:  # a preview: a port free now, given back at once
            lease = _lease_port()
            lease.close()
        port = lease.port
        plan = build_launch_plan(manifest, trainer, rt, port, str(jd))
        return manifest, plan, rt, port

    def dry_run(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> dict[str, Any]:
        """The manifest and the local launch plan train() would use; nothing is started."""
        manifest, plan, _, _ = self._prepare(trainer, runtime, runtime_config, options)
        snap = snapshot_for(trainer, runtime_config, self._cwd(), [self.state_dir])
        gpus = self._gpu_preview(plan)
        # A preview is printed and shown: credentials in index URLs are masked.
        return mask_object(
            {"backend": self.name, "trainjob": manifest, "plan": plan.to_dict()}
            | (
                {"workspace": snap.summary() | {"outputs": local_outputs(snap.root)}}
                if snap
                else {}
            )
            | ({"gpus": gpus} if gpus else {})
        )

    # ------------------------------------------------------------------ GPUs

    @staticmethod
    def gpu_requests(plan: LaunchPlan) -> dict[str, int]:
        """{process: devices} this job takes: k per node (one launcher holds all of an MPI
        job's: mpirun starts every rank itself)."""
        k = plan.shape.gpus_per_node
        if k <= 0:
            return {}
        if plan.policy == "mpi":
            return {p.name: k * plan.shape.num_nodes for p in plan.processes}
        return {p.name: k for p in plan.processes}

    @staticmethod
    def _check_mig(manifest: dict[str, Any]) -> None:
        limits = ((manifest["spec"].get("trainer") or {}).get("resourcesPerNode") or {}).get(
            "limits"
        ) or {}
        mig = sorted(k for k in limits if k.startswith("nvidia.com/mig-"))
        if mig:
            raise ValidationError(
                f"The job asks for MIG slices ({', '.join(mig)}), which the local backend does "
                "not hand out (it gives whole GPUs: resources_per_node={'gpu': k}). Ask for "
                "whole GPUs to run it here, or run it on a cluster."
            )

    def gpu_inventory(self, plan: LaunchPlan) -> list[dict[str, Any]]:
        """This machine's GPUs for a job that asks for some (nvidia-smi); ValidationError when
        it asks for more than there are, or there are none."""
        requests = self.gpu_requests(plan)
        need = sum(requests.values())
        k, n = plan.shape.gpus_per_node, plan.shape.num_nodes
        asked = f"{k} GPU{'s' if k != 1 else ''} on each of its {n} nodes ({need} in all)"
        if n == 1:
            asked = f"{k} GPU{'s' if k != 1 else ''}"
        try:
            inventory = gpu.discover()
        except gpu.GPUQueryError as exc:
            raise ValidationError(
                f"Job {plan.job_name!r} asks for {asked}, but this machine's GPUs could not be "
                f"listed: {exc}. Check the NVIDIA driver (run nvidia-smi), or run the job on a "
                "cluster, or without resources_per_node gpu."
            ) from None
        if not inventory:
            raise ValidationError(
                f"Job {plan.job_name!r} asks for {asked}, but this machine has no NVIDIA GPU "
                "(nvidia-smi is not on PATH). Run it on a cluster, or locally without "
                "resources_per_node gpu (the ranks then run on the CPU)."
            )
        if need > len(inventory):
            listed = ", ".join(gpu.device_label(d) for d in inventory)
            raise ValidationError(
                f"Job {plan.job_name!r} asks for {asked}, but this machine has only "
                f"{len(inventory)} ({listed}). Ask for fewer GPUs per node or fewer nodes (at "
                f"most {len(inventory)} in all), or run it on a cluster."
            )
        return inventory

    def _gpu_preview(self, plan: LaunchPlan) -> dict[str, Any] | None:
        """The device plan --dry-run shows: what each node would get if it started now."""
        requests = self.gpu_requests(plan)
        if not requests:
            if gpu.smi_path() is not None:
                return {"per_node": 0, "note": "no GPU asked for: every node gets none"}
            return None
        inventory = self.gpu_inventory(plan)
        held = gpu.allocations(str(self.state_dir), sv.same_process)
        free = [d for d in inventory if d["uuid"] not in held]
        need = sum(requests.values())
        out: dict[str, Any] = {
            "per_node": plan.shape.gpus_per_node,
            "devices": inventory,
            "free": len(free),
            "nccl_defaults": dict(gpu.NCCL_DEFAULTS),
        }
        if need > len(free):
            out["plan"] = None
            out["note"] = gpu.waiting_message(need, len(free), gpu.holders(held))
            return out
        it = iter(free)
        plan_map = {p: [next(it) for _ in range(k)] for p, k in requests.items()}
        out["plan"] = {
            p: {
                "devices": [gpu.device_label(d) for d in devs],
                "CUDA_VISIBLE_DEVICES": ",".join(d["uuid"] for d in devs),
            }
            for p, devs in plan_map.items()
        }
        out["note"] = "devices free now; the job takes its own when it starts"
        return out

    def gpu_usage(self, name: str) -> dict[str, dict[str, Any]]:
        """Utilisation and memory of each device job `name` holds now ({uuid: {...}}, with
        the node and index), from nvidia-smi; {} when it holds none or nvidia-smi fails."""
        st = self._status(name)
        plan = st.get("gpus") or {}
        if st.get("status") != RUNNING or not plan:
            return {}
        where = {d["uuid"]: (node, d) for node, devs in plan.items() for d in devs}
        try:
            now = gpu.usage(list(where))
        except gpu.GPUQueryError:
            return {}
        return {
            u: {"node": where[u][0], "index": where[u][1].get("index"), **vals}
            for u, vals in now.items()
        }

    @staticmethod
    def _check_secrets(plan: LaunchPlan) -> None:
        missing: dict[str, SecretRef] = {}
        for p in plan.processes:
            for key, ref in p.secret_env.items():
                if key not in os.environ:
                    missing[key] = ref
        if missing:
            items = ", ".join(f"{k} (Secret {r.name}/{r.key})" for k, r in missing.items())
            raise ValidationError(
                f"The job takes {items} from a Kubernetes Secret. Locally such a value is read "
                "from the kernel's environment variable of the same name, which is not set. Set "
                f"it first (for example os.environ[{next(iter(missing))!r}] = ...) or give the "
                "value directly in RuntimeConfig.env for local runs."
            )

    def _job_python(
        self, runtime_config: RuntimeConfig | None
    ) -> tuple[str, bool, dict[str, Any] | None]:
        """(python to run, packages provided, how to build its environment first or None).

        A layered environment that is not built yet is built by the job's supervisor as the
        job's first phase (`prepare` in spawn.json), so the job exists, and says what it does,
        for the whole pip install (docs/local-backend.md, "Packages")."""
        python = self._python()
        packages = runtime_config.packages if runtime_config else []
        if not packages or satisfied(python, packages):
            return python, True, None
        index_urls = runtime_config.index_urls if runtime_config else []
        envs_dir = self.state_dir / "envs"
        env_python, ready = env_python_of(python, packages, index_urls, envs_dir)
        if ready:
            return str(env_python), True, None
        n = len(packages)
        prepare = {
            # the kernel's interpreter has kf_jupyter; the environment is built on `python`
            "argv": [
                sys.executable,
                "-m",
                "kf_jupyter.backends.local.envs",
                str(envs_dir),
                python,
                "",  # the error file: the supervisor puts it in the job's folder
                *packages,
            ],
            # index URLs (maybe with credentials) through the environment, never the argv
            "env": index_env(index_urls),
            "message": (
                f"installing {n} package{'s' if n != 1 else ''} "
                f"({mask_secrets(', '.join(packages))}) with pip"
            ),
        }
        return str(env_python), True, prepare

    def train(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None = None,
        runtime_config: RuntimeConfig | None = None,
        options: Iterable[Any] | None = None,
    ) -> str:
        """Start the job; return its name (it runs on after the kernel is gone)."""
        lease = _lease_port()
        try:
            name = self._train(trainer, runtime, runtime_config, options, lease)
        except BaseException:
            lease.close()
            raise
        # Held until the job's supervisor holds the port itself or the job is over (ports.py).
        with _PORT_LEASES_LOCK:
            _PORT_LEASES[self.jobs_dir / name] = lease
        return name

    def _train(
        self,
        trainer: BaseTrainer,
        runtime: Runtime | str | None,
        runtime_config: RuntimeConfig | None,
        options: Iterable[Any] | None,
        lease: ports.Lease,
    ) -> str:
        manifest, plan, rt, _ = self._prepare(
            trainer, runtime, runtime_config, options, None, lease
        )
        name = manifest["metadata"]["name"]
        self._check_secrets(plan)
        self._check_mig(manifest)
        inventory = self.gpu_inventory(plan) if self.gpu_requests(plan) else []
        cwd = self._cwd()
        if not os.path.isdir(cwd):
            raise ValidationError(
                f"The working directory {cwd!r} for the job does not exist; set "
                "LocalBackendConfig(cwd=...) to an existing directory."
            )
        snap = snapshot_for(trainer, runtime_config, cwd, [self.state_dir])
        python, provided, prepare = self._job_python(runtime_config)
        jd = self.jobs_dir / name
        try:
            self.jobs_dir.mkdir(mode=sv.PRIVATE_DIR, parents=True, exist_ok=True)
            make_store_private(self.state_dir)
            jd.mkdir(mode=sv.PRIVATE_DIR)
        except FileExistsError:
            raise ValidationError(
                f"A local job named {name!r} already exists. Delete it with "
                f"client.delete_job({name!r}) or choose another name."
            ) from None
        except OSError as exc:
            if sv.is_disk_full(exc):
                raise self._disk_full(exc) from None
            raise
        try:
            if snap is not None:  # taken now: a module edited later does not change the job
                copy_into(snap, jd / "workspace")
                # The ranks run in the folder itself, as under plain torchrun, so what they write
                # there (a checkpoint, a model file) is next to the notebook; the runner puts
                # the snapshot first on sys.path, so imports come from the submit-time copy.
                cwd = snap.root
            return self._launch(
                jd, manifest, plan, rt, python, provided, cwd, trainer, inventory, prepare, lease
            )
        except OSError as exc:
            shutil.rmtree(jd, ignore_errors=True)
            if sv.is_disk_full(exc):
                raise self._disk_full(exc) from None
            raise
        except BaseException:
            shutil.rmtree(jd, ignore_errors=True)
            raise

    def _cwd(self) -> str:
        return str(Path(self.config.cwd).expanduser()) if self.config.cwd else os.getcwd()

    def _disk_full(
        self, exc: OSError, what: str = "the job could not be written to"
    ) -> BackendError:
        return BackendError(
            f"No space left on device: {what} {self.jobs_dir} ({exc.strerror}). Free some space "
            "there, or put the jobs on a larger disk with LocalBackendConfig(state_dir=...), "
            "and run the job again."
        )

    def _process_env(
        self, plan: LaunchPlan, index: int, jd: Path, python: str, provided: bool, cwd: str
    ) -> dict[str, str]:
        proc = plan.processes[index]
        bindirs = [os.path.dirname(python)]
        base_bin = os.path.dirname(self._python())
        if base_bin not in bindirs:
            bindirs.append(base_bin)
        env: dict[str, str] = {
            "PATH": os.pathsep.join([*bindirs, os.environ.get("PATH", os.defpath)]),
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(jd / "tmp"),
            # torch's documented knob for a race of its own: without it a rank that returns
            # from init_process_group and exits at once (the SDK's example) can close the gloo
            # mesh under a peer still connecting ("Connection closed by peer"; 5 of 410 jobs on
            # a loaded machine, 0 of 350 with it: docs/local-backend.md). The kernel's or
            # RuntimeConfig's value wins.
            "TORCH_DIST_INIT_BARRIER": os.environ.get("TORCH_DIST_INIT_BARRIER", "1"),
        }
        if plan.shape.gpus_per_node > 0:
            # Single-host NCCL (gpus.NCCL_DEFAULTS); the kernel's or RuntimeConfig's value wins.
            env.update({k: os.environ.get(k, v) for k, v in gpu.NCCL_DEFAULTS.items()})
        elif gpu.smi_path() is not None:
            # A pod that asks for no GPU sees none, even on a GPU node: so does a local node
            # (and it cannot touch a device another job holds). RuntimeConfig.env may say else.
            env["CUDA_VISIBLE_DEVICES"] = ""
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
        env.update(proc.env)  # RuntimeConfig env, then the policy's (the policy wins)
        env.update(
            {
                "KF_JUPYTER_WORKDIR": str(jd / "work" / proc.name),
                "KF_JUPYTER_RANK_LOG_DIR": str(jd / "logs"),
                "KF_JUPYTER_RESULT_FILE": str(jd / "result.pkl"),
                "KF_JUPYTER_NODE_RANK": str(proc.node_index),
                "KF_JUPYTER_JOB_NAME": plan.job_name,
                # No pod here: a notebook server running in a pod must keep its own message.
                "KF_JUPYTER_TERMINATION_LOG": "",
            }
        )
        if provided:
            env["KF_JUPYTER_SKIP_INSTALL"] = "1"
        if (jd / "workspace").is_dir():
            env[WS_ENV_DIR] = str(jd / "workspace")
            env[WS_ENV_RUN_DIR] = cwd
        return env

    def prestart_pool(
        self, framework: str = "torch", make_room: bool = True
    ) -> warm_pool.Pool | None:
        """Start the warm pool a default job of `framework` would use (None if it has none).

        `make_room=False` (a start ahead of need, as `%load_ext` does): only if it fits under
        `warm_max_pools` and `warm_max_memory_mib` beside the pools that run, never stopping
        one (a pool that already runs is returned as it is)."""
        if not self.config.warm or framework not in warm_pool.PRELOAD:
            return None
        python = self._python()
        bindirs = [os.path.dirname(python)]
        env = {
            **os.environ,
            "PATH": os.pathsep.join([*bindirs, os.environ.get("PATH", os.defpath)]),
            # As every job's environment has it (_process_env): the pool is keyed on TORCH_*.
            "TORCH_DIST_INIT_BARRIER": os.environ.get("TORCH_DIST_INIT_BARRIER", "1"),
        }
        launcher = warm_pool.LAUNCHER[framework]
        interp = warm_pool.interpreter_for(launcher, env["PATH"].split(os.pathsep))
        if interp is None:
            return None
        self.prestart_supervisor_host()
        try:
            pool = warm_pool.pool_for(self.state_dir, interp, framework, env)
            meta = warm_pool._read_meta(pool.meta) or {}
            running = bool(meta.get("pid")) and warm_pool._alive(int(meta["pid"]))
            if not (make_room or running) and not warm_pool.has_room(
                self.state_dir,
                framework,
                self.config.warm_max_pools,
                self.config.warm_max_memory_mib,
            ):
                log.info("no %s pool started ahead: the pool caps are reached", framework)
                return None
            warm_pool.ensure_started(
                pool,
                env,
                self.config.warm_idle_seconds,
                self.config.warm_max_pools,
                self.config.warm_max_memory_mib,
            )
        except OSError as exc:
            log.info("no warm pool for %s: %s", framework, exc)
            return None  # jobs start cold and say why
        return pool

    def _warm_pool(
        self, manifest: dict[str, Any], plan: LaunchPlan, env: dict[str, str]
    ) -> tuple[warm_pool.Pool | None, str]:
        """The warm pool for this job's nodes, or None and why the job starts cold."""
        if not self.config.warm:
            return None, "warm starts are off (LocalBackendConfig(warm=False))"
        annotations = (manifest.get("metadata") or {}).get("annotations") or {}
        if annotations.get(WARM_ANNOTATION) == "false":
            return None, "warm starts are off for this job (Warm(False))"
        launcher = warm_pool.LAUNCHER.get(plan.policy)
        if launcher is None:
            if plan.policy == "mpi":
                return None, "the mpi policy's launcher starts its own ranks"
            return None, f"the {plan.policy} policy has no warm pool"
        python = warm_pool.interpreter_for(launcher, env["PATH"].split(os.pathsep))
        if python is None:
            return None, f"the interpreter of {launcher} on the job's PATH is not known"
        try:
            return warm_pool.pool_for(self.state_dir, python, plan.policy, env), ""
        except OSError as exc:  # e.g. another user took the sockets' folder: never fail the job
            return None, f"the warm pool is unavailable ({exc})"

    def _launch(
        self,
        jd: Path,
        manifest: dict[str, Any],
        plan: LaunchPlan,
        rt: Runtime,
        python: str,
        provided: bool,
        cwd: str,
        trainer: BaseTrainer,
        inventory: list[dict[str, Any]] | None = None,
        prepare: dict[str, Any] | None = None,
        lease: ports.Lease | None = None,
    ) -> str:
        name = plan.job_name
        for sub in ("logs", "tmp", "work"):
            (jd / sub).mkdir(mode=sv.PRIVATE_DIR)
        envs = [
            self._process_env(plan, i, jd, python, provided, cwd)
            for i in range(len(plan.processes))
        ]
        # The supervisor starts each process with its own environment plus these.
        node_env = {**os.environ, **envs[0]} if envs else {}
        pool, cold_why = self._warm_pool(manifest, plan, node_env) if envs else (None, "")
        if prepare is not None and envs:
            # the environment's interpreter is not there yet: no pool can be chosen for it
            pool, cold_why = None, "its package environment is built first"
        if pool is not None:
            try:
                warm_pool.ensure_started(
                    pool,
                    node_env,
                    self.config.warm_idle_seconds,
                    self.config.warm_max_pools,
                    self.config.warm_max_memory_mib,
                )
                for env in envs:
                    env.update(warm_pool.warm_env(self.state_dir, pool, env["PATH"]))
            except OSError as exc:
                cold_why = f"the warm pool could not start ({exc})"
        # A warm node whose command is exactly the script kf-jupyter generated is handed to the
        # pool by the supervisor itself, without bash and the shim (direct.py).
        direct: list[dict[str, Any]] = [{} for _ in plan.processes]
        if pool is not None and not cold_why:
            for i, p in enumerate(plan.processes):
                launch, why = warm_launch.known_launch(list(p.argv), envs[i])
                direct[i] = {"direct": launch} if launch else {"direct_why": why}
        spawn = {
            "job": name,
            "port": lease.port if lease is not None else None,  # the supervisor holds it too
            "cwd": cwd,
            "deadline_seconds": plan.deadline_seconds,
            "python": python,
            "prepare": prepare,
            "gpus": {
                "requests": self.gpu_requests(plan),
                "inventory": inventory,
                "state_dir": str(self.state_dir),
            }
            if self.gpu_requests(plan)
            else None,
            "processes": [
                {
                    "name": p.name,
                    "node_index": p.node_index,
                    "argv": p.argv,
                    "env": envs[i],
                    "files": p.files,
                    **direct[i],
                }
                for i, p in enumerate(plan.processes)
            ],
        }
        fd = os.open(jd / "spawn.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(spawn, fh)
        sv.atomic_write_json(str(jd / "job.json"), mask_object(manifest))
        sv.atomic_write_json(str(jd / "plan.json"), mask_object(plan.to_dict()))
        now = time.time()
        sv.atomic_write_json(
            str(jd / "status.json"),
            {
                "name": name,
                "status": CREATED,
                "reason": "",
                "message": "",
                "created": now,
                "runtime": rt.name,
                "framework": rt.framework,
                # the TrainJob's labels (a sweep's trials are found by them, issue 25)
                "labels": dict((manifest.get("metadata") or {}).get("labels") or {}),
                "policy": plan.policy,
                "num_nodes": plan.shape.num_nodes,
                "num_proc_per_node": plan.shape.num_proc_per_node,
                "world_size": plan.shape.world_size,
                "gpus_per_node": plan.shape.gpus_per_node,
                "trainer": type(trainer).__name__,
                # the ranks run kf-jupyter's runner, which records their startup phases
                "runner": any("kf_entry.py" in " ".join(p.argv) for p in plan.processes),
                "python": python,
                "cwd": cwd,
                "processes": {},
            },
        )
        job_index.note(self.state_dir, name)  # every reader re-reads this name
        sv.append_event(str(jd), "Normal", "Created", f"job {name} created", name)
        if cold_why:
            sv.append_event(str(jd), "Normal", "ColdStart", f"every node starts cold: {cold_why}")
            with contextlib.suppress(OSError):
                warm_pool.record_cold(self.state_dir, name, cold_why)
        pid = self._start_supervisor(jd)
        ident = sv.process_identity(pid)

        def record(st: dict[str, Any]) -> None:
            st.setdefault("supervisor_pid", pid)
            st.setdefault("supervisor_create_time", ident)

        sv.update_status(str(jd), record)
        log.info("local job %s started (supervisor pid %s)", name, pid)
        return name

    def _start_supervisor(self, jd: Path) -> int:
        """The job's supervisor: forked by the supervisor host when one listens (no Python
        start, imports or certificate on the job's path: supervisor_host.py), else started as
        a process, as before; its pid."""
        if self.config.warm:
            pid, why = supervisor_host.submit(self.state_dir, jd)
            if pid is not None:
                return pid
            log.debug("supervisor of %s started as a process: %s", jd.name, why)
            with contextlib.suppress(OSError):  # for the next job
                supervisor_host.ensure_started(self.state_dir, self.config.warm_idle_seconds)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        with os.fdopen(sv.private_open(str(jd / "supervisor.log"), flags), "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-I", sv.__file__, str(jd)],
                # The kernel's os.environ, as the supervisor host gives its supervisors: not the
                # C-level environ, which a C library may have changed behind it (readline sets
                # LINES and COLUMNS), so a job's environment is the same on either path.
                env=dict(os.environ),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        _reap_in_background(proc)
        return proc.pid

    def prestart_supervisor_host(self) -> None:
        """Start the supervisor host (the fork server of job supervisors) unless it runs."""
        if self.config.warm:
            with contextlib.suppress(OSError):
                supervisor_host.ensure_started(self.state_dir, self.config.warm_idle_seconds)

    # ------------------------------------------------------------------ read

    def _status(self, name: str) -> dict[str, Any]:
        jd = self.job_dir(name)
        st = sv.read_json(str(jd / "status.json"))
        if st.get("status") not in TERMINAL and not self._supervisor_alive(st):
            # The supervisor is gone without a word (killed, machine rebooted): say so.
            time.sleep(0.1)
            st = sv.read_json(str(jd / "status.json"))
            if st.get("status") not in TERMINAL and not self._supervisor_alive(st):
                message = (
                    "The job's supervisor process is gone (killed, or the machine restarted), "
                    "so the job cannot finish. Delete it and run it again."
                )
                try:
                    sv.finish_status(str(jd), FAILED, sv.REASON_LOST, message)
                except OSError as exc:
                    if not sv.is_disk_full(exc):
                        raise
                    # Say it anyway; it is written by the next reader once there is space.
                    return {**st, "status": FAILED, "reason": sv.REASON_LOST, "message": message}
                st = sv.read_json(str(jd / "status.json"))
        return st

    @staticmethod
    def _supervisor_alive(st: dict[str, Any]) -> bool:
        pid = st.get("supervisor_pid")
        if not pid:
            return True  # being launched
        return sv.same_process(int(pid), st.get("supervisor_create_time"))

    def _to_trainjob(self, st: dict[str, Any]) -> TrainJob:
        steps = []
        for pname, info in sorted((st.get("processes") or {}).items()):
            code = info.get("exit_code")
            if st.get("status") == SUSPENDED:
                pstatus = SUSPENDED  # stopped by the suspension, not failed
            elif code is None:
                pstatus = RUNNING if st.get("status") == RUNNING else st.get("status", CREATED)
            else:
                pstatus = COMPLETE if code == 0 else FAILED
            steps.append(
                Step(
                    name=pname,
                    status=pstatus,
                    rank=info.get("node_index"),
                    exit_code=code,
                    pid=info.get("pid"),
                )
            )
        return TrainJob(
            name=st["name"],
            status=st.get("status", CREATED),
            backend=self.name,
            runtime=st.get("runtime", ""),
            framework=st.get("framework", ""),
            num_nodes=int(st.get("num_nodes") or 1),
            num_proc_per_node=st.get("num_proc_per_node"),
            reason=st.get("reason", ""),
            message=st.get("message", ""),
            creation_time=_time(st.get("created")),
            completion_time=_time(st.get("finished")),
            steps=steps,
            labels={str(k): str(v) for k, v in (st.get("labels") or {}).items()},
            trainer_status=self._trainer_status(st["name"]),
            failure=failure_from_dict(st.get("failure")),
            warm=self._warm_state(st["name"]),
            gpus={
                str(k): [d for d in v if isinstance(d, dict)]
                for k, v in (st.get("gpus") or {}).items()
                if isinstance(v, list)
            }
            if st.get("status") != SUSPENDED  # a suspended job gave its devices back
            else {},
            phase=self._phase(st),
        )

    def _phase(self, st: dict[str, Any]) -> str:
        """What a Created or Running job is doing before its first line, from its events
        (kf_jupyter/phases.py); "" for any other state."""
        if st.get("status") not in phases.ACTIVE:
            return ""
        events = []
        with contextlib.suppress(OSError):
            with open(self.job_dir(st["name"]) / "events.jsonl", encoding="utf-8") as fh:
                for line in fh:
                    with contextlib.suppress(ValueError):
                        e = json.loads(line)
                        if isinstance(e, dict):
                            events.append(e)
        return phases.local_phase(
            events,
            int(st.get("world_size") or 1),
            runner=bool(st.get("runner", True)),
            processes=len(st.get("processes") or {}) or int(st.get("num_nodes") or 1),
        )

    def _trainer_status(self, name: str) -> TrainerStatus | None:
        """What the job's ranks last posted to its status endpoint (status_endpoint.py)."""
        try:
            data = sv.read_json(str(self.job_dir(name) / STATUS_FILE))
        except (OSError, ValueError):
            return None
        return parse_trainer_status(data.get("trainerStatus") if isinstance(data, dict) else None)

    def _warm_state(self, name: str) -> bool | None:
        """True if every node started warm, False if one started cold, None before they start."""
        jd = self.job_dir(name)
        states = []
        with contextlib.suppress(OSError):
            for entry in os.scandir(jd):
                if entry.name.startswith("warm-node-") and entry.name.endswith(".json"):
                    with contextlib.suppress(OSError, ValueError):
                        states.append(bool(sv.read_json(entry.path).get("warm")))
        if not states:
            return False if (jd / "events.jsonl").exists() and self._cold_event(jd) else None
        return all(states)

    @staticmethod
    def _cold_event(jd: Path) -> bool:
        with contextlib.suppress(OSError):
            with open(jd / "events.jsonl", encoding="utf-8") as fh:
                return any('"ColdStart"' in line for line in fh)
        return False

    def get_job(self, name: str) -> TrainJob:
        """The job as its status file says (Failed/SupervisorLost if its supervisor vanished)."""
        return self._to_trainjob(self._status(name))

    def list_jobs(self) -> list[TrainJob]:
        """Every job in the state directory, oldest first.

        Finished jobs come from the index (index.py: kept consistent with the job folders, so a
        poll reads only the jobs that changed and those not finished yet)."""
        return self.jobs_index().jobs()

    def newest_jobs(self, n: int) -> tuple[list[TrainJob], int]:
        """The `n` newest jobs (oldest first) and how many there are in all (for %kf_jobs)."""
        return self.jobs_index().newest(n)

    def list_jobs_json(self) -> str:
        """The JSON array of list_jobs()'s to_dict()s (finished jobs' JSON is cached)."""
        return self.jobs_index().jobs_json()

    def jobs_index(self) -> job_index.JobIndex:
        """This backend's job index (made on first use)."""
        with self._index_lock:
            if self._index is None:
                self._index = job_index.JobIndex(self.state_dir, self.jobs_dir, self._read_job)
            return self._index

    def _read_job(self, name: str) -> TrainJob | None:
        """The job read from its folder; None if it is not (or no longer, or not yet) there."""
        if not (self.jobs_dir / name / "status.json").exists():
            return None
        with contextlib.suppress(JobNotFoundError, OSError, ValueError, KeyError):
            return self.get_job(name)
        return None

    def scan_jobs(self) -> list[TrainJob]:
        """Every job read from its folder, without the index (what rebuilding it costs)."""
        jobs = [j for j in map(self._read_job, self._job_names()) if j is not None]
        return sorted(jobs, key=lambda j: j.creation_time or datetime.min.replace(tzinfo=UTC))

    def get_job_events(self, name: str) -> list[Event]:
        """created, started process X pid, process X exited code, Running, Complete/Failed."""
        jd = self.job_dir(name)
        events = []
        with (
            contextlib.suppress(FileNotFoundError),
            open(jd / "events.jsonl", encoding="utf-8") as fh,
        ):
            for line in fh:
                with contextlib.suppress(ValueError):
                    e = json.loads(line)
                    events.append(
                        Event(
                            _time(e.get("time")),
                            e["type"],
                            e["reason"],
                            e["message"],
                            e.get("object", ""),
                        )
                    )
        return events

    def get_job_result(self, name: str) -> Any:
        """The return value of the function on global rank 0 (after the job completed)."""
        st = self._status(name)
        if st.get("status") != COMPLETE:
            raise BackendError(
                f"Job {name!r} is {st.get('status')}, so it has no result yet"
                + (f" ({st.get('reason')})" if st.get("reason") else "")
                + ". Wait for it with client.wait_for_job_status(name) first."
            )
        path = self.job_dir(name) / "result.pkl"
        if not path.exists():
            raise BackendError(
                f"Job {name!r} completed but left no result: it did not run a function through "
                "kf-jupyter's runner (a TrainerCommand job), or rank 0 could not save it."
            )
        with open(path, "rb") as fh:
            return pickle.load(fh)

    # ------------------------------------------------------------------ logs

    def _is_done(self, name: str) -> bool:
        try:
            return self._status(name).get("status") in TERMINAL
        except JobNotFoundError:
            return True

    def iter_log_records(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[LogRecord]:
        """Log lines with their source (`rank-N`, `node-0`, `launcher`); follow=True streams."""
        jd = self.job_dir(name)
        last = [0.0, False]

        def done() -> bool:
            now = time.monotonic()
            if now - last[0] >= 0.05:
                last[0] = now
                last[1] = self._is_done(name)
            return bool(last[1])

        return iter_records(str(jd / "logs"), step, follow, tail_lines, is_done=done, stop=stop)

    def get_job_logs(
        self,
        name: str,
        step: str | None = None,
        follow: bool = False,
        tail_lines: int | None = None,
    ) -> Iterator[str]:
        """Log lines; tagged `[source] ` when the job has more than one source."""
        st = self._status(name)
        ranks = int(
            st.get("world_size")
            or int(st.get("num_nodes") or 1) * int(st.get("num_proc_per_node") or 1)
        )
        processes = len(st.get("processes") or {}) or int(st.get("num_nodes") or 1)
        # Decided by the job's shape, not by which files exist yet, so it never changes mid-stream.
        multi = step is None and (ranks > 1 or processes > 1)
        return tag_records(human_records(self, name, step, follow, tail_lines), multi)

    # ------------------------------------------------------------------ wait / delete

    def wait_for_job_status(
        self,
        name: str,
        status: set[str] | frozenset[str] = frozenset({COMPLETE}),
        timeout: float = 600,
        callbacks: list[StatusCallback] | None = None,
    ) -> TrainJob:
        """Block until the job reaches one of `status`; JobFailedError if it fails instead."""
        wanted = set(status)
        unknown = wanted - {CREATED, RUNNING, SUSPENDED, COMPLETE, FAILED}
        if unknown:
            raise ValidationError(
                f"Unknown job status {sorted(unknown)}: use Created, Running, Suspended, "
                "Complete, Failed."
            )
        end = time.monotonic() + timeout
        waker = JobWaker(self.job_dir(name))
        try:
            return self._wait(name, wanted, end, timeout, callbacks, waker)
        finally:
            waker.close()

    def _wait(
        self,
        name: str,
        wanted: set[str],
        end: float,
        timeout: float,
        callbacks: list[StatusCallback] | None,
        waker: JobWaker,
    ) -> TrainJob:
        last_status = None
        while True:
            job = self.get_job(name)
            if job.status != last_status:
                last_status = job.status
                for cb in callbacks or []:
                    cb(job)
            if job.status in wanted:
                return job
            if job.status == FAILED:
                raise JobFailedError(f"Job {name!r} failed ({job.reason}): {job.message}")
            if job.status == COMPLETE:
                raise JobFailedError(f"Job {name!r} completed without reaching {sorted(wanted)}.")
            if time.monotonic() >= end:
                raise WaitTimeoutError(
                    f"Job {name!r} is still {job.status} after {timeout} s. Wait longer "
                    "(timeout=...), follow its logs, or delete it with client.delete_job(name)."
                )
            waker.sleep(WAIT_POLL_SECONDS)

    def _stop(self, name: str, jd: Path, record_on_full_disk_optional: bool = False) -> None:
        st = sv.read_json(str(jd / "status.json"))
        pid = st.get("supervisor_pid")
        if pid and sv.same_process(int(pid), st.get("supervisor_create_time")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGTERM)
            end = time.monotonic() + DELETE_WAIT_SECONDS
            while time.monotonic() < end and sv.same_process(
                int(pid), st.get("supervisor_create_time")
            ):
                time.sleep(sv.POLL_SECONDS)
        # Whatever is left (the supervisor was killed, or did not finish in time).
        st = sv.read_json(str(jd / "status.json"))
        procs = st.get("processes") or {}
        groups = [int(p["pgid"]) for p in procs.values() if p.get("pgid")]
        known: list[tuple[int, float | None]] = [
            (int(p["pid"]), p.get("create_time")) for p in procs.values() if p.get("pid")
        ]
        known += [(int(a), b) for a, b in st.get("descendants") or []]
        live = [(p, c) for p, c in known if sv.same_process(p, c)]
        if live:
            sv.stop_tree(groups, live)
        # Its supervisor released them unless it was killed; every process is stopped now.
        with contextlib.suppress(OSError):
            gpu.release(str(self.state_dir), name)
        try:
            sv.finish_status(
                str(jd),
                FAILED,
                sv.REASON_CANCELLED,
                "The job was cancelled; its processes were stopped.",
            )
        except OSError as exc:
            if not sv.is_disk_full(exc):
                raise
            if not record_on_full_disk_optional:
                what = (
                    "the processes were stopped, but the Cancelled status could not be written to"
                )
                raise self._disk_full(exc, what) from None

    # ------------------------------------------------------------------ suspend / resume

    def suspend_job(self, name: str) -> None:
        """Stop the job's processes and keep the job (status Suspended); `resume_job` restarts
        them with the same workspace and environment. Returns once they are stopped."""
        self._control(name, suspend=True)

    def resume_job(self, name: str) -> None:
        """Start a suspended job's processes again (the log goes on after a marker line)."""
        self._control(name, suspend=False)

    def _control(self, name: str, suspend: bool) -> None:
        jd = self.job_dir(name)
        st = self._status(name)
        status = st.get("status", CREATED)
        verb = "suspended" if suspend else "resumed"
        if status in TERMINAL:
            raise JobStateError(
                f"Job {name!r} is {status}, so it cannot be {verb}: only a Created, Running or "
                "Suspended job can. Run it again instead."
            )
        if (status == SUSPENDED) == suspend and sv.read_control(str(jd)) == suspend:
            return  # already so
        sv.write_control(str(jd), suspend)
        pid = st.get("supervisor_pid")
        if (
            pid
            and st.get("control_ready")
            and sv.same_process(int(pid), st.get("supervisor_create_time"))
        ):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGUSR1)
        # Otherwise the supervisor, starting, reads control.json before it starts anything.
        end = time.monotonic() + CONTROL_WAIT_SECONDS
        while time.monotonic() < end:
            now = self._status(name).get("status")
            if now in TERMINAL or (now == SUSPENDED) == suspend:
                return
            time.sleep(sv.POLL_SECONDS)
        raise BackendError(
            f"Job {name!r} was asked to be {verb} but its supervisor did not confirm within "
            f"{CONTROL_WAIT_SECONDS:g} s. Check it with client.get_job({name!r}) and its events."
        )

    def cancel_job(self, name: str) -> None:
        """Stop the job's processes (the whole tree) and keep its record, status Failed/Cancelled."""
        jd = self.job_dir(name)
        self._stop(name, jd)

    def delete_job(self, name: str) -> None:
        """Stop the job's processes (the whole tree) and remove its folder."""
        jd = self.job_dir(name)
        self._stop(name, jd, record_on_full_disk_optional=True)  # the record goes anyway
        shutil.rmtree(jd, ignore_errors=True)
        with contextlib.suppress(OSError):
            job_index.note(self.state_dir, name)
        if self._index is not None:
            self._index.forget(name)
