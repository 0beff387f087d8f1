"""What the warm pool learns from its jobs' imports (issue 34; standard library only).

Loaded by path in the pool process (as `kfj_warm_learn`, like agent.py) and so present in every
process forked from it.

In a rank (`record_exit`, called by the runner's end when the rank succeeded): the modules it
imported beyond what the pool had (`sys.modules` against the pool's at its fork), reduced to the
roots (a new module whose parent is new is left out: importing the parent imports it) and to
modules loaded from the interpreter's own library or its package folders (never the job's work
folder, its workspace, the working directory or anything else the user wrote), are appended as
one small JSON line to `<key>.learn.jsonl`, unless the pool already knows them all.

In the pool (`Learned`): those lines are merged into `<key>.learned` (kept across pool
processes of the same key: the next pool imports them at its start) and imported after the
framework, one by one, within the pool's memory budget and at most `MAX_MODULES` of them. A
module that fails to import, or that starts a thread or initialises CUDA in the pool (which must
stay single-threaded and CUDA-free to fork), is dropped and remembered as bad; the pool process
then starts again without it. `%kf_pool` shows what was learned, from which job, and what was
dropped and why.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

#: The most modules a pool imports beyond its framework's.
MAX_MODULES = 64
#: The most module names one rank records.
MAX_PER_RANK = 64
_STATE_MAX_BYTES = 1024 * 1024

#: In the pool and its forks: the modules the pool holds, where modules may be learned from,
#: where ranks append what they imported, and the names the pool already knows about.
BASELINE: frozenset = frozenset()
ALLOWED_ROOTS: tuple = ()
LOG_PATH = ""
KNOWN: frozenset = frozenset()


def _real(path):
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return ""


def allowed_roots():
    """The interpreter's library and package folders (where a module may be learned from)."""
    import sysconfig

    roots = set()
    with contextlib.suppress(Exception):
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            roots.add(sysconfig.get_paths()[key])
    for p in sys.path:
        if p and ("site-packages" in p or "dist-packages" in p):
            roots.add(p)
    return tuple(sorted({r for r in (_real(p) for p in roots) if r and r != "/"}))


def prepare(log_path, known=()):
    """In the pool, once its imports are done: what its forks compare against."""
    global BASELINE, ALLOWED_ROOTS, LOG_PATH, KNOWN
    BASELINE = frozenset(sys.modules)
    ALLOWED_ROOTS = allowed_roots()
    LOG_PATH = log_path
    KNOWN = frozenset(known)


def _under(path, roots):
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def _deepest(path, roots):
    """The length of the longest of `roots` that `path` is under (0: none): a package folder
    inside the user's project (a `.venv` in the notebook's folder) is still a package folder,
    and the user's folder inside a package folder is still the user's."""
    return max((len(r) for r in roots if path == r or path.startswith(r + os.sep)), default=0)


def _user_folders():
    """Folders of the job's own code: never learned from."""
    out = []
    with contextlib.suppress(OSError):
        out.append(os.getcwd())
    for var in ("KF_JUPYTER_WORKDIR", "KF_JUPYTER_WORKSPACE", "KF_JUPYTER_RUN_DIR"):
        if os.environ.get(var):
            out.append(os.environ[var])
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None):
        out.append(os.path.dirname(main.__file__))
    return tuple(r for r in (_real(p) for p in out) if r and r != "/")


def candidates(modules=None):
    """The roots of what this process imported beyond the pool, from the interpreter's library
    and package folders only (sorted, at most MAX_PER_RANK)."""
    modules = dict(sys.modules if modules is None else modules)
    new = {name for name in modules if name not in BASELINE}
    if not new or not ALLOWED_ROOTS:
        return []
    user = _user_folders()
    out = []
    for name in sorted(new):
        parent = name.rpartition(".")[0]
        if parent in new or not _learnable_name(name):
            continue
        path = _real(getattr(modules[name], "__file__", None) or "")
        if path and _deepest(path, ALLOWED_ROOTS) > _deepest(path, user):
            out.append(name)
    # The roots that brought the most modules first (torch._dynamo: ~800): what the cap keeps.
    size = dict.fromkeys(out, 0)
    for name in new:
        for i in range(name.count(".")):
            prefix = name.rsplit(".", i + 1)[0]
            if prefix in size:
                size[prefix] += 1
                break
    return sorted(out, key=lambda n: (-size[n], n))[:MAX_PER_RANK]


