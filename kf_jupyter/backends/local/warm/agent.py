"""What a process forked from the warm pool runs (standard library; torch only where torch runs).

`child_main` turns the forked child into the node the cold path would have started: a new
session, the shim's stdin/stdout/stderr, exactly the header's environment, working directory and
argv. Then either

- `python3 SCRIPT ARGS...`: the script runs as `__main__`, as `python3 -u SCRIPT` would; or
- `torchrun [--max-restarts 0] [--monitor-interval S] SCRIPT ARGS...`: this process plays
  torchrun's agent for a static rendezvous (the PET_* variables): node 0 hosts the agent store
  on PET_MASTER_ADDR:PET_MASTER_PORT, every rank is forked from here with the environment
  torchrun's LocalElasticAgent gives its workers, the first rank to fail stops the others and
  the node ends with exit code 1 after a torchrun-style "Root Cause" summary, and nodes leave
  together through an exit barrier on the store (as torchrun does).

`unsupported(header)` names what the warm path does not do (restarts, elastic sizes, another
rendezvous backend, a command other than a script...): the shim then runs the real program.

Forked ahead (issue 21): the pool keeps a node process forked before any job (`spare_main`),
which has itself forked the ranks a node of the last job had (`rank_spare_main`). They have run
nothing but the fork and wait on a socket for their launch: the node gets the shim's header and
descriptors, each rank the environment, argv, working directory, limits and descriptors its node
gives it, and both then do exactly what a process forked at that moment does. A spare serves one
job and is replaced by a new fork once that job's nodes are done; an unused spare rank ends when
its node starts.

A rank's end reaches its node before the rank's memory is torn down (issue 21): the runner's
exit (`exit_notice`, called by kf_jupyter's entrypoint and by `_finish` right before
`os._exit`) writes the exit code on the socket the rank got its launch on, and the node counts
a rank that said 0 as ended at once instead of waiting ~3 ms for the kernel to unmap the forked
torch process. A rank that initialised CUDA or holds a GPU's device file says nothing (its
devices are free only once it is gone), nor does one killed or failing: the node then waits for
its exit as before. A node forked ahead says its own end the same way to the pool, on the
socket it got its launch on (the pool then reports the exit and stops what the node left
without waiting for the node's teardown, and sweeps again once it has reaped it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import select
import signal
import socket
import struct
import sys
import time

TORCH_WORKER_GRACE = 30.0  # torchrun's _shutdown timeout for its workers
EXIT_BARRIER_SECONDS = 300.0  # torchrun's exit_barrier_timeout
EXIT_KEY = "kf-jupyter/warm/exit"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
MADV_COLLAPSE = 25  # Linux 6.1+: back a range with transparent huge pages now
_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
MESSAGE_MAX = 16 * 1024 * 1024
#: The runner every function job ships (kf_jupyter/entrypoint.py), compiled once in the pool.
_RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))), "entrypoint.py")  # fmt: skip
#: {source bytes: code compiled from them} made in the pool before it forks (see `_compiled`).
_COMPILED: dict = {}
#: In a rank: the socket its node reads the rank's exit code from (see `exit_notice`).
_NOTICE = None


class _Stop(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


# ----------------------------------------------------------------------------- parsing


def parse_torchrun(args):
    """(max_restarts, monitor_interval, script, script_args), or a str saying why not."""
    max_restarts = 0
    monitor = None
    i = 0
    while i < len(args) and args[i].startswith("-"):
        word = args[i]
        name, eq, value = word.partition("=")
        if name in ("--max-restarts", "--max_restarts", "--monitor-interval", "--monitor_interval"):
            if not eq:
                if i + 1 >= len(args):
                    return f"torchrun option {name} has no value"
                value = args[i + 1]
                i += 1
            try:
                if "restarts" in name:
                    max_restarts = int(value)
                else:
                    monitor = float(value)
            except ValueError:
                return f"torchrun option {name}={value!r} is not a number"
        else:
            return f"torchrun option {name} is not handled by the warm path"
        i += 1
    if i >= len(args):
        return "torchrun was given no script"
    if max_restarts:
        return (
            f"max_restarts={max_restarts}: torchrun restarts failed workers, which the warm "
            "path does not do"
        )
    return (max_restarts, monitor, args[i], list(args[i + 1 :]))


def unsupported(header):
    """Why this launch must run cold (None: it can run warm)."""
    why = _limits_why(header.get("rlimits"))
    if why:
        return why
    mode = header.get("mode")
    argv = list(header.get("argv") or [])
    env = header.get("env") or {}
    if mode == "python":
        if len(argv) < 2 or argv[1].startswith("-") or not argv[1].endswith(".py"):
            return "the command is not `python3 SCRIPT.py ...`"
        return None
    if mode != "torchrun":
        return f"unknown launch mode {mode!r}"
    parsed = parse_torchrun(argv[1:])
    if isinstance(parsed, str):
        return parsed
    if not parsed[2].endswith(".py"):
        return "torchrun runs something other than a Python script"
    for var in ("PET_RDZV_BACKEND", "PET_RDZV_ENDPOINT", "PET_STANDALONE", "PET_NO_PYTHON"):
        if env.get(var):
            return f"{var} is set (the warm path does static rendezvous only)"
    for var in ("PET_NNODES", "PET_NPROC_PER_NODE"):
        value = env.get(var, "")
        if not value.isdigit() or int(value) < 1:
            return f"{var}={value!r} (the warm path needs a fixed number)"
    if not env.get("PET_NODE_RANK", "0").isdigit():
        return "PET_NODE_RANK is not a number"
    return None


def _limits_why(rlimits):
    """Why the launcher's resource limits cannot be given to a forked child ('' if they can):
    a hard limit above the pool's own cannot be raised without privilege."""
    import resource

    for name, pair in (rlimits or {}).items():
        which = getattr(resource, name, None)
        if which is None or not isinstance(pair, list) or len(pair) != 2:
            continue
        with contextlib.suppress(OSError, ValueError):
            hard = resource.getrlimit(which)[1]
            want = pair[1]
            inf = resource.RLIM_INFINITY
            if hard != inf and (want == inf or want > hard) and os.geteuid() != 0:
                return f"the job's {name} hard limit ({want}) is above the pool's ({hard})"
    return ""


