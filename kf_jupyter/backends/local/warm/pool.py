"""The kernel's side of the warm pool: which pool process fits a job, starting one, its memory.

A pool process is keyed by the interpreter the cold path would run (the `python3` found on the
job's PATH, or the interpreter of its `torchrun`), the framework (what it imports), the state of
that interpreter's `sys.path` folders (a package installed or removed changes their times, and so
the key) and the environment variables that are read at import time (`PYTHON*`, `LD_*`, thread
settings, `JAX_*`/`XLA_*` for JAX): a pool never serves a job whose interpreter, packages or
import-time settings differ from its own. Pools live in `<state_dir>/warm/` (owner-only), belong
to the process that started them (they end within a second of it once idle), and end after
`idle_seconds` without a launch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: What each framework's pool imports before it forks.
PRELOAD: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "torch.distributed"),
    "jax": ("jax", "jax.numpy"),
    "xgboost": ("xgboost", "xgboost.collective", "xgboost.tracker"),
}
#: Launchers whose nodes can start warm, by policy.
LAUNCHER: dict[str, str] = {"torch": "torchrun", "jax": "python3", "xgboost": "python3"}
DEFAULT_IDLE_SECONDS = 600.0
DEFAULT_MAX_POOLS = 3
#: The pools' memory together (MiB; each pool's unique memory, USS, else its RSS).
DEFAULT_MAX_MEMORY_MIB = 4096.0
#: What a pool is counted at before it has imported anything (a torch pool: ~350 MiB USS).
NEW_POOL_MIB: dict[str, float] = {"torch": 400.0, "jax": 300.0, "xgboost": 150.0}
COLD_LOG = "cold.jsonl"
_COLD_LOG_MAX_BYTES = 256 * 1024

_IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "MALLOC_", "KMP_", "MKL_", "OPENBLAS_", "GOMP_")
_PER_PROCESS = frozenset(
    {
        "PYTHONUNBUFFERED",
        "JAX_PROCESS_ID",
        "JAX_NUM_PROCESSES",
        "JAX_COORDINATOR_ADDRESS",
    }
)
_HERE = Path(__file__).resolve().parent
_sys_path_cache: dict[str, list[str]] = {}


@dataclass(frozen=True)
class Pool:
    """Where a pool process listens, and what it is."""

    key: str
    python: str
    framework: str
    socket: Path
    meta: Path
    log: Path


def warm_dir(state_dir: Path) -> Path:
    """The owner-only folder of the pool processes."""
    d = Path(state_dir) / "warm"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        os.chmod(d, 0o700)
    return d


def _import_env(framework: str, env: Mapping[str, str]) -> dict[str, str]:
    prefixes = _IMPORT_TIME_PREFIXES
    if framework == "jax":
        prefixes = (*prefixes, "JAX_", "XLA_", "OMP_")
    elif framework == "xgboost":
        prefixes = (*prefixes, "OMP_")
    elif framework == "torch":
        # TORCHDYNAMO_*/TORCHINDUCTOR_*: read when torch._dynamo is imported (a learned module)
        prefixes = (*prefixes, "TORCH_", "TORCHDYNAMO_", "TORCHINDUCTOR_")
    return {
        k: v
        for k, v in env.items()
        if k.startswith(prefixes) and k not in _PER_PROCESS and not k.startswith("TORCHELASTIC_")
    }


def _sys_path(python: str, import_env: Mapping[str, str]) -> list[str]:
    """The interpreter's sys.path with the job's import-time variables (PYTHONPATH, ...)."""
    cache_key = json.dumps([python, sorted(import_env.items())])
    if cache_key not in _sys_path_cache:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env.update({k: v for k, v in import_env.items() if k.startswith("PYTHON")})
        try:
            out = subprocess.run(
                [python, "-c", "import json, sys; print(json.dumps(sys.path))"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
                env=env,
            ).stdout
            _sys_path_cache[cache_key] = [p for p in json.loads(out) if p]
        except (OSError, subprocess.SubprocessError, ValueError):
            _sys_path_cache[cache_key] = []
    return _sys_path_cache[cache_key]


def _packages_state(python: str, import_env: Mapping[str, str]) -> list[tuple[str, int]]:
    """Modification times of the interpreter and of its package folders (site-/dist-packages,
    where pip installs and removes, and editable installs put their .pth files)."""
    state = []
    with contextlib.suppress(OSError):
        state.append((os.path.realpath(python), os.stat(python).st_mtime_ns))
    for p in _sys_path(python, import_env):
        if "site-packages" not in p and "dist-packages" not in p:
            continue
        with contextlib.suppress(OSError):
            state.append((p, os.stat(p).st_mtime_ns))
    return state


def interpreter_for(program: str, path: list[str]) -> str | None:
    """The interpreter the cold path runs for `program` on `path` (a script's shebang)."""
    found = shutil.which(program, path=os.pathsep.join(path))
    if found is None:
        return None
    if program.startswith("python"):
        return found
    try:
        with open(found, "rb") as fh:
            head = fh.read(4096).decode("utf-8", "replace")
    except OSError:
        return None
    wrapped = _our_torchrun(head) if program == "torchrun" else None
    if wrapped is not None:
        return wrapped
    first = head.split("\n", 1)[0].strip()
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if not words or "python" not in os.path.basename(words[0]) or len(words) > 1:
        return None  # `#!/usr/bin/env python3` and friends: resolved by the shim's cold path
    return words[0]


def _our_torchrun(text: str) -> str | None:
    """The python of the `torchrun` wrapper a layered package environment gets (envs.py:
    `#!/bin/sh` + `exec "PYTHON" -m torch.distributed.run "$@"`), exactly that text; else None."""
    from ..envs import TORCHRUN_WRAPPER

    prefix, _, suffix = TORCHRUN_WRAPPER.partition("{python}")
    if not (text.startswith(prefix) and text.endswith(suffix)):
        return None
    python = text[len(prefix) : len(text) - len(suffix)]
    if not python or '"' in python or "\n" in python or not os.path.isabs(python):
        return None
    return python


def pool_key(python: str, framework: str, env: Mapping[str, str]) -> str:
    """The key of the pool that may serve a node with this interpreter, framework and env."""
    import_env = _import_env(framework, env)
    data = json.dumps(
        {
            "python": python,
            "framework": framework,
            "preload": PRELOAD[framework],
            "env": sorted(import_env.items()),
            "packages": _packages_state(python, import_env),
            "uid": os.getuid(),
        },
        sort_keys=True,
    )
    return f"{framework}-{hashlib.sha256(data.encode()).hexdigest()[:16]}"


#: The share of the container's memory limit (cgroup) the pools may hold together.
CGROUP_SHARE = 0.25
_CGROUP_UNLIMITED = 2**60


def cgroup_memory_limit_bytes(root: str = "/sys/fs/cgroup") -> int | None:
    """This process's cgroup memory limit (v2 `memory.max`, else v1
    `memory.limit_in_bytes`, of its own cgroup, then of the root), or None without one."""
    own_v2 = own_v1 = ""
    with contextlib.suppress(OSError):
        with open("/proc/self/cgroup", encoding="utf-8") as fh:
            for line in fh:
                hier, _, rest = line.strip().partition(":")
                controllers, _, path = rest.partition(":")
                if hier == "0" and not controllers:
                    own_v2 = path
                elif "memory" in controllers.split(","):
                    own_v1 = path
    candidates = [
        os.path.join(root, own_v2.lstrip("/"), "memory.max"),
        os.path.join(root, "memory.max"),
        os.path.join(root, "memory", own_v1.lstrip("/"), "memory.limit_in_bytes"),
        os.path.join(root, "memory", "memory.limit_in_bytes"),
    ]
    for path in candidates:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text == "max":
            return None
        if text.isdigit():
            value = int(text)
            return value if 0 < value < _CGROUP_UNLIMITED else None
    return None


def effective_max_memory_mib(configured: float, root: str = "/sys/fs/cgroup") -> float:
    """`warm_max_memory_mib`, lowered to CGROUP_SHARE of the container's memory limit when
    there is one (a 2 GiB JupyterHub server: 512 MiB for the pools)."""
    limit = cgroup_memory_limit_bytes(root)
    if limit is None:
        return float(configured)
    return min(float(configured), limit * CGROUP_SHARE / 2**20)


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        import psutil

        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except Exception:
        return False


SOCKET_DIR_FALLBACKS = 3  # `<tmp>/kf-jupyter-<uid>-1` .. `-3` when the first is taken


def socket_dir_candidates() -> list[Path]:
    """Where the pool's sockets may live, in order: `$XDG_RUNTIME_DIR/kf-jupyter-<uid>` (when it
    is set, short and a folder), `<tmp>/kf-jupyter-<uid>`, then `<tmp>/kf-jupyter-<uid>-N`."""
    import tempfile

    uid = os.getuid()
    out = []
    xdg = os.environ.get("XDG_RUNTIME_DIR") or ""
    if xdg and len(xdg) <= 40 and os.path.isdir(xdg):
        out.append(Path(xdg) / f"kf-jupyter-{uid}")
    tmp = Path(tempfile.gettempdir())
    out.append(tmp / f"kf-jupyter-{uid}")
    out.extend(tmp / f"kf-jupyter-{uid}-{n}" for n in range(1, SOCKET_DIR_FALLBACKS + 1))
    return out


def _private_dir(d: Path) -> str:
    """'' when `d` is (or is now made) a folder of this user that only it can open, else why not.
    Never follows a symlink; a folder another user made first is left alone."""
    with contextlib.suppress(FileExistsError):
        try:
            d.mkdir(mode=0o700)
        except OSError as exc:
            if not isinstance(exc, FileExistsError):
                return f"{d} cannot be made ({exc.strerror})"
            raise
    try:
        st = os.lstat(d)
    except OSError as exc:
        return f"{d} cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{d} is not a folder of this user (it is a link or a file)"
    if st.st_uid != os.getuid():
        return f"{d} is not a folder of this user (uid {st.st_uid} made it)"
    if st.st_mode & 0o077:
        return f"{d} is not a folder of this user with mode 0700 (mode {st.st_mode & 0o777:o})"
    return ""


def socket_dir() -> Path:
    """A short owner-only folder for the sockets (a Unix socket path holds at most 107 bytes).

    The first of `socket_dir_candidates()` that is (or can be made) this user's, mode 0700: a
    folder that another local user created first under a shared /tmp is skipped, never used.
    OSError naming every candidate and why when none is (the job then starts cold).
    """
    why = []
    for d in socket_dir_candidates():
        problem = _private_dir(d)
        if not problem:
            return d
        why.append(problem)
    raise OSError(
        "no private folder for the warm pool's sockets: "
        + "; ".join(why)
        + " (set XDG_RUNTIME_DIR to a folder of yours, or remove these)"
    )


def pool_for(state_dir: Path, python: str, framework: str, env: Mapping[str, str]) -> Pool:
    """The pool (running or not) for this interpreter, framework and environment."""
    key = pool_key(python, framework, env)
    d = warm_dir(state_dir)
    where = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]
    sock = socket_dir() / f"{where}-{key}.sock"
    return Pool(key, python, framework, sock, d / f"{key}.json", d / f"{key}.log")