def _learnable_name(name):
    top = name.split(".")[0]
    return not (
        top in ("__main__", "__mp_main__", "kf_jupyter")
        or top.startswith(("kf_", "kfj_"))
        or top in sys.builtin_module_names
    )


def record_exit(code):
    """In a rank that ends: append what it imported beyond the pool (one write). Never raises."""
    if code != 0 or not LOG_PATH:
        return
    with contextlib.suppress(Exception):
        names = [n for n in candidates() if n not in KNOWN]
        if not names:
            return
        line = {"time": time.time(), "job": os.environ.get("KF_JUPYTER_JOB_NAME", ""),
                "modules": names}  # fmt: skip
        fd = os.open(LOG_PATH, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)


def threads():
    """The threads of this process (its /proc/self/task entries)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def rss_bytes():
    """This process's resident memory."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class Learned:
    """`<key>.learned`: modules learned (name -> job, time, import seconds), modules
    dropped as bad (name -> why), modules left out for the memory cap or the count."""

    def __init__(self, meta_path):
        base = meta_path[: -len(".json")] if meta_path.endswith(".json") else meta_path
        self.path = base + ".learned"
        self.log = base + ".learn.jsonl"
        self.modules = {}
        self.bad = {}
        self.skipped = {}
        self._log_seen = None
        with contextlib.suppress(OSError, ValueError, AttributeError):
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
            self.modules = {str(k): dict(v) for k, v in (data.get("modules") or {}).items()}
            self.bad = {str(k): str(v) for k, v in (data.get("bad") or {}).items()}

    def known(self):
        """Every name the pool knows (a rank records none of them again)."""
        return {*self.modules, *self.bad, *self.skipped}

    def save(self):
        """Write the state (owner-only, atomic)."""
        data = {"modules": self.modules, "bad": self.bad, "skipped": self.skipped}
        text = json.dumps(data, indent=1, sort_keys=True)
        if len(text) > _STATE_MAX_BYTES:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with contextlib.suppress(OSError):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self.path)

    def log_changed(self):
        """The ranks' log changed since the last `take` (one stat)."""
        try:
            st = os.stat(self.log)
        except OSError:
            return False
        return (st.st_size, st.st_mtime_ns) != self._log_seen and st.st_size > 0

    def take(self):
        """Merge what ranks recorded into the state; True if there is something new."""
        taking = f"{self.log}.{os.getpid()}.taking"
        try:
            os.replace(self.log, taking)
        except OSError:
            return False
        new = False
        try:
            with open(taking, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()[-1000:]
        except OSError:
            lines = []
        with contextlib.suppress(OSError):
            os.unlink(taking)
        self._log_seen = None
        for line in lines:
            try:
                rec = json.loads(line)
                names = [str(n) for n in rec.get("modules") or []]
            except (ValueError, AttributeError, TypeError):
                continue
            for i, name in enumerate(names[:MAX_PER_RANK]):
                if name in self.known() or not _valid(name):
                    continue
                job = str(rec.get("job") or "")
                self.modules[name] = {"job": job, "time": rec.get("time"), "order": i}
                new = True
        if new:
            self.save()
        return new

    def pending(self):
        """Learned names not imported in this process yet (at most MAX_MODULES learned)."""
        names = sorted(self.modules, key=self._order)
        out = []
        for i, name in enumerate(names):
            if i >= MAX_MODULES:
                self.modules.pop(name)
                self.skipped[name] = f"over the pool's count of {MAX_MODULES} learned modules"
            elif name not in sys.modules:
                out.append(name)
        return out

    def _order(self, name):
        """Oldest record first; within one, the rank's order (the largest roots first)."""
        info = self.modules[name]
        return (float(info.get("time") or 0), int(info.get("order") or 0), name)

    def import_one(self, name, budget_bytes, cuda_why):
        """Import `name` here. None when it is fine (or skipped), else why the process must
        start again without it (it started a thread or initialised CUDA)."""
        if rss_bytes() >= budget_bytes:
            self.modules.pop(name, None)
            self.skipped[name] = (
                f"the pool holds {rss_bytes() / 2**20:.0f} MiB, its share of the memory cap "
                "(warm_max_memory_mib) is reached"
            )
            return None
        origin = _origin(name)
        if not origin or not _under(_real(origin), ALLOWED_ROOTS or allowed_roots()):
            self.modules.pop(name, None)
            self.bad[name] = "not found in the interpreter's library or package folders"
            return None
        before = threads()
        env = dict(os.environ)
        tempdir = getattr(sys.modules.get("tempfile"), "tempdir", None)
        start = time.monotonic()
        try:
            __import__(name)
        except BaseException as exc:  # SystemExit from a module included
            self.modules.pop(name, None)
            self.bad[name] = f"failed to import in the pool ({type(exc).__name__}: {exc})"[:300]
            return None
        finally:
            changed = _restore_environ(env)
            # tempfile caches the folder it first chose (torch._inductor asks at import): a
            # rank must choose from its own TMPDIR, as a cold one does.
            if "tempfile" in sys.modules:
                sys.modules["tempfile"].tempdir = tempdir
        seconds = time.monotonic() - start
        if changed:
            self.modules[name]["environ_undone"] = changed
        why = cuda_why()
        if threads() > before:
            why = f"importing it started {threads() - before} thread(s)"
        if why:
            self.modules.pop(name, None)
            self.bad[name] = f"{why} in the pool (a pool must not, to fork)"
            return why
        self.modules[name]["seconds"] = round(seconds, 3)
        return None


def _restore_environ(env):
    """Put os.environ back as it was before a learned import (sorted names it changed): a warm
    rank starts with a cold rank's environment; torch._inductor's import sets
    TORCHINDUCTOR_CACHE_DIR, which a cold rank has only once it imports it."""
    changed = sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k))
    for key in changed:
        if key in env:
            os.environ[key] = env[key]
        else:
            del os.environ[key]
    return changed