def _apply_limits(rlimits, affinity):
    """The launcher's resource limits and CPU affinity, as a cold rank inherits them."""
    import resource

    for name, pair in (rlimits or {}).items():
        which = getattr(resource, name, None)
        if which is not None and isinstance(pair, list) and len(pair) == 2:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(which, (pair[0], pair[1]))
    if affinity:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.sched_setaffinity(0, affinity)


# ----------------------------------------------------------------------------- messages


def send_msg(sock, obj, fds=()):
    """A length-prefixed JSON message, with `fds` passed along (SCM_RIGHTS)."""
    data = json.dumps(obj).encode("utf-8", "surrogatepass")
    payload = struct.pack("!I", len(data)) + data
    anc = []
    if fds:
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
    sent = sock.sendmsg([payload], anc)
    if sent < len(payload):
        sock.sendall(payload[sent:])


def recv_msg(sock, max_fds=3, max_bytes=MESSAGE_MAX):
    """(message, fds) of `send_msg`; (None, []) when the other end closed without one."""
    fds = []
    msg, ancdata, _flags, _addr = sock.recvmsg(65536, socket.CMSG_LEN(max_fds * 4))
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(cdata) // 4
            fds.extend(struct.unpack(f"{n}i", cdata[: n * 4]))
    if not msg:
        return None, fds
    data = msg
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            raise ValueError("short header")
        data += chunk
    (length,) = struct.unpack("!I", data[:4])
    if length > max_bytes:
        raise ValueError("header too large")
    data = data[4:]
    while len(data) < length:
        chunk = sock.recv(min(65536, length - len(data)))
        if not chunk:
            raise ValueError("truncated header")
        data += chunk
    return json.loads(data[:length].decode("utf-8", "surrogatepass")), fds


# ----------------------------------------------------------------------------- the child


#: Environment variables the pool's imports set (re-set in every child, as its imports would).
SET_BY_IMPORTS: dict = {}


def prepare_parent(preload, set_by_imports=None):
    """Called once in the pool process after its imports (nothing that starts threads)."""
    SET_BY_IMPORTS.clear()
    SET_BY_IMPORTS.update(set_by_imports or {})
    import ctypes  # noqa: F401  (imported here, used after fork: no import in the child)
    import tempfile  # noqa: F401
    import traceback  # noqa: F401
    import types  # noqa: F401

    _skip_import_finalizers(preload)
    _precompile_runner()
    _collapse_huge_pages()