def ensure_started(
    pool: Pool,
    env: Mapping[str, str],
    idle_seconds: float = DEFAULT_IDLE_SECONDS,
    max_pools: int = DEFAULT_MAX_POOLS,
    max_memory_mib: float = DEFAULT_MAX_MEMORY_MIB,
) -> bool:
    """Start the pool process unless it runs; True if it runs already (it may still import)."""
    max_memory_mib = effective_max_memory_mib(max_memory_mib)
    d = pool.meta.parent
    lock = os.open(d / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        meta = _read_meta(pool.meta)
        if meta and int(meta.get("pid") or 0) and _alive(int(meta["pid"])):
            return True
        if meta and not meta.get("pid") and time.time() - float(meta.get("created", 0)) < 5:
            return True  # being started by another process right now
        for stale in (pool.socket, pool.meta, launch_file(pool.meta)):
            with contextlib.suppress(OSError):
                stale.unlink()
        _make_room(
            pool.meta.parent,
            max_pools - 1,
            (max_memory_mib - NEW_POOL_MIB.get(pool.framework, 300.0)) * 2**20,
        )
        others = sum(
            pool_bytes(p)
            for p in list_pools(pool.meta.parent.parent)
            if p.get("alive") and p.get("key") != pool.key
        )
        budget_mib = max(0.0, max_memory_mib - others / 2**20)
        zenv = {k: v for k, v in os.environ.items() if not k.startswith("KF_JUPYTER_")}
        for k in list(zenv):
            if k in _import_env(pool.framework, zenv):
                del zenv[k]
        zenv.update(_import_env(pool.framework, env))
        owner = os.getpid()
        owner_ct = ""
        with contextlib.suppress(Exception):
            import psutil

            owner_ct = repr(psutil.Process(owner).create_time())
        # The meta file exists from now on, so a shim arriving early waits for the imports.
        fd = os.open(pool.meta, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(
                {"pid": 0, "state": "starting", "python": pool.python, "created": time.time()}, fh
            )
        logfd = os.open(pool.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(
                [
                    pool.python,
                    str(_HERE / "zygote.py"),
                    str(pool.socket),
                    str(pool.meta),
                    ",".join(PRELOAD[pool.framework]),
                    str(owner),
                    owner_ct or "none",
                    repr(float(idle_seconds)),
                    repr(budget_mib),  # what it may grow to with learned imports (learn.py)
                ],
                env=zenv,
                cwd=str(d),
                stdin=subprocess.DEVNULL,
                stdout=logfd,
                stderr=logfd,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(logfd)
        # Its pid beside the meta (which the pool itself rewrites once its interpreter runs): a
        # node arriving before then waits for this live process rather than starting cold.
        with contextlib.suppress(OSError):
            launch = launch_file(pool.meta)
            fd = os.open(launch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(str(proc.pid))
        _reap_later(proc)
        return False
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)


def launch_file(meta: Path) -> Path:
    """Where the kernel writes a pool's pid as it launches it (`<key>.launch`)."""
    return meta.with_suffix(".launch")


def _reap_later(proc: subprocess.Popen[bytes]) -> None:
    import threading

    threading.Thread(target=proc.wait, name="kf-jupyter-warm-reap", daemon=True).start()


def has_room(state_dir: Path, framework: str, max_pools: int, max_memory_mib: float) -> bool:
    """Another pool of `framework` would fit under the caps without stopping one."""
    max_memory_mib = effective_max_memory_mib(max_memory_mib)
    alive = [p for p in list_pools(state_dir) if p.get("alive")]
    held = sum(pool_bytes(p) for p in alive)
    new = NEW_POOL_MIB.get(framework, 300.0) * 2**20
    return len(alive) < max_pools and held + new <= max_memory_mib * 2**20


def pool_bytes(info: Mapping[str, Any]) -> int:
    """The memory a pool holds: its process and the processes it forked ahead together
    (their PSS summed: what they share is counted once), else the pool process's USS, else
    its RSS. Its USS alone falls to ~1 MiB once a spare shares its pages, so it is not used
    when PSS can be read."""
    return int(info.get("family_pss_bytes") or info.get("uss_bytes") or info.get("rss_bytes") or 0)


def _make_room(d: Path, keep: int, max_bytes: float = float("inf")) -> None:
    """Stop the least recently used pools so that at most `keep` others run, holding at most
    `max_bytes` together."""
    alive = [p for p in list_pools(d.parent) if p.get("alive")]
    # A pool serving a node is never stopped for room: that would kill a running job.
    pools = [p for p in alive if not _busy(int(p["pid"]), p.get("spares") or [])]
    pools.sort(key=lambda p: p.get("mtime", 0.0))
    busy_bytes = sum(pool_bytes(p) for p in alive if p not in pools)
    keep -= len(alive) - len(pools)
    max_bytes -= busy_bytes
    while pools and (
        len(pools) > max(0, keep) or sum(pool_bytes(p) for p in pools) > max(0.0, max_bytes)
    ):
        victim = pools.pop(0)
        stop_pool(Path(victim["meta_path"]))


def _busy(pid: int, spares: list[int] | tuple[int, ...] = ()) -> bool:
    """The pool process has a child that is not one of its spares: a node of a job."""
    try:
        import psutil

        return any(c.pid not in spares for c in psutil.Process(pid).children())
    except Exception:
        return False


def record_cold(state_dir: Path, job: str, why: str) -> None:
    """Remember why `job` started cold (the last ones are shown by %kf_pool)."""
    path = warm_dir(state_dir) / COLD_LOG
    line = json.dumps({"time": time.time(), "job": job, "why": why}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode("utf-8", "surrogatepass"))
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if size > _COLD_LOG_MAX_BYTES:  # keep the newest: rewrite the tail (atomic replace)
        keep = recent_cold(state_dir, 200)
        tmp = path.with_name(f".{COLD_LOG}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in keep)
        os.replace(tmp, path)


def recent_cold(state_dir: Path, n: int = 5) -> list[dict[str, Any]]:
    """The last `n` cold starts (time, job, why), oldest first."""
    path = Path(state_dir) / "warm" / COLD_LOG
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            data = fh.read()
    except OSError:
        return []
    out = []
    for line in data.splitlines()[-n:]:
        with contextlib.suppress(ValueError):
            rec = json.loads(line)
            if isinstance(rec, dict) and "why" in rec:
                out.append(rec)
    return out


def shim_bin(state_dir: Path) -> Path:
    """The folder of `torchrun` and `python3` shims put first on a warm job's PATH."""
    d = warm_dir(state_dir) / "bin"
    d.mkdir(exist_ok=True, mode=0o700)
    for program in ("torchrun", "python3"):
        text = (
            "#!/bin/sh\n"
            "# kf-jupyter warm start shim: hands the launch to the warm pool, or runs the real one.\n"
            f'exec "$KF_JUPYTER_WARM_PYTHON" -I -S "$KF_JUPYTER_WARM_SHIM" {program} "$@"\n'
        )
        path = d / program
        try:
            current = path.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != text:
            tmp = d / f".{program}.{os.getpid()}.tmp"
            tmp.write_text(text, encoding="utf-8")
            os.chmod(tmp, 0o700)
            os.replace(tmp, path)
        elif stat.S_IMODE(path.stat().st_mode) != 0o700:
            os.chmod(path, 0o700)  # e.g. a copied or hand-tightened store lost the exec bit
    return d


def warm_env(state_dir: Path, pool: Pool, path: str) -> dict[str, str]:
    """What a warm node's environment adds: the shim folder first on PATH, the pool's socket."""
    bindir = shim_bin(state_dir)
    return {
        "PATH": os.pathsep.join([str(bindir), path]),
        "KF_JUPYTER_WARM_BIN": str(bindir),
        "KF_JUPYTER_WARM_SOCKET": str(pool.socket),
        "KF_JUPYTER_WARM_META": str(pool.meta),
        "KF_JUPYTER_WARM_PYTHON": sys.executable,
        "KF_JUPYTER_WARM_SHIM": str(_HERE / "shim.py"),
        "KF_JUPYTER_WARM_FRAMEWORK": pool.framework,
    }


def list_pools(state_dir: Path) -> list[dict[str, Any]]:
    """Every pool process of this state folder: framework, pid, state, launches, memory."""
    d = Path(state_dir) / "warm"
    out: list[dict[str, Any]] = []
    if not d.is_dir():
        return out
    for meta_path in sorted(d.glob("*.json")):
        meta = _read_meta(meta_path) or {}
        pid = int(meta.get("pid") or 0)
        info: dict[str, Any] = {
            "key": meta_path.stem,
            "framework": meta_path.stem.split("-", 1)[0],
            "pid": pid,
            "state": meta.get("state", "?"),
            "python": meta.get("python", ""),
            "launches": int(meta.get("served") or 0),
            "alive": bool(pid) and _alive(pid),
            "meta_path": str(meta_path),
            "rss_bytes": None,
            "uss_bytes": None,
            "fds": None,
            # Processes forked ahead of a job (issue 21): nodes and the ranks they forked.
            "spares": [],
            "spare_processes": 0,
            "spare_pss_bytes": None,
            "family_pss_bytes": None,
            # What it imports beyond its framework, learned from its jobs (learn.py).
            "preload": list(meta.get("preload") or PRELOAD.get(meta_path.stem.split("-")[0], ())),
            "learned": learned_of(meta_path),
        }
        with contextlib.suppress(OSError):
            info["mtime"] = meta_path.stat().st_mtime
        if info["alive"]:
            with contextlib.suppress(Exception):
                import psutil

                p = psutil.Process(pid)
                info["rss_bytes"] = p.memory_info().rss
                pss = None
                with contextlib.suppress(Exception):
                    full = p.memory_full_info()
                    info["uss_bytes"] = full.uss
                    pss = getattr(full, "pss", None)
                info["fds"] = p.num_fds()
                _spares_of(p, meta, info, pss)
        out.append(info)
    return out


def learned_of(meta_path: Path) -> dict[str, Any]:
    """What a pool key learned from its jobs (`<key>.learned`, JSON; learn.py): {"modules":
    {name: {"job", "time", "seconds"}}, "bad": {name: why}, "skipped": {name: why}}."""
    path = meta_path.with_suffix(".learned")
    data = _read_meta(path) or {}
    return {k: dict(data.get(k) or {}) for k in ("modules", "bad", "skipped")}


def _spares_of(pool: Any, meta: Mapping[str, Any], info: dict[str, Any], pss: int | None) -> None:
    """The pool's spares (children it lists as such, with the ranks below them) and the PSS of
    the pool and its spares together."""
    listed = {int(x) for x in meta.get("spares") or [] if str(x).isdigit()}
    spares = [c for c in pool.children() if c.pid in listed]
    procs = []
    for c in spares:
        procs.append(c)
        with contextlib.suppress(Exception):
            procs.extend(c.children(recursive=True))
    info["spares"] = [c.pid for c in spares]
    info["spare_processes"] = len(procs)
    total = 0
    for c in procs:
        try:
            total += int(c.memory_full_info().pss)
        except Exception:
            total = -1
            break
    if total >= 0 and pss is not None:
        info["spare_pss_bytes"] = total
        info["family_pss_bytes"] = int(pss) + total


def stop_pool(meta_path: Path, timeout: float = 5.0) -> None:
    """Stop one pool process (its running nodes are killed with it)."""
    import signal

    meta = _read_meta(meta_path) or {}
    pid = int(meta.get("pid") or 0)
    with contextlib.suppress(OSError):
        meta_path.unlink()
    with contextlib.suppress(OSError):
        launch_file(meta_path).unlink()
    if pid and _alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + timeout
        while time.monotonic() < end and _alive(pid):
            time.sleep(0.02)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    sock = meta.get("socket")
    if sock:
        with contextlib.suppress(OSError):
            os.unlink(sock)


def stop_all(state_dir: Path) -> int:
    """Stop every pool process of this state folder, and its supervisor host (running jobs go
    on); how many pool processes there were."""
    from .. import supervisor_host

    pools = list_pools(state_dir)
    for p in pools:
        stop_pool(Path(p["meta_path"]))
    with contextlib.suppress(OSError):
        supervisor_host.stop(state_dir)
    return len(pools)