def _valid(name):
    parts = name.split(".")
    return len(name) <= 200 and all(p.isidentifier() for p in parts) and _learnable_name(name)


def _origin(name):
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return ""
    return (spec.origin or "") if spec is not None else ""


def shadowed(header, learned):
    """A learned top-level module that the launch's own folders (its working directory, script
    folder, workspace) have a file or folder of the same name for: a cold rank would import the
    user's, so the launch runs cold ('' when there is none)."""
    tops = {n.split(".")[0] for n in learned if n.split(".")[0] in sys.modules}
    tops -= {n.split(".")[0] for n in BASELINE_FRAMEWORK}
    if not tops:
        return ""
    env = header.get("env") or {}
    argv = list(header.get("argv") or [])
    folders = {header.get("cwd") or ""}
    for var in ("KF_JUPYTER_WORKDIR", "KF_JUPYTER_WORKSPACE", "KF_JUPYTER_RUN_DIR"):
        folders.add(env.get(var) or "")
    for arg in argv[1:]:
        if arg.endswith(".py"):
            folders.add(os.path.dirname(os.path.join(header.get("cwd") or "/", arg)))
            break
    for folder in sorted(f for f in folders if f):
        try:
            entries = os.listdir(folder)
        except OSError:
            continue
        for entry in entries:
            top = entry.split(".", 1)[0]
            if top in tops and (entry == top or entry.endswith((".py", ".so", ".pyc"))):
                return (
                    f"{os.path.join(folder, entry)} has the name of module {top!r}, which the "
                    "pool imported from what earlier jobs imported; a cold start imports yours"
                )
    return ""


#: The framework's own modules (the pool's preload, before anything was learned).
BASELINE_FRAMEWORK: frozenset = frozenset()


def mark_framework():
    """In the pool, after the framework's imports and before the learned ones."""
    global BASELINE_FRAMEWORK
    BASELINE_FRAMEWORK = frozenset(sys.modules)