def _precompile_runner():
    """Compile the runner once, as jobs ship it: without its comment-only lines
    (program.COMMENT_LINE, `runner_source`)."""
    with contextlib.suppress(OSError, SyntaxError, ValueError):
        with open(_RUNNER, "rb") as fh:
            source = re.sub(rb"(?m)^[ \t]*#.*\n", b"", fh.read())
        _COMPILED[source] = compile(source, _RUNNER, "exec", dont_inherit=True)


def _huge_page_size():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return 2 << 20


def _collapse_huge_pages():
    """The pool's own anonymous memory (what its imports built: ~150 MiB for torch) is moved
    onto transparent huge pages (MADV_COLLAPSE), once, before anything is forked.

    Every node and rank is a fork of the pool, and a fork copies, then its exit tears down, one
    page-table entry per 4 KiB page the pool holds: for torch 9 ms of a rank's exit (its parent
    sees it only after that) and 13-24 ms of each fork, on the path of every warm job (issue
    21). On huge pages that is one entry per 2 MiB: 2-3 ms and 6 ms. Nothing else changes: the
    pages stay shared copy-on-write (a child that writes one gets a 4 KiB copy, as before), the
    memory's contents and the pool's size stay the same, and the areas are not marked for huge
    pages (a child's new memory is allocated as it always was). Best effort: a kernel before
    6.1, huge pages switched off (`never`) or no huge page free leave the pool as it was.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        madvise.restype = ctypes.c_int
        huge = _huge_page_size()
        with open("/proc/self/maps") as fh:
            lines = fh.readlines()
        for line in lines:
            fields = line.split()
            perms, path = fields[1], (fields[5] if len(fields) > 5 else "")
            if not perms.startswith("rw") or perms[3] != "p" or path not in ("", "[heap]"):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            start, end = -(-lo // huge) * huge, hi // huge * huge
            if end > start:
                madvise(start, end - start, MADV_COLLAPSE)  # an error leaves the range as it was


def _with_filename(code, filename):
    import types

    consts = tuple(
        _with_filename(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=consts)


def _compiled(source, script):
    """`compile(source, script, "exec")` as `python3 SCRIPT` compiles it (no future flags of
    this module); the runner's code comes from the pool's own compile of the same bytes, under
    the script's name (compiling the 33 KB runner took 5-30 ms in every rank)."""
    code = _COMPILED.get(source)
    if code is not None:
        return _with_filename(code, script)
    return compile(source, script, "exec", dont_inherit=True)


def _skip_import_finalizers(preload):
    """The preloaded framework's own exit-time finalizers do not run at a warm rank's exit.

    Importing torch makes ~130 `weakref.finalize(..., atexit=True)` objects (torch.library's op
    libraries) whose only work at exit is to deregister C++ operators from torch's dispatcher in
    a process about to end: 70 ms on a quiet machine, 0.3 s loaded, on the exit path of every
    rank (issue 21). A rank's exit is invisible to them (its memory goes with it), so in the
    pool they are marked atexit=False; any finalizer the user's code makes still runs.
    """
    import weakref

    roots = tuple(sorted({name.split(".")[0] for name in preload}))
    if not roots:
        return
    with contextlib.suppress(Exception):
        for info in list(weakref.finalize._registry.values()):  # type: ignore[attr-defined]
            module = getattr(info.func, "__module__", None) or ""
            if module.split(".")[0] in roots:
                info.atexit = False


