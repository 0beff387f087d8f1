"""The runner shipped inside every job (standard library only; runs on the cluster too).

Usage (what the generated command runs):
python3 kf_entry.py FUNC_FILE FUNC_NAME ARGS_FILE SETUP [-- ARGV0 [ARG ...]]
where SETUP is one of none, jax, jax-own, xgboost. It loads the user's function from FUNC_FILE (so
tracebacks and inspect.getsource show the user's own lines), does the framework set-up the
Trainer leaves to user code (jax.distributed.initialize, the XGBoost tracker and communicator),
calls the function with the JSON keyword arguments, and on global rank 0 prints the result.
FUNC_NAME `__main__` runs FUNC_FILE as a script instead (`python script.py`: a fresh `__main__`
module, the JSON arguments as its globals). The program's `sys.argv` is ARGV0 ARG... (FUNC_FILE
alone without `--`): the runner's own arguments never show.
"""

import json
import os
import sys
import types

_KFJ_REPORT = "##kf-jupyter:report "
_KFJ_RESULT = "##kf-jupyter:result "
_KFJ_ERROR = "##kf-jupyter:error "
#: Kubernetes reads at most 4096 bytes of a container's termination message.
_KFJ_TERMINATION_BYTES = 4096


def _kfj_rank():
    for var in ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "JAX_PROCESS_ID", "DMLC_TASK_ID"):
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return int(os.environ.get("KF_JUPYTER_NODE_RANK", "0") or 0)


def _kfj_report_record(step, progress, metrics):
    """A report line's record; an MPI rank adds its rank (the launcher relays rank 0's)."""
    record = {"step": step, "progress": progress, "metrics": metrics}
    mpi_rank = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMIX_RANK")
    if mpi_rank is not None and mpi_rank.strip().isdigit():
        record["rank"] = int(mpi_rank)
    return record


def _kfj_report(step=None, progress=None, **metrics):
    """Report progress and metrics; the monitor reads them from the logs."""
    record = _kfj_report_record(step, progress, metrics)
    line = _KFJ_REPORT + json.dumps(record, default=float, allow_nan=True)
    print(line, flush=True)
    _kfj_status_report(step, progress, metrics)


# -- trainerStatus: report() also posts to the Trainer's status endpoint (KEP-2779) -----------
# When KUBEFLOW_TRAINER_SERVER_URL is set (a cluster with the TrainJobStatus gate, or any local
# job), global rank 0 posts {"trainerStatus": ...} there, from a daemon thread, at most once per
# 5 s on a cluster (the Trainer's rule) and once per second to a local job's own endpoint on
# this machine (the latest report wins; the last one is sent at exit). Every view reads a job's
# progress from that record, so a longer wait would leave the progress bar behind the chart.
# Failures are ignored: progress must never break training; the log line above stays the
# fallback.

_KFJ_STATUS_INTERVAL = 5.0
_KFJ_LOCAL_STATUS_INTERVAL = 1.0