def _pdeathsig():
    """Die with the parent (the pool, or the node's agent): no rank outlives its launcher."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _subreaper():
    """Orphans below the node (a daemon a rank double-forked) are re-parented to the node, not to
    the pool: while the node lives they stay in its tree; when it ends they reach the pool as its
    only children that are not nodes, and the pool stops them (zygote.py `_sweep_orphans`)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _reset_signals():
    signal.set_wakeup_fd(-1)
    for name in ("SIGCHLD", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGPIPE", "SIGUSR1", "SIGUSR2"):
        sig = getattr(signal, name, None)
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN if name == "SIGPIPE" else signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _fresh_stdio():
    """stdin/stdout/stderr over fds 0-2, as `python -u` has them (unbuffered, write-through)."""
    import io

    def text(fd, mode):
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "r":
            return io.TextIOWrapper(
                io.BufferedReader(raw), encoding=sys.stdin.encoding, errors=sys.stdin.errors
            )
        return io.TextIOWrapper(
            raw,
            encoding=sys.stdout.encoding if fd == 1 else sys.stderr.encoding,
            errors=sys.stdout.errors if fd == 1 else "backslashreplace",
            write_through=True,
        )

    sys.stdin = sys.__stdin__ = text(0, "r")
    sys.stdout = sys.__stdout__ = text(1, "w")
    sys.stderr = sys.__stderr__ = text(2, "w")


def _set_environ(env):
    os.environ.clear()
    os.environ.update(env)
    for key, value in SET_BY_IMPORTS.items():
        os.environ.setdefault(key, value)


def _fresh_state():
    """What a new interpreter would not share with its siblings: RNG seeds, thread counts."""
    nprand = sys.modules.get("numpy.random")
    if nprand is not None:
        with contextlib.suppress(Exception):
            nprand.seed()
    torch = sys.modules.get("torch")
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        with contextlib.suppress(Exception):
            torch.set_num_threads(int(threads))


def _new_session():
    if os.getsid(0) != os.getpid():
        os.setsid()


def _take(header, fds):
    """What a process started by the launcher has: its limits and affinity, stdin/stdout/stderr,
    working directory, umask and environment."""
    _apply_limits(header.get("rlimits"), header.get("affinity"))
    for target, fd in zip((0, 1, 2), fds):
        if fd != target:
            os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(header["cwd"])
    os.umask(int(header.get("umask", 0o022)))
    _set_environ(header["env"])
    _fresh_stdio()


def child_main(header, fds, spare_ranks=()):
    """The forked child: become the node, run it, return its exit code. `spare_ranks`: the
    (pid, socket) of ranks this node forked ahead (`spare_main`)."""
    _reset_signals()
    _new_session()
    _pdeathsig()
    _subreaper()
    _take(header, fds)
    argv = list(header["argv"])
    if header["mode"] == "python":
        _drop_spares(spare_ranks)
        _wait_for_rank0_service(os.environ)
        # `python3 SCRIPT` (unbuffered through PYTHONUNBUFFERED, as the job's env has it): no -u
        return run_script(argv[1:], python=argv[0], unbuffered=False)
    return run_torchrun(argv[1:], header, list(spare_ranks))


def _drop_spares(spares):
    """Spare ranks a job does not use end now (their socket closes: they leave, running nothing)."""
    for _pid, sock in spares:
        with contextlib.suppress(OSError):
            sock.close()


def _orphaned(parent):
    """The process that forked this one is gone (it died before PDEATHSIG was set)."""
    return os.getppid() != parent


def spare_main(sock, ranks, parent):
    """A node forked ahead of its job: fork `ranks` spare ranks, then wait on `sock` for one
    launch (the shim's header and descriptors) and run it as `child_main` would. The other end
    closing (the pool dropping it) ends it; so does the pool's death (PDEATHSIG)."""
    _reset_signals()
    _new_session()
    _pdeathsig()
    if _orphaned(parent):
        return 0
    _subreaper()
    spares = []
    for _ in range(max(0, int(ranks))):
        spares.append(_fork_spare_rank(sock, spares))
    _rehearse(runner=False)
    try:
        header, fds = recv_msg(sock)
    except (OSError, ValueError):
        header, fds = None, []
    if header is None:
        _drop_spares(spares)
        return 0
    _hold_notice(sock)  # the node says its own end on it, as a rank does (`exit_notice`)
    code = child_main(header, fds, spares)
    _flush_std()
    exit_notice(code)
    return code


def _hold_notice(sock):
    """`sock` is where this process says it ended with 0 (`exit_notice`)."""
    global _NOTICE
    with contextlib.suppress(OSError):
        st = os.fstat(sock.fileno())
        _NOTICE = (sock, (st.st_dev, st.st_ino), os.getpid())


def _drop_notice():
    """A process forked from one that holds a notice socket does not say its parent's end."""
    global _NOTICE
    held, _NOTICE = _NOTICE, None
    if held is not None:
        with contextlib.suppress(OSError):
            held[0].close()


def _rehearse(runner):
    """In a process forked ahead, while it waits: the steps of its launch that write to memory
    it shares with the pool, done once on what it has, so that the copy-on-write faults they
    take (a few thousand 4 KiB copies) are taken now and not after the launch (issue 21).

    Setting the environment it already has changes nothing (the same variables, in the same
    order); renaming the runner's code objects makes copies that are dropped. At the launch
    the same steps then take 0.5-0.8 ms instead of 1.1 and 3 ms. Costs each process forked
    ahead about a megabyte of its own."""
    with contextlib.suppress(Exception):
        _set_environ(dict(os.environ))
    if runner:
        with contextlib.suppress(Exception):
            for code in list(_COMPILED.values()):
                _with_filename(code, os.path.join(os.sep, "kf-jupyter-rehearsal", "runner.py"))


def _fork_spare_rank(node_sock, spares):
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            ours.close()
            node_sock.close()
            for _pid, other in spares:
                other.close()
            code = rank_spare_main(theirs, parent)
        except BaseException:
            import traceback

            with contextlib.suppress(Exception):
                traceback.print_exc()
        os._exit(code if isinstance(code, int) else 1)
    theirs.close()
    return pid, ours


def rank_spare_main(sock, parent):
    """A rank forked ahead by a spare node: wait for its launch, then run it (`rank_main`)."""
    _new_session()  # one session and process group per rank, as torchrun gives
    _reset_signals()
    _pdeathsig()
    if _orphaned(parent):
        return 0
    _rehearse(runner=True)
    try:
        msg, fds = recv_msg(sock)
    except (OSError, ValueError):
        msg, fds = None, []
    if msg is None:
        return 0
    return rank_main(msg, fds, notice=sock)


def rank_main(msg, fds, notice=None):
    """A rank of a warm node: take the launch the node gives it and run the script (never
    returns). The same steps whether it was forked ahead or at its node's start. `notice`: the
    socket its node reads its exit code from (`exit_notice`)."""
    _new_session()
    _reset_signals()
    _pdeathsig()
    _take(msg, fds)
    if notice is not None:
        _hold_notice(notice)
    argv = list(msg["argv"])
    return run_script(argv, python=sys.executable)


def _listening(port):
    """Some socket on this machine listens on TCP `port` (read from /proc/net, no connection)."""
    want = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh, None)
                for line in fh:
                    fields = line.split()
                    if len(fields) > 3 and fields[1].endswith(want) and fields[3] == "0A":
                        return True
        except OSError:
            continue
    return False


def _wait_for_rank0_service(env, timeout=5.0):
    """Let rank 0 open the XGBoost tracker / JAX coordinator before the other ranks dial it.

    Warm ranks all start within milliseconds; a worker that dials before rank 0 listens is
    refused and XGBoost and JAX then back off for seconds. Locally every rank shares rank 0's
    network, so this waits (at most `timeout`) until the port listens; nothing is connected.
    """
    port = None
    if env.get("DMLC_TASK_ID", "0") != "0" and env.get("DMLC_TRACKER_PORT", "").isdigit():
        port = int(env["DMLC_TRACKER_PORT"])
    elif env.get("JAX_PROCESS_ID", "0") != "0" and env.get("JAX_COORDINATOR_ADDRESS"):
        tail = env["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[-1]
        port = int(tail) if tail.isdigit() else None
    if port is None:
        return
    end = time.monotonic() + timeout
    while not _listening(port) and time.monotonic() < end:
        time.sleep(0.002)


def _flush_std():
    """Flush sys.stdout and sys.stderr (what `os._exit` would lose)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _finish(code):
    """End as the interpreter would (threads joined, atexit run, streams flushed), no C++ teardown."""
    import atexit
    import threading

    main = threading.main_thread()
    for thread in threading.enumerate():
        if thread is not main and not thread.daemon:
            with contextlib.suppress(Exception):
                thread.join()
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    _flush_std()
    exit_notice(code)
    os._exit(code)


#: Device files a process holds open while it uses a GPU (NVIDIA, AMD's KFD and DRM nodes).
_GPU_DEVICES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/")


def _holds_gpu():
    """Whether this process has initialised CUDA (torch's flag) or holds a GPU's device file
    open (any framework: JAX, XGBoost, CuPy, ...); True when it cannot tell."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None and cuda.is_initialized():
        return True
    try:
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{fd}").startswith(_GPU_DEVICES):
                    return True
    except OSError:
        return True
    return False


def exit_notice(code):
    """Tell whoever waits for this process (a rank's node, a node's pool) that it ends with
    `code`, right before `os._exit` (see the module doc).

    Only a success is told, and only by a process that holds no GPU (`_holds_gpu`): the waiter
    counts it as ended, and its teardown (the forked pool's memory unmapped, a few ms) runs
    beside what comes next instead of before it. Never raises."""
    global _NOTICE
    learn = sys.modules.get("kfj_warm_learn")  # what it imported beyond the pool (learn.py)
    if learn is not None:
        learn.record_exit(code)
    held, _NOTICE = _NOTICE, None
    if held is None:
        return
    sock, identity, owner = held
    if os.getpid() != owner:
        return  # a fork of the process that holds it (a user's os.fork() that fell through)
    try:
        st = os.fstat(sock.fileno())
        if (st.st_dev, st.st_ino) != identity:
            return  # the program closed it and the number now names something else
        if code == 0 and not _holds_gpu():
            sock.send(b"0")
    except Exception:
        pass


def run_script(args, python=None, unbuffered=True):
    """Run `args[0]` as `__main__` with `sys.argv = args` (never returns)."""
    import builtins
    import importlib.machinery
    import traceback
    import types

    script = args[0]
    sys.argv = list(args)
    sys.orig_argv = [python or sys.executable, *(["-u"] if unbuffered else []), *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    mod = types.ModuleType("__main__")
    mod.__file__ = script
    mod.__builtins__ = builtins
    mod.__cached__ = None
    mod.__spec__ = None
    mod.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    sys.modules["__main__"] = mod
    _fresh_state()
    code = 0
    try:
        with open(script, "rb") as fh:
            source = fh.read()
        exec(_compiled(source, script), mod.__dict__)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code & 0xFF
        else:
            with contextlib.suppress(Exception):
                print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    _finish(code)
    return code


# ----------------------------------------------------------------------------- torchrun's part


def _worker_env(base, rank, local_rank, node_rank, nnodes, nproc, addr, port, run_id, err):
    env = dict(base)
    world = nnodes * nproc
    env.update(
        {
            "RANK": str(rank),
            "GROUP_RANK": str(node_rank),
            "ROLE_RANK": str(rank),
            "ROLE_NAME": "default",
            "LOCAL_WORLD_SIZE": str(nproc),
            "WORLD_SIZE": str(world),
            "GROUP_WORLD_SIZE": str(nnodes),
            "ROLE_WORLD_SIZE": str(world),
            "MASTER_ADDR": addr,
            "MASTER_PORT": str(port),
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": run_id,
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            "LOCAL_RANK": str(local_rank),
            "TORCHELASTIC_ERROR_FILE": err,
        }
    )
    env.setdefault("TORCHELASTIC_SIGNALS_TO_HANDLE", ",".join(_SIGNALS))
    return env


def _root_cause(script, rank, local_rank, code, pid):
    host = os.uname().nodename
    when = time.strftime("%Y-%m-%d_%H:%M:%S")
    bar = "=" * 60
    rule = "-" * 60
    return (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        f"{bar}\n{script} FAILED\n{rule}\nFailures:\n  <NO_OTHER_FAILURES>\n{rule}\n"
        "Root Cause (first observed failure):\n[0]:\n"
        f"  time      : {when}\n  host      : {host}\n"
        f"  rank      : {rank} (local_rank: {local_rank})\n"
        f"  exitcode  : {code} (pid: {pid})\n  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        f"{bar}\n"
    )


def _exit_code(status):
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _stop_workers(pids, sig, grace):
    for pid in list(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    end = time.monotonic() + grace
    while pids and time.monotonic() < end:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pids.clear()
            break
        if pid:
            pids.pop(pid, None)
        else:
            time.sleep(0.005)
    for pid in list(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    pids.clear()


def run_torchrun(args, header=None, spare_ranks=None):
    """torchrun's agent for one node of a static world, with forked (warm) workers: the ranks
    forked ahead first (`spare_ranks`), then forks of this process for the rest."""
    import tempfile
    from datetime import timedelta

    from torch.distributed import TCPStore

    header = header or {}
    spare_ranks = list(spare_ranks or [])

    _max_restarts, _monitor, script, script_args = parse_torchrun(args)
    env = os.environ
    nnodes = int(env["PET_NNODES"])
    nproc = int(env["PET_NPROC_PER_NODE"])
    node_rank = int(env.get("PET_NODE_RANK", "0") or 0)
    addr = env.get("PET_MASTER_ADDR", "127.0.0.1")
    port = int(env.get("PET_MASTER_PORT", "29500"))
    run_id = env.get("PET_RDZV_ID", "none")
    if nproc > 1 and "OMP_NUM_THREADS" not in env:
        os.environ["OMP_NUM_THREADS"] = "1"  # what torchrun does (its banner is not printed)
    os.environ.setdefault("TORCHELASTIC_SIGNALS_TO_HANDLE", ",".join(_SIGNALS))

    def on_signal(signum, frame):
        raise _Stop(signum)

    for name in _SIGNALS:
        signal.signal(getattr(signal, name), on_signal)

    pids = {}
    notices = {}  # {rank pid: the node's end of the socket the rank tells its exit code on}
    listener = None
    try:
        if node_rank == 0:
            # The store's port listens before any rank has its launch (`listen_early`).
            listener = listen_early(port)
        log_root = env.get("PET_LOG_DIR") or tempfile.mkdtemp(prefix="torchelastic_")
        os.makedirs(log_root, exist_ok=True)
        run_dir = tempfile.mkdtemp(prefix=f"{run_id}_", dir=log_root)
        attempt = os.path.join(run_dir, "attempt_0")
        base = dict(os.environ)
        for local_rank in range(nproc):
            rank = node_rank * nproc + local_rank
            err_dir = os.path.join(attempt, str(local_rank))
            os.makedirs(err_dir, exist_ok=True)
            wenv = _worker_env(
                base,
                rank,
                local_rank,
                node_rank,
                nnodes,
                nproc,
                addr,
                port,
                run_id,
                os.path.join(err_dir, "error.json"),
            )
            launch = {
                "argv": [script, *script_args],
                "env": wenv,
                "cwd": os.getcwd(),
                "umask": int(header.get("umask", 0o022)),
                "rlimits": header.get("rlimits"),
                "affinity": header.get("affinity"),
            }
            pid = None
            while spare_ranks and pid is None:
                spare_pid, sock = spare_ranks.pop(0)
                try:
                    send_msg(sock, launch, [0, 1, 2])
                    pid = spare_pid
                    notices[pid] = sock  # the rank's exit code comes back on it
                except OSError:
                    with contextlib.suppress(OSError):
                        sock.close()  # it is gone (killed): fork one instead
            if pid is None:
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    try:
                        ours.close()
                        if listener is not None:
                            listener.close()  # the store's, not the rank's
                        _drop_notice()  # the node's own, to the pool
                        _drop_spares(spare_ranks)
                        _drop_spares(list(notices.items()))
                        rank_main(launch, [0, 1, 2], notice=theirs)
                    finally:
                        os._exit(1)
                theirs.close()
                notices[pid] = ours
            pids[pid] = (local_rank, rank)
        _drop_spares(spare_ranks)
        # The agent store after the fork: no rank is forked from a process with the store's
        # threads. Node 0's serves on the socket already listening, which has held the ranks
        # that came first in its backlog; the store owns that descriptor from now on (its
        # thread must never see it closed).
        extra = {}
        if listener is not None:
            extra["master_listen_fd"] = listener.detach()
            listener = None
        store = TCPStore(
            addr,
            port,
            None,
            node_rank == 0,
            timedelta(seconds=EXIT_BARRIER_SECONDS),
            wait_for_workers=False,
            **extra,
        )
        failure = None
        for pid, code in _rank_ends(pids, notices):
            info = pids.pop(pid, None)
            if info is None:
                continue
            if code != 0:
                failure = (info, code, pid)
                _stop_workers(pids, signal.SIGTERM, TORCH_WORKER_GRACE)
                break
        if failure is not None:
            (local_rank, rank), code, pid = failure
            sys.stderr.write(_root_cause(script, rank, local_rank, code, pid))
            sys.stderr.flush()
            return 1
        if nnodes > 1:
            _exit_barrier(store, nnodes, node_rank)
        return 0
    except _Stop as stop:
        return _stopped(pids, stop.signum)
    except Exception as exc:  # the store could not start (its port taken, ...): like torchrun
        _stop_workers(pids, signal.SIGTERM, TORCH_WORKER_GRACE)
        sys.stderr.write(f"torchrun (kf-jupyter warm start): {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        return 1


def listen_early(port):
    """A socket listening on `port` on every address, as the agent store's server binds it
    (IPv6 with IPv4 mapped where there is IPv6, else IPv4; SO_REUSEADDR), for the store to
    serve on (`master_listen_fd`).

    torchrun's agent starts its store before its workers. A warm node sends its ranks their
    launch first (the store's threads must not be in a process that forks) and starts the store
    next, so a rank forked ahead could reach `init_process_group` before anything listened: its
    connection was refused and torch's client retried after a back-off, 0.5-0.75 s later (one
    warm re-run in about 15, measured). A connection to this socket waits in its backlog until
    the store serves instead."""
    last = None
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            last = exc
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((host, port))
            sock.listen(socket.SOMAXCONN)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
            if exc.errno == errno.EADDRINUSE:
                break
    raise OSError(getattr(last, "errno", None), f"the store's port {port} cannot listen ({last})")


def _rank_ends(pids, notices):
    """(pid, exit code) of each rank as it ends, until `pids` is empty: from the rank's notice
    (`exit_notice`: it said 0 and is exiting) or, for a rank that said nothing, its reaped exit
    status (a pidfd per rank, so that orphans below the node are not reaped here). Without
    pidfds, `os.wait()` as torchrun's agent does."""
    opener = getattr(os, "pidfd_open", None)
    pidfds = {}  # {rank pid: its pidfd}
    try:
        for pid in pids:
            pidfds[pid] = opener(pid)
    except (OSError, TypeError):
        for fd in pidfds.values():
            os.close(fd)
        _close_notices(notices)
        while pids:
            pid, status = os.wait()
            yield pid, _exit_code(status)
        return
    try:
        while pids:
            of = {fd: (pid, False) for pid, fd in pidfds.items()}
            of.update({sock.fileno(): (pid, True) for pid, sock in notices.items()})
            ready, _, _ = select.select(list(of), [], [])
            for fd in ready:
                pid, notice = of[fd]
                if notice and pid in notices:
                    sock = notices.pop(pid)
                    try:
                        said = sock.recv(16)
                    except OSError:
                        said = b""
                    sock.close()
                    if said == b"0" and pid in pidfds:
                        os.close(pidfds.pop(pid))
                        yield pid, 0
                elif not notice and pid in pidfds:
                    os.close(pidfds.pop(pid))
                    _, status = os.waitpid(pid, 0)
                    with contextlib.suppress(KeyError, OSError):
                        notices.pop(pid).close()
                    yield pid, _exit_code(status)
    finally:
        for fd in pidfds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        _close_notices(notices)


def _close_notices(notices):
    for sock in notices.values():
        with contextlib.suppress(OSError):
            sock.close()
    notices.clear()


def _exit_barrier(store, nnodes, node_rank):
    """Nodes leave together, and node 0 (which hosts the store) leaves last."""
    try:
        store.add(EXIT_KEY, 1)
        end = time.monotonic() + EXIT_BARRIER_SECONDS
        while store.add(EXIT_KEY, 0) < nnodes and time.monotonic() < end:
            time.sleep(0.005)
        if node_rank == 0:
            end = time.monotonic() + 10.0
            while store.add(EXIT_KEY + "/left", 0) < nnodes - 1 and time.monotonic() < end:
                time.sleep(0.005)
        else:
            store.add(EXIT_KEY + "/left", 1)
    except Exception:
        # The store is gone: node 0 left, so the job is ending; this node's ranks all succeeded.
        pass


def _stopped(pids, signum):
    """A signal reached the agent: pass it to the ranks, then end killed by it (as torchrun)."""
    for name in _SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)
    _stop_workers(pids, signum, TORCH_WORKER_GRACE)
    sys.stderr.flush()
    os.kill(os.getpid(), signum)
    return 128 + signum