def _kfj_status_interval(url):
    """How often rank 0 may post: once per second to an endpoint on this machine (a local
    job's own), else once per 5 s."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        host = ""
    local = host in ("127.0.0.1", "localhost", "::1")
    return _KFJ_LOCAL_STATUS_INTERVAL if local else _KFJ_STATUS_INTERVAL


_KFJ_STATUS_STATE = {}


def _kfj_status_body(step, progress, metrics, now, state, eta=None):
    """The trainerStatus of one report (ETA: `eta` if given, else from the progress rate since
    the first report)."""
    import datetime
    import math

    now_utc = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 (images with Python < 3.11)
    status = {"lastUpdatedTime": now_utc.isoformat()}
    if isinstance(progress, (int, float)) and math.isfinite(progress):
        p = min(1.0, max(0.0, float(progress)))
        status["progressPercentage"] = int(p * 100)
        first = state.setdefault("first", (now, p))
        if p > first[1] and now > first[0]:
            remaining = (now - first[0]) * (1.0 - p) / (p - first[1])
            status["estimatedRemainingSeconds"] = int(min(remaining, 2**31 - 1))
        elif p >= 1.0:
            status["estimatedRemainingSeconds"] = 0
    if isinstance(eta, (int, float)) and not isinstance(eta, bool) and math.isfinite(eta):
        status["estimatedRemainingSeconds"] = int(min(max(eta, 0), 2**31 - 1))
    items = [(str(k), v) for k, v in metrics.items()]
    if step is not None:
        items.append(("step", step))
    # The TrainJob schema takes at most 256 metrics, names and values of 1 to 64 characters.
    metrics = [{"name": k, "value": str(v)[:64]} for k, v in items if 0 < len(k) <= 64]
    if metrics:
        status["metrics"] = [m for m in metrics if m["value"]][:256]
    return {"trainerStatus": status}


def _kfj_status_post(body):
    """POST one status; True on 200. Never raises."""
    try:
        import ssl
        import urllib.request

        url = os.environ.get("KUBEFLOW_TRAINER_SERVER_URL")
        token_file = os.environ.get("KUBEFLOW_TRAINER_SERVER_TOKEN")
        if not url or not token_file:
            return False
        with open(token_file, encoding="utf-8") as fh:  # re-read: the token rotates
            token = fh.read().strip()
        ca = os.environ.get("KUBEFLOW_TRAINER_SERVER_CA_CERT")
        context = None
        if url.startswith("https:"):
            context = ssl.create_default_context(cafile=ca if ca and os.path.exists(ca) else None)
        req = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5, context=context) as resp:
            return resp.status == 200
    except Exception:
        return False


def _kfj_status_loop(state):
    import time

    cond = state["cond"]
    while True:
        with cond:
            while state.get("pending") is None:
                cond.wait()
            wait = state["last"] + state["interval"] - time.monotonic()
            if wait > 0:
                cond.wait(wait)
                continue
            body, state["pending"] = state["pending"], None
            state["last"] = time.monotonic()
            state["busy"] = True
        try:
            _kfj_status_post(body)
        finally:
            with cond:
                state["busy"] = False
                cond.notify_all()


def _kfj_status_flush(state):
    """At exit: let a post under way finish, then send the report still waiting, if any."""
    cond = state["cond"]
    with cond:
        cond.wait_for(lambda: not state.get("busy"), timeout=6)
        body, state["pending"] = state.get("pending"), None
    if body is not None:
        _kfj_status_post(body)


def _kfj_status_report(step, progress, metrics, eta=None):
    """Queue one report for the status endpoint (rank 0 only, when the endpoint exists)."""
    try:
        if not os.environ.get("KUBEFLOW_TRAINER_SERVER_URL") or _kfj_rank() != 0:
            return
        if os.environ.get(_KFJ_RELAY_ENV):  # an MPI rank: the launcher posts (_kfj_mpi_relay)
            return
        import atexit
        import threading
        import time

        state = _KFJ_STATUS_STATE
        if "cond" not in state:
            interval = _kfj_status_interval(os.environ["KUBEFLOW_TRAINER_SERVER_URL"])
            state.update(
                cond=threading.Condition(), last=-interval, interval=interval, pending=None
            )
            threading.Thread(
                target=_kfj_status_loop, args=(state,), name="kf-status", daemon=True
            ).start()
            atexit.register(_kfj_status_flush, state)
        body = _kfj_status_body(step, progress, metrics, time.monotonic(), state, eta)
        with state["cond"]:
            state["pending"] = body
            state["cond"].notify()
    except Exception:
        pass


# -- MPI: the launcher relays rank 0's reports ------------------------------------------------
# On a cluster the Trainer gives KUBEFLOW_TRAINER_* and the token volume to the launcher only
# (trainjobstatus.go:88-96: the trainer-ancestor replicated job), while rank 0 runs on the first
# hostfile host, a node pod (mpi.go:316-330). So the launcher runs mpirun under this relay: it
# copies mpirun's output through unchanged and posts the reports of rank 0 itself; ranks it
# starts see KF_JUPYTER_STATUS_RELAY and leave posting to it. Where the ranks' output does not
# pass through mpirun (a local run writes one log per rank) the relay just runs mpirun.

_KFJ_RELAY_ENV = "KF_JUPYTER_STATUS_RELAY"


def _kfj_mpi_relay(command):
    """Run `command` (mpirun ...); post rank 0's report lines from its output; its exit code."""
    import signal
    import subprocess

    if not os.environ.get("KUBEFLOW_TRAINER_SERVER_URL") or os.environ.get(
        "KF_JUPYTER_RANK_LOG_DIR"
    ):
        os.execvp(command[0], command)
    env = dict(os.environ)
    env[_KFJ_RELAY_ENV] = "1"
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, env=env)

    def forward(signum, frame):
        try:
            proc.send_signal(signum)
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    out = sys.stdout.buffer
    prefix = _KFJ_REPORT.encode()
    for line in proc.stdout:
        out.write(line)
        out.flush()
        at = line.find(prefix)
        if at < 0:
            continue
        try:
            record = json.loads(line[at + len(prefix) :])
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("rank", 0) == 0:
            metrics = record.get("metrics")
            metrics = metrics if isinstance(metrics, dict) else {}
            _kfj_status_report(record.get("step"), record.get("progress"), metrics)
    code = proc.wait()
    return 128 - code if code < 0 else code


# -- XGBoost: one worker per GPU ---------------------------------------------------------------
# The Trainer sets DMLC_NUM_WORKER = nodes x GPUs per node (xgboost.go:100-113) and
# DMLC_TASK_ID = the pod's index, so a pod with G GPUs must start G workers; worker j of pod i is
# task i*G+j and sees the pod's j-th GPU only. KF_JUPYTER_WORKERS_PER_NODE (G) is written into
# the command by the xgboost policy.

_KFJ_WORKERS_ENV = "KF_JUPYTER_WORKERS_PER_NODE"


def _kfj_fan_out(argv, workers):
    """Start `workers` copies of this runner (one per GPU), wait for all; the first failure's
    exit code (the others are stopped: the tracker would wait for them forever)."""
    import signal
    import subprocess
    import time

    node = int(os.environ.get("DMLC_TASK_ID", "0") or 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    devices = visible.split(",") if visible else [str(j) for j in range(workers)]
    procs = []
    for j in range(workers):
        env = dict(os.environ)
        env.update(
            {
                _KFJ_WORKERS_ENV: "1",
                "DMLC_TASK_ID": str(node * workers + j),
                "LOCAL_RANK": str(j),
                "CUDA_VISIBLE_DEVICES": devices[j] if j < len(devices) else str(j),
            }
        )
        procs.append(subprocess.Popen([sys.executable, *argv], env=env))

    def forward(signum, frame):
        for p in procs:
            try:
                p.send_signal(signum)
            except OSError:
                pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    code = 0
    while any(p.poll() is None for p in procs):
        failed = [p.returncode for p in procs if p.returncode not in (None, 0)]
        if failed and not code:
            code = failed[0]
            forward(signal.SIGTERM, None)
        time.sleep(0.1)
    if not code:
        code = next((p.returncode for p in procs if p.returncode), 0)
    return 128 - code if code < 0 else code


# -- startup phases (local jobs): what a rank does before its first line ----------------------
# Each step is one line appended to the job's events.jsonl (the folder above
# KF_JUPYTER_RANK_LOG_DIR; no such folder on a cluster, where nothing is written): the rank
# started, began and finished importing its framework (an import hook sees the import the
# user's code makes; a warm rank has it already), and entered and left the rendezvous (the
# framework's own init function, wrapped: it runs unchanged). The backend turns them into the
# monitor's phase line (kf_jupyter/phases.py).

#: Top-level modules whose import is a startup phase, and the module whose init is a rendezvous.
_KFJ_FRAMEWORKS = ("torch", "jax", "xgboost", "tensorflow", "mpi4py")


def _kfj_phase(reason, message):
    """Append one phase event for this rank (never fails the job; nothing off a local job)."""
    logs = os.environ.get("KF_JUPYTER_RANK_LOG_DIR")
    if not logs:
        return
    import time

    rank = _kfj_rank()
    line = json.dumps(
        {
            "time": time.time(),
            "type": "Normal",
            "reason": reason,
            "message": f"rank {rank}: {message}",
            "object": f"rank-{rank}",
        }
    )
    try:
        # no O_CREAT: a job folder removed under the rank stays removed
        fd = os.open(os.path.join(os.path.dirname(logs), "events.jsonl"), os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, (line + "\n").encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:
        pass


def _kfj_wrap_rendezvous(module, attr, what):
    """Wrap `module.attr` (an init function that waits for every rank) with phase events."""
    real = getattr(module, attr, None)
    if not callable(real) or getattr(real, "_kfj_phases", False):
        return
    import functools

    @functools.wraps(real)
    def init(*args, **kwargs):
        _kfj_phase("Rendezvous", f"waiting for the other ranks ({what})")
        out = real(*args, **kwargs)
        _kfj_phase("RendezvousDone", f"joined the other ranks ({what})")
        return out

    init._kfj_phases = True
    setattr(module, attr, init)


def _kfj_watch_rendezvous(name):
    """After `name` is imported: wrap its rendezvous function, if it has one."""
    if name == "torch.distributed":
        _kfj_wrap_rendezvous(
            sys.modules[name], "init_process_group", "torch.distributed.init_process_group"
        )


def _kfj_spec_around(finder, name, path, target, before, after):
    """The spec the other finders give `name`, its loader running `before()` and then
    `after(module)` around the module's own code (once); None when no finder knows `name`."""
    spec = None
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(name, path, target)
        if spec is not None:
            break
    loader = getattr(spec, "loader", None)
    real = getattr(loader, "exec_module", None)
    if real is None:
        return spec

    def exec_module(module):
        del loader.exec_module  # the loader's own method again
        before()
        real(module)
        after(module)

    loader.exec_module = exec_module
    return spec


class _KfjImportWatch:
    """A meta-path finder that only watches: the first import of a framework (and of
    torch.distributed) is reported and timed; the spec and the module are the usual ones."""

    def __init__(self):
        self.seen = set()

    def find_spec(self, name, path=None, target=None):
        if name in self.seen or (name not in _KFJ_FRAMEWORKS and name != "torch.distributed"):
            return None
        self.seen.add(name)
        import time

        top = name in _KFJ_FRAMEWORKS
        start = []

        def before():
            start.append(time.monotonic())
            if top:
                _kfj_phase("ImportingFramework", f"importing {name}")

        def after(module):
            if top:
                took = time.monotonic() - start[0]
                _kfj_phase("ImportedFramework", f"imported {name} in {took:.1f} s")
            _kfj_watch_rendezvous(name)

        return _kfj_spec_around(self, name, path, target, before, after)


# -- Accelerate's notebook_launcher runs in place inside a job ---------------------------------
# A notebook written for Accelerate ends with notebook_launcher(fn, args, num_processes=N), which
# forks N processes on this machine. Inside a job the job's processes already are the launch (N
# more per rank would meet on one port and fail), so with N equal to the job's processes per node
# each rank calls fn(*args) itself: Accelerator() in it takes the job's ranks. Other counts stop
# with what to change (kf_jupyter.own_setup refuses literal ones before submitting).

_KFJ_ACCELERATE_LAUNCHERS = "accelerate.launchers"


def _kfj_launch_in_place(real):
    """`real` (Accelerate's notebook_launcher) as it behaves inside a job (see above)."""
    import functools
    import inspect

    try:
        signature = inspect.signature(real)
    except (TypeError, ValueError):
        return real

    @functools.wraps(real)
    def notebook_launcher(*args, **kwargs):
        try:
            call = signature.bind(*args, **kwargs)
        except TypeError:
            return real(*args, **kwargs)  # Accelerate's own error
        call.apply_defaults()
        given = call.arguments
        n = given.get("num_processes")
        per_node = os.environ.get("LOCAL_WORLD_SIZE", "")
        if not isinstance(n, int) or n <= 1 or not per_node.isdigit():
            return real(*args, **kwargs)  # 1 runs in place already; None is Accelerate's error
        if n != int(per_node):
            raise RuntimeError(
                f"notebook_launcher(num_processes={n}) ran inside a job of {per_node} processes "
                f"per node. Inside a job the job's processes are the launch, so the function runs "
                f"in place on each of them: run the cell with -p {n}, or pass "
                f"num_processes={per_node}."
            )
        function = given.get("function")
        precision = str(given.get("mixed_precision") or "no").lower()
        if _kfj_rank() == 0:
            name = getattr(function, "__name__", "the function")
            print(
                f"kf-jupyter: notebook_launcher(num_processes={n}) runs {name} in place on each of "
                f"the job's {n} processes per node",
                flush=True,
            )
        before = os.environ.get("ACCELERATE_MIXED_PRECISION")
        if precision != "no":
            os.environ["ACCELERATE_MIXED_PRECISION"] = precision
        try:
            return function(*tuple(given.get("args") or ()))
        finally:
            if before is None:
                os.environ.pop("ACCELERATE_MIXED_PRECISION", None)
            else:
                os.environ["ACCELERATE_MIXED_PRECISION"] = before

    notebook_launcher._kfj_in_place = True
    return notebook_launcher


def _kfj_patch_launcher(module):
    """Put the in-place notebook_launcher on `module` (accelerate.launchers) and `accelerate`."""
    real = getattr(module, "notebook_launcher", None)
    if not callable(real) or getattr(real, "_kfj_in_place", False):
        return
    module.notebook_launcher = _kfj_launch_in_place(real)
    top = sys.modules.get("accelerate")
    if top is not None and getattr(top, "notebook_launcher", None) is real:
        top.notebook_launcher = module.notebook_launcher


class _KfjAfterImport:
    """A meta-path finder that runs `after(module)` once `name` is imported (nothing else)."""

    def __init__(self, name, after):
        self.name, self.after = name, after

    def find_spec(self, name, path=None, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        return _kfj_spec_around(self, name, path, target, lambda: None, self.after)


def _kfj_after_import(name, after):
    """`after(module)` now if `name` is imported, else once it is."""
    module = sys.modules.get(name)
    if module is not None:
        after(module)
    else:
        sys.meta_path.insert(0, _KfjAfterImport(name, after))


def _kfj_watch_launcher(source):
    """Run Accelerate's notebook_launcher in place, for code that calls it."""
    if "notebook_launcher" in source:
        _kfj_after_import(_KFJ_ACCELERATE_LAUNCHERS, _kfj_patch_launcher)


# -- DeepSpeed in a local MPI job rendezvous on the job's own port (issue 39) -------------------
# deepspeed.init_distributed() under mpirun finds the world with MPI and sets MASTER_PORT to its
# distributed_port argument, 29500 by default. On a cluster every pod has its own network; on one
# machine two such jobs took the same port. Locally (the launcher sets KF_JUPYTER_MASTER_PORT to
# the job's leased port) that default becomes the job's port; a port the code passes is kept.


def _kfj_deepspeed_port(module):
    """Make the job's port the default `distributed_port` of DeepSpeed (see above)."""
    port = int(os.environ["KF_JUPYTER_MASTER_PORT"])
    for f in (getattr(module, "init_distributed", None), getattr(module, "mpi_discovery", None)):
        d = getattr(f, "__defaults__", None) or ()
        names = f.__code__.co_varnames[: f.__code__.co_argcount] if d else ()
        if "distributed_port" in names:
            i = names.index("distributed_port") - len(names) + len(d)
            if d[i] == 29500:
                f.__defaults__ = (*d[:i], port, *d[i + 1 :])


def _kfj_watch_startup():
    """Report this rank's start and watch its framework import and rendezvous (local jobs)."""
    if not os.environ.get("KF_JUPYTER_RANK_LOG_DIR"):
        return
    _kfj_phase("RankStarted", f"started (pid {os.getpid()})")
    if "torch.distributed" in sys.modules:  # a warm rank: imported before the fork
        _kfj_watch_rendezvous("torch.distributed")
    watch = _KfjImportWatch()
    watch.seen.update(n for n in (*_KFJ_FRAMEWORKS, "torch.distributed") if n in sys.modules)
    sys.meta_path.insert(0, watch)


def _kfj_install_report_shim():
    import importlib.util

    # Only look: importing the real package costs ~100 ms per rank, paid only if the code uses it.
    if importlib.util.find_spec("kf_jupyter") is None:
        shim = types.ModuleType("kf_jupyter")
        shim.report = _kfj_report
        shim.__doc__ = "kf-jupyter's in-job shim: report() only."
        sys.modules["kf_jupyter"] = shim


def _kfj_whole_lines():
    """One write per line on stdout/stderr (ranks of a pod share them: no glued lines).

    `python -u` (torchrun's workers) writes print()'s text and its newline separately, so two
    ranks printing at once on one pod could glue their lines ("...rank 0...rank 1\n\n").
    Line buffering writes each whole line at once; flush() still sends a partial line.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, write_through=False)
        except (AttributeError, ValueError, OSError):
            pass


def _kfj_redirect_logs(rank):
    log_dir = os.environ.get("KF_JUPYTER_RANK_LOG_DIR")
    if not log_dir:
        _kfj_whole_lines()
        return
    fd = os.open(
        os.path.join(log_dir, f"rank-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


_KFJ_ARCHIVE = "/var/run/kf-jupyter/workspace/workspace.tar.gz"


_KFJ_UNPACK_DEFAULT = 4 * 1024 * 1024  # workspace.DEFAULT_MAX_BYTES, for archives without it
_KFJ_UNPACK_CEILING = 1 << 30
_KFJ_UNPACK_MAX_FILES = 20_000  # workspace.MAX_FILES


def _kfj_unpack_limit(tar):
    """The bytes an archive may unpack to: the workspace limit it was made under (its pax
    header), never over 1 GiB."""
    try:
        limit = int(tar.pax_headers.get("KF_JUPYTER.max_bytes", _KFJ_UNPACK_DEFAULT))
    except (TypeError, ValueError):
        limit = _KFJ_UNPACK_DEFAULT
    return max(0, min(limit, _KFJ_UNPACK_CEILING))


def _kfj_unpack_workspace(archive):
    """Unpack the workspace archive once per node (pod); the first process to finish wins."""
    import hashlib
    import shutil
    import tarfile
    import tempfile

    with open(archive, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:16]
    host = "".join(c for c in os.environ.get("HOSTNAME", "") if c.isalnum() or c in "-.")
    target = os.path.join(tempfile.gettempdir(), f"kf-jupyter-workspace-{digest}-{host}")
    if os.path.isdir(target):
        return target
    with tarfile.open(archive, "r:gz") as tar:
        members = []
        total = 0
        for member in tar:  # headers only; no data is written before the whole check
            name = member.name
            if not member.isfile() or name.startswith("/") or ".." in name.split("/"):
                raise RuntimeError(f"kf-jupyter: unsafe path {name!r} in the workspace archive")
            members.append(member)
            total += member.size
            limit = _kfj_unpack_limit(tar)
            if total > limit or len(members) > _KFJ_UNPACK_MAX_FILES:
                raise RuntimeError(
                    f"kf-jupyter: the workspace archive {archive} unpacks to more than its limit "
                    f"({limit} bytes, {_KFJ_UNPACK_MAX_FILES} files); it was not unpacked. "
                    "Submit again (the archive is not one kf-jupyter made), or with "
                    "--no-workspace."
                )
        if not members:
            # Nothing to unpack. Renaming an empty folder would replace another rank's empty
            # target (rename() replaces an empty directory) and pull it from under the rank
            # that is already in it: its getcwd() fails, and torch's MKL with it.
            try:
                os.mkdir(target)
            except FileExistsError:
                pass
            return target
        tmp = tempfile.mkdtemp(prefix=".kf-jupyter-workspace-", dir=os.path.dirname(target))
        tar.extractall(tmp, members=members)
    try:
        os.rename(tmp, target)  # never replaces: the same archive makes a non-empty target
    except OSError:  # another rank of this node got there first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _kfj_enter_workspace():
    """Put the job's copy of the notebook's folder first on sys.path and start in it (or, locally,
    in the notebook's folder itself: `KF_JUPYTER_RUN_DIR`)."""
    ws = os.environ.get("KF_JUPYTER_WORKSPACE")
    if not ws:
        archive = os.environ.get("KF_JUPYTER_WORKSPACE_ARCHIVE") or _KFJ_ARCHIVE
        if not os.path.isfile(archive):
            return
        try:
            ws = _kfj_unpack_workspace(archive)
        except OSError as exc:
            sys.stderr.write(
                f"kf-jupyter: cannot unpack the notebook's folder (the workspace) from {archive} "
                f"into a temporary folder ({exc}). Give the container a writable TMPDIR (for "
                "example --env TMPDIR=/some/writable/dir), or submit with --no-workspace.\n"
            )
            raise
        os.environ["KF_JUPYTER_WORKSPACE"] = ws
    # Locally the ranks run in the notebook's folder itself (what they write lands there); the
    # submit-time copy still comes first for imports.
    run_dir = os.environ.get("KF_JUPYTER_RUN_DIR")
    os.chdir(run_dir if run_dir and os.path.isdir(run_dir) else ws)
    sys.path.insert(0, ws)


def _kfj_jax_setup():
    import jax

    if "JAX_COORDINATOR_ADDRESS" in os.environ:
        _kfj_phase("Rendezvous", "waiting for the other ranks (jax.distributed.initialize)")
        jax.distributed.initialize(
            coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
            num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
            process_id=int(os.environ["JAX_PROCESS_ID"]),
        )
        _kfj_phase("RendezvousDone", "joined the other ranks (jax.distributed.initialize)")

        def _already(*args, **kwargs):
            return None

        jax.distributed.initialize = _already


def _kfj_jax_own_setup():
    """The code calls jax.distributed.initialize itself: fill in what it leaves out.

    JAX reads only the coordinator address from the environment; the process count and id the
    Trainer injects (JAX_NUM_PROCESSES, JAX_PROCESS_ID) are passed when the call omits them.
    """
    if "JAX_COORDINATOR_ADDRESS" not in os.environ:
        return
    import jax

    real = jax.distributed.initialize

    def initialize(coordinator_address=None, num_processes=None, process_id=None, *a, **kw):
        env = os.environ
        if coordinator_address is None:
            coordinator_address = env["JAX_COORDINATOR_ADDRESS"]
        if num_processes is None and env.get("JAX_NUM_PROCESSES", "").isdigit():
            num_processes = int(env["JAX_NUM_PROCESSES"])
        if process_id is None and env.get("JAX_PROCESS_ID", "").isdigit():
            process_id = int(env["JAX_PROCESS_ID"])
        return real(coordinator_address, num_processes, process_id, *a, **kw)

    initialize.__doc__ = real.__doc__
    jax.distributed.initialize = initialize
    _kfj_wrap_rendezvous(jax.distributed, "initialize", "jax.distributed.initialize")


class SetupCollisionError(RuntimeError):
    """The code's own framework set-up collides with the runner's built-in one."""


_KFJ_XGB_COLLISION = (
    "The code starts its own XGBoost RabitTracker on port {port}, where kf-jupyter's "
    "built-in set-up already runs one (rank 0 runs the tracker and every rank joins the "
    "communicator for code that does not), so the second tracker cannot bind: 'Address already "
    "in use'. Either run with the built-in set-up off (%%xgboosttrain --no-setup, or "
    "XGBoostTrainer(setup_collective=False)) so only the code's own tracker and "
    "CommunicatorContext run, or remove them from the code and let kf-jupyter set them up."
)


def _kfj_xgb_collision(exc):
    """The code started its own XGBoost tracker on the port ours listens on."""
    return type(exc).__name__ == "XGBoostError" and "Address already in use" in str(exc)


def _kfj_call_xgboost(func, kwargs, rank, argv):
    uri = os.environ.get("DMLC_TRACKER_URI")
    if not uri:
        return func(**kwargs)
    from xgboost import collective
    from xgboost.tracker import RabitTracker

    port = int(os.environ.get("DMLC_TRACKER_PORT", "29500"))
    n_workers = int(os.environ.get("DMLC_NUM_WORKER", "1"))
    tracker = None
    if rank == 0:
        tracker = RabitTracker(host_ip=uri, n_workers=n_workers, port=port)
        tracker.start()
    try:
        # More retries than XGBoost's default: on a loaded machine rank 0 may open its tracker
        # seconds after the other ranks first dial it (each retry backs off).
        _kfj_phase("Rendezvous", "waiting for the other ranks (XGBoost tracker)")
        with collective.CommunicatorContext(
            dmlc_tracker_uri=uri, dmlc_tracker_port=port, dmlc_task_id=str(rank), dmlc_retry=10
        ):
            _kfj_phase("RendezvousDone", "joined the other ranks (XGBoost tracker)")
            try:
                result = func(**kwargs)
            except Exception as exc:
                # Report before the context closes this rank's communicator: closing it is what
                # breaks the other ranks' collectives, and a rank that then fails first in time
                # (or exits first, so this process is stopped before it reports) would be read
                # as the job's cause with its secondary "Ring allreduce failed". A second
                # tracker on our port is reported below, as what it is.
                if not _kfj_xgb_collision(exc):
                    _kfj_report_once(exc, argv, rank)
                raise
    except Exception as exc:
        if tracker is not None:
            # The job failed: freeing the tracker at exit would only add "Invalid polling
            # request" noise after the real error. The process ends anyway.
            vars(tracker).pop("handle", None)
        if _kfj_xgb_collision(exc):
            raise SetupCollisionError(_KFJ_XGB_COLLISION.format(port=port)) from exc
        raise
    if tracker is not None:
        tracker.wait_for()
    return result


_KFJ_PRIVATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC  # result file: owner-only (0600)


def _kfj_publish(result):
    try:
        text = json.dumps(result, allow_nan=True)
    except (TypeError, ValueError):
        text = json.dumps({"__repr__": repr(result)})
    path = os.environ.get("KF_JUPYTER_RESULT_FILE")
    if path:
        import pickle

        tmp = path + ".tmp"
        try:
            with os.fdopen(os.open(tmp, _KFJ_PRIVATE, 0o600), "wb") as fh:
                pickle.dump(result, fh)
        except Exception:
            with os.fdopen(os.open(tmp, _KFJ_PRIVATE, 0o600), "wb") as fh:
                pickle.dump(json.loads(text), fh)
        os.replace(tmp, path)
    print(_KFJ_RESULT + text, flush=True)


#: FUNC_NAME meaning "run FUNC_FILE as __main__" (no function is called).
_KFJ_SCRIPT = "__main__"
#: FUNC_FILE and the file the user's code is compiled as (tracebacks show both by their role).
_KFJ_FILES = [None, None]


def _kfj_program_argv(argv):
    """The program's sys.argv: what follows `--` (ARGV0 ARG...), else the function file alone."""
    rest = argv[5:]
    if rest and rest[0] == "--" and len(rest) > 1:
        return list(rest[1:])
    return [argv[1]]


def _kfj_same_text(path, source):
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            return fh.read() == source
    except (OSError, UnicodeDecodeError):
        return False


def _kfj_script_file(func_file, source):
    """The script's own file when sys.argv[0] names one here with the same text (the script in
    the notebook's folder or the shipped workspace), else the shipped copy, FUNC_FILE."""
    argv0 = sys.argv[0]
    if argv0 and os.path.isfile(argv0) and _kfj_same_text(argv0, source):
        return os.path.abspath(argv0)
    return func_file


def _kfj_script(code, path, kwargs):
    """A callable that runs `code` (compiled as `path`) as `python script.py` would, in a fresh
    `__main__` module: `__file__` is `path` and, when it is the script's own file, its folder
    leads sys.path, as under `python`."""
    import builtins

    def run():
        folder = os.path.dirname(path)
        if path != _KFJ_FILES[0] and folder not in sys.path:
            sys.path.insert(0, folder)
        module = types.ModuleType("__main__")
        module.__file__ = path
        module.__builtins__ = builtins
        module.__spec__ = None
        module.__dict__.update(kwargs)
        sys.modules["__main__"] = module
        exec(code, module.__dict__)

    return run


def _kfj_exit_status(exc):
    """The exit code of a program that raised SystemExit (printing a message, as Python does)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def _kfj_main(argv):
    if argv[1:2] == ["--mpi-relay"]:
        return _kfj_mpi_relay(argv[2:])
    func_file, func_name, args_file, setup = argv[1:5]
    workers = os.environ.get(_KFJ_WORKERS_ENV, "")
    if setup == "xgboost" and workers.isdigit() and int(workers) > 1:
        return _kfj_fan_out(argv, int(workers))
    sys.argv = _kfj_program_argv(argv)
    rank = _kfj_rank()
    _kfj_redirect_logs(rank)
    _kfj_watch_startup()
    _kfj_enter_workspace()
    _kfj_install_report_shim()
    with open(func_file, encoding="utf-8", newline="") as fh:
        source = fh.read()
    with open(args_file, encoding="utf-8") as fh:
        kwargs = json.load(fh)
    # A script's code objects carry its own path, as under `python script.py` (inspect, Hydra).
    path = _kfj_script_file(func_file, source) if func_name == _KFJ_SCRIPT else func_file
    _KFJ_FILES[:] = [func_file, path]
    code = compile(source, path, "exec")
    _kfj_watch_launcher(source)
    if os.environ.get("KF_JUPYTER_MASTER_PORT", "").isdigit():
        _kfj_after_import("deepspeed.comm.comm", _kfj_deepspeed_port)
    if func_name == _KFJ_SCRIPT:
        func, kwargs = _kfj_script(code, path, kwargs), {}
    else:
        namespace = sys.modules["__main__"].__dict__
        exec(code, namespace)
        func = namespace.get(func_name)
    if not callable(func):
        sys.stderr.write(f"kf-jupyter: {func_file} does not define a function {func_name!r}\n")
        return 2
    if setup == "jax":
        _kfj_jax_setup()
    if setup == "jax-own":
        _kfj_jax_own_setup()
    try:
        if setup == "xgboost":
            result = _kfj_call_xgboost(func, kwargs, rank, argv)
        else:
            result = func(**kwargs)
    except SystemExit as exc:
        status = _kfj_exit_status(exc)
        if status:
            return status
        result = None
    sys.stdout.flush()
    if rank == 0:
        _kfj_publish(result)
    return 0


def _kfj_exc_type(exc):
    cls = type(exc)
    module = getattr(cls, "__module__", "")
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if module in ("builtins", "__main__", "") else f"{module}.{name}"


def _kfj_user_traceback(exc, func_file, label="<training function>"):
    """The traceback lines without this runner's frames; the user's file shown by its role."""
    import traceback

    runner = os.path.abspath(__file__)
    shown = {os.path.abspath(f) for f in (func_file, *_KFJ_FILES) if f}
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    seen = set()
    todo = [te]
    while todo:
        cur = todo.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        kept = []
        for frame in cur.stack:
            if os.path.abspath(frame.filename) == runner:
                continue
            if os.path.abspath(frame.filename) in shown:
                _ = frame.line  # read the source line before the file name changes
                frame.filename = label
            kept.append(frame)
        cur.stack = traceback.StackSummary.from_list(kept)
        todo.extend(t for t in (cur.__cause__, cur.__context__) if t is not None)
        todo.extend(getattr(cur, "exceptions", None) or [])
    return "".join(te.format()).rstrip("\n").split("\n")


def _kfj_is_library_file(path):
    return (
        path.startswith("<frozen ")
        or "/site-packages/" in path
        or "/dist-packages/" in path
        or "/lib/python3" in path
    )


def _kfj_short_traceback(lines, max_lines=40, max_chars=300, message_lines=8):
    """At most `max_lines` lines of a formatted traceback that keep what a reader needs.

    The exception comes first in priority (its message trimmed to `message_lines` lines), then
    the user's innermost frame (outside site-packages and the standard library: the cell's
    `line N`), the innermost frame, the user's other frames and the rest, innermost first; what
    is left out is said in one line where it was. Each line is cut to `max_chars` characters.
    A traceback that fits is returned whole.
    """
    import re

    cut = [ln if len(ln) <= max_chars else ln[: max_chars - 1] + "\u2026" for ln in lines]
    if len(cut) <= max_lines:
        return cut
    frame_re = re.compile(r'^\s*File "(.*)", line \d+')
    units = []  # [is_frame, is_user, lines]
    i = 0
    while i < len(cut):
        m = frame_re.match(cut[i])
        if m is None:
            units.append([False, False, [cut[i]]])
            i += 1
            continue
        body = [cut[i]]
        i += 1
        if i < len(cut) and cut[i].startswith("    "):  # the source line
            body.append(cut[i])
            i += 1
            if i < len(cut) and re.fullmatch(r"\s+[\^~ ]+", cut[i]):  # its carets
                body.append(cut[i])
                i += 1
        units.append([True, not _kfj_is_library_file(m.group(1)), body])
    last_frame = max((k for k, u in enumerate(units) if u[0]), default=-1)
    head, exc = units[: last_frame + 1], [ln for u in units[last_frame + 1 :] for ln in u[2]]
    if len(exc) > message_lines:
        more = len(exc) - (message_lines - 1)
        note = f"... ({more} more lines of the message: the job's log has them all)"
        exc = [*exc[: message_lines - 1], note]
    budget = max(max_lines - len(exc), 0)
    frames = [k for k, u in enumerate(head) if u[0]]
    users = [k for k in frames if head[k][1]]
    order = []
    for k in [
        users[-1:],
        frames[-1:],
        [0] if head else [],
        users[::-1],
        list(range(len(head)))[::-1],
    ]:
        order += [x for x in k if x not in order]

    def render(keep):
        out, gap = [], 0
        for k, u in enumerate(head):
            if k in keep:
                if gap:
                    out.append(f"  ... ({gap} lines left out: the job's log has them all)")
                    gap = 0
                out += u[2]
            else:
                gap += len(u[2])
        if gap:
            out.append(f"  ... ({gap} lines left out: the job's log has them all)")
        return out

    keep = []
    for k in order:
        if len(render([*keep, k])) <= budget:
            keep.append(k)
    return render(keep) + exc


def _kfj_report_failure(exc, func_file, rank, label="<training function>"):
    """Print the user's traceback and one `##kf-jupyter:error` record; fill the termination log.

    The record (one JSON line, hidden from every view) carries the full traceback with the
    runner's frames too, so nothing is lost on disk.
    """
    import time
    import traceback

    try:
        lines = _kfj_user_traceback(exc, func_file, label)
    except Exception:  # never hide the user's error behind ours
        lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).split("\n")
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    record = {
        "source": f"Rank {rank}",
        "rank": rank,
        "exc_type": _kfj_exc_type(exc),
        "message": str(exc),
        "traceback": _kfj_short_traceback(lines),
        "time": time.time(),
        "full": full,
    }
    sys.stdout.flush()
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.write(_KFJ_ERROR + json.dumps(record, default=str) + "\n")
    sys.stderr.flush()
    _kfj_termination_log(record)


def _kfj_termination_log(record):
    """On Kubernetes, the first failing process of a pod writes the cause as its termination message."""
    path = os.environ.get("KF_JUPYTER_TERMINATION_LOG", "/dev/termination-log")
    try:
        if not os.path.isfile(path) or os.path.getsize(path) > 0:
            return
        short = dict(record)
        short.pop("full", None)
        short["message"] = short["message"][:1000]
        full_tb = short["traceback"]
        for n in (30, 20, 14, 10, 6, 3):
            short["traceback"] = _kfj_short_traceback(full_tb, max_lines=n, message_lines=min(n, 4))
            text = _KFJ_ERROR + json.dumps(short, default=str)
            if len(text.encode("utf-8")) <= _KFJ_TERMINATION_BYTES:
                break
        if len(text.encode("utf-8")) <= _KFJ_TERMINATION_BYTES:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
    except OSError:
        pass


def _kfj_source_label(argv):
    """How tracebacks name the shipped file: the cell, the script's own name, or the function."""
    name = argv[2] if len(argv) > 2 else ""
    if name == "kf_train_cell":  # magics.cell.FUNC_NAME
        return "<training cell>"
    if name == "__main__":  # a script: its sys.argv[0] when one was given, else a cell's body
        rest = argv[5:]
        if len(rest) > 1 and rest[0] == "--" and rest[1] != argv[1]:
            return rest[1]
        return "<training cell>"
    return "<training function>"


def _kfj_report_once(exc, argv, rank):
    """Report `exc` as this rank's failure, unless it was reported already (a setup reports it
    before it tears down the collective; the guard sees it again on its way out)."""
    if getattr(exc, "_kfj_reported", False):
        return
    func_file = argv[1] if len(argv) > 1 else None
    _kfj_report_failure(exc, func_file, rank, _kfj_source_label(argv))
    try:
        exc._kfj_reported = True
    except Exception:  # an exception type that refuses attributes: reported twice at worst
        pass


def _kfj_guarded(main, argv):
    """Run the runner; an exception from the user's code is reported as its root cause, exit 1."""
    try:
        return main(argv)
    except Exception as exc:
        _kfj_report_once(exc, argv, _kfj_rank())
        # As `python -m mpi4py` does: a rank that failed aborts the MPI job. A normal exit would
        # call MPI_Finalize, which waits for ranks that wait for this one: the job would hang.
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            mpi.COMM_WORLD.Abort(1)
        raise SystemExit(1) from None


def _kfj_exit(code):
    """End the process as Python would, but without C++ static destructors.

    Some extension modules abort in their destructors after the work is done (torch 2.13's CPU
    build, seen here: "terminate called without an active exception" from a DDP rank at exit),
    which would turn a finished job into a failed one. So: wait for non-daemon threads and run
    the atexit handlers, as a normal exit does, then leave with os._exit.
    """
    import atexit
    import threading

    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    # C-level exit hooks do not run under os._exit: mpi4py finalizes MPI in one, and mpirun
    # counts a rank that exits without MPI_Finalize as an abnormal termination.
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    sys.stdout.flush()
    sys.stderr.flush()
    # A warm rank tells its node it ends (the warm pool's agent: the node need not wait for
    # this process's memory to be torn down); elsewhere there is no such module.
    notice = getattr(sys.modules.get("kfj_warm_agent"), "exit_notice", None)
    if notice is not None:
        notice(code)
    os._exit(code)


if __name__ == "__main__":
    _kfj_exit(_kfj_guarded(_kfj_main, sys.argv))
