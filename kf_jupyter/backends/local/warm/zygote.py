"""The warm fork server (standard library only; run by path with the job's interpreter).

    python zygote.py SOCKET META PRELOAD OWNER_PID OWNER_CREATE_TIME IDLE_SECONDS [BUDGET_MIB]

It imports the modules of PRELOAD (comma separated: `torch,torch.distributed`), then listens on
the Unix socket SOCKET (created owner-only, in an owner-only folder; peers of another user are
refused). Each connection is one launch: a JSON header and, as SCM_RIGHTS, the stdin, stdout and
stderr of the shim. The server forks; the child becomes a new session, takes those descriptors,
the header's environment, working directory and argv, and runs the node (`agent.run_node`).
Replies are JSON lines: `{"pid": N, "warm": true}` (or `{"warm": false, "why": ...}`: nothing was
forked, run it cold), later `{"exit": CODE}` (negative: killed by that signal). A `{"signal": N}`
from the shim is passed to the child; the shim's connection closing kills the child's session.

It never runs user code itself and stays single-threaded (forking a threaded process is unsafe).
It exits when it has no child and has been idle for IDLE_SECONDS, or its owner (the kernel that
started it) is gone; META (JSON: pid, python, preload, memory-relevant facts) is removed then.

Forked ahead (issue 21): the server keeps as many nodes forked ahead as the last job had (at most
MAX_SPARE_NODES; each torch one with as many ranks forked ahead as that job's nodes had, at most
MAX_SPARE_RANKS), so a launch is a message to a process that is already past its fork
(`agent.spare_main`) instead of three forks of this process. A spare serves one launch; when none
is ready (more nodes at once than it keeps, or not yet replaced) the launch forks at once, as
before, and its reply says why. Spares are replaced once no node runs (or REFILL_SECONDS after
the last launch), so the forks never compete with a job that is starting, and once the launcher
of the node that ended last has let go of its connection (a supervisor does after it wrote the
job's end; at most REFILL_SECONDS after that exit), so they do not compete with the end of a job
either: its exit path, the supervisor's last writes and `wait_for_job_status` returning (issue
21). They end with the server (killed at its exit; PDEATHSIG if it is killed) and are listed in
META.

A node forked ahead keeps the socket it got its launch on and says `0` on it right before its
`os._exit` when it succeeded and holds no GPU (`agent.exit_notice`): the server then stops what
the node left and reports `{"exit": 0}` at once, instead of after the kernel has torn down the
node's memory (a fork of this process). It sweeps its orphans again when it reaps that node.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import struct
import sys
import time

HEADER_MAX = 4 * 1024 * 1024
OWNER_CHECK_SECONDS = 1.0
SNAPSHOT_SECONDS = 0.5
PR_SET_CHILD_SUBREAPER = 36
MAX_SPARE_NODES = 2
MAX_SPARE_RANKS = 4
#: A spare taken while nodes still run is replaced this long after the last launch at the latest.
REFILL_SECONDS = 2.0


def _subreaper():
    """Orphans of a node (a rank's child in its own session) are re-parented here, not to init."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _child_pids(pid):
    """The children of `pid` from `/proc/PID/task/*/children` (the cost of the tree, not of every
    process of the machine, which psutil and a /proc scan read: tens to hundreds of ms on a
    loaded machine, on every node's exit); [] if it is gone, None without such files."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                return None
        except (OSError, ValueError):
            continue
    return out


def _tree_parents(pid):
    """{descendant: parent} below `pid` from the children files (None without them)."""
    below, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        kids = _child_pids(parent)
        if kids is None:
            return None
        for kid in kids:
            if kid not in below:
                below[kid] = parent
                todo.append(kid)
    return below


def _create_times(pids):
    try:
        import psutil
    except ImportError:
        return {}
    out = {}
    for pid in pids:
        with contextlib.suppress(Exception):
            out[pid] = psutil.Process(pid).create_time()
    return out


def _descendants(pid):
    """{pid: creation time} of every live descendant of `pid` (psutil when there is one)."""
    tree = _tree_parents(pid)
    if tree is not None:
        return _create_times(tree)
    try:
        import psutil
    except ImportError:
        return {}
    out = {}
    with contextlib.suppress(Exception):
        for child in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(Exception):
                out[child.pid] = child.create_time()
    return out


def _adopted_of(node_tag, known_nodes):
    """Orphans re-parented to us (we are a subreaper) that a node left: found by its env tag."""
    try:
        import psutil
    except ImportError:
        return {}
    out = {}
    kids = _child_pids(os.getpid())
    if kids is None:
        with contextlib.suppress(Exception):
            kids = [c.pid for c in psutil.Process().children(recursive=False)]
    for pid in kids or []:
        if pid in known_nodes:
            continue
        with contextlib.suppress(Exception):
            env = psutil.Process(pid).environ()
            tag = (env.get("KF_JUPYTER_JOB_NAME"), env.get("KF_JUPYTER_NODE_RANK"))
            if tag == node_tag:
                out.update(_create_times([pid]))
                out.update(_descendants(pid))
    return out


def _children_of(pid):
    """{pid: ppid} of every process whose parent is `pid` or below it (from /proc: forked-only
    processes carry the pool's environment, so no lookup by the job's environment sees them)."""
    tree = _tree_parents(pid)
    if tree is not None:
        return tree
    parents = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{name}/stat", "rb") as fh:
                        data = fh.read()
                    parents[int(name)] = int(data[data.rindex(b")") + 2 :].split()[1])
    below, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in below:
                below[child] = ppid
                todo.append(child)
    return below


def _kill_known(procs):
    try:
        import psutil
    except ImportError:
        psutil = None
    for pid, ct in procs.items():
        if psutil is not None:
            try:
                if abs(psutil.Process(pid).create_time() - ct) > 0.01:
                    continue
            except Exception:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def cuda_initialised(maps=True):
    """Why this process cannot fork a rank that uses a GPU (None: it can).

    CUDA does not survive a fork: a child of a process that initialised it cannot use the
    device. The pool only imports frameworks (none of them initialises CUDA on import), so
    this holds unless a preloaded module did more. The memory map (is libcuda loaded?) is read
    once the preloads are done (`maps`: the pool runs no other code); torch's own flag before
    every fork.
    """
    torch = sys.modules.get("torch")
    with contextlib.suppress(Exception):
        if torch is not None and torch.cuda.is_initialized():
            return "torch initialised CUDA in the pool process"
    if not maps:
        return None
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            maps = fh.read()
    except OSError:
        return None
    if "/libcuda.so" in maps:
        return "the CUDA driver (libcuda) is loaded in the pool process"
    return None


def _load_by_path(name, filename):
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location(name, os.path.join(here, filename))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # a rank's runner finds `exit_notice` there (agent.py)
    spec.loader.exec_module(mod)
    return mod


def _load_agent():
    return _load_by_path("kfj_warm_agent", "agent.py")


def _alive(pid, create_time):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if create_time is None:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        state = fields[0]
        if state == b"Z":
            return False
        ticks = int(fields[19])
        with open("/proc/stat", "rb") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith(b"btime"))
        start = btime + ticks / os.sysconf("SC_CLK_TCK")
        return abs(start - create_time) < 1.0
    except (OSError, StopIteration, IndexError, ValueError):
        return True


def _send(conn, obj):
    with contextlib.suppress(OSError):
        conn.sendall((json.dumps(obj) + "\n").encode())


def _recv_header(agent, conn):
    """The first message: a length-prefixed JSON header plus three descriptors, read as the
    agent reads its messages (`agent.recv_msg`); a connection closed before it is a short one."""
    header, fds = agent.recv_msg(conn, max_bytes=HEADER_MAX)
    if header is None:
        raise ValueError("short header")
    return header, fds


class Zygote:
    """The server loop: accept launches, fork, report exits."""

    def __init__(self, sock_path, meta_path, preload, owner, owner_ct, idle, budget=None):
        self.sock_path = sock_path
        self.meta_path = meta_path
        self.preload = preload
        self.owner = owner
        self.owner_ct = owner_ct
        self.idle = idle
        self.children = {}  # pid -> connection
        self.trees = {}  # pid -> {descendant pid: creation time}, refreshed while it runs
        self.tags = {}  # pid -> (job name, node rank) from the launch's environment
        self.conns = {}  # connection -> pid (None once its node's exit was sent)
        # Connections of nodes that ended, until their launcher closes them: {conn: when}.
        self.ending = {}
        self.served = 0
        self.last_active = time.monotonic()
        self.agent = None
        self.listener = None
        self.cuda_why = None
        self.spares = []  # [(pid, socket, ranks forked ahead)] of nodes forked ahead of a launch
        self.notices = {}  # socket -> pid: a node handed a launch says its end on it
        self.noticed = set()  # nodes whose end was reported from what they said, not reaped yet
        self.want_nodes = 1  # spares kept: the last job's nodes (capped)
        self.want_ranks = 1 if any(m.split(".")[0] == "torch" for m in preload) else 0
        self.last_launch = 0.0
        # What the pool learns from its jobs' imports (learn.py): its memory budget in bytes.
        self.budget = float("inf") if budget is None else budget * 2**20
        self.learn = None
        self.learned = None

    def _write_meta(self, state):
        meta = {
            "pid": os.getpid(),
            "python": sys.executable,
            "preload": self.preload,
            "owner_pid": self.owner,
            "state": state,
            "served": self.served,
            "started": self.started,
            "socket": self.sock_path,
            "spares": [pid for pid, _sock, _ranks in self.spares],
            "learned": sorted(n for n in (self.learned.modules if self.learned else {})
                              if n in sys.modules),
        }  # fmt: skip
        tmp = f"{self.meta_path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(meta, fh)
        os.replace(tmp, self.meta_path)

    def serve(self):
        self.started = time.time()
        self._write_meta("starting")
        _subreaper()
        before = dict(os.environ)
        for name in self.preload:
            importlib.import_module(name)
        # What the imports put in the environment (jax sets TF_CPP_MIN_LOG_LEVEL, ...): a cold
        # process gets it from its own imports, so every child gets it too. Not what learned
        # imports set: a cold rank that does not import them has none of it (learn.py).
        set_by_imports = {k: v for k, v in os.environ.items() if before.get(k) != v}
        self._import_learned(at_start=True)
        self.agent = _load_agent()
        self.agent.prepare_parent(self.preload, set_by_imports)
        self.learn.prepare(self.learned.log, self.learned.known())
        self.cuda_why = cuda_initialised()
        # Bind under a temporary name and rename: a shim never sees a socket nobody listens on.
        tmp = f"{self.sock_path}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(tmp)
        finally:
            os.umask(old)
        self.listener.listen(64)
        os.replace(tmp, self.sock_path)
        self._write_meta("ready")
        wake_r, wake_w = os.pipe()
        self.wake = (wake_r, wake_w)  # closed in every forked node
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda s, f: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_stop)
        self.stopping = False
        last_owner_check = 0.0
        last_snapshot = 0.0
        try:
            while not self.stopping:
                self._reap()
                self._learn_when_idle()
                self._refill()
                now = time.monotonic()
                if self.children and now - last_snapshot >= SNAPSHOT_SECONDS:
                    last_snapshot = now
                    for pid in list(self.children):
                        self.trees.setdefault(pid, {}).update(_descendants(pid))
                if now - last_owner_check >= OWNER_CHECK_SECONDS:
                    last_owner_check = now
                    if not self.children and (
                        not _alive(self.owner, self.owner_ct) or now - self.last_active > self.idle
                    ):
                        break
                    if not os.path.exists(self.meta_path):
                        break  # the pool was stopped (its folder or meta removed)
                ready, _, _ = select.select(
                    [self.listener, wake_r, *self.conns, *self.notices], [], [], 0.5
                )
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                for r in ready:
                    if r in self.notices:
                        self._on_notice(r)
                    elif r is self.listener:
                        self._accept()
                        # Not now: a node just forked has nothing below it yet, and this walk
                        # would compete with its start (issue 21). The next one is due later.
                        last_snapshot = time.monotonic()
                    elif r is not wake_r:
                        self._on_conn(r)
        finally:
            self._shutdown()

    def _on_stop(self, signum, frame):
        self.stopping = True

    def _accept(self):
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
        except OSError:
            uid = -1
        if uid != os.getuid():
            conn.close()
            return
        self.last_active = time.monotonic()
        conn.setblocking(True)
        conn.settimeout(10)
        try:
            header, fds = _recv_header(self.agent, conn)
        except (OSError, ValueError) as exc:
            _send(conn, {"warm": False, "why": f"bad launch request ({exc})"})
            conn.close()
            return
        conn.settimeout(None)
        try:
            why = self.agent.unsupported(header) or self.learn.shadowed(
                header, self.learned.modules
            )
        except Exception as exc:  # a bug here must not take the pool down
            why = f"the warm path could not read the command ({exc!r})"
        cuda = self.cuda_why or cuda_initialised(maps=False)
        if cuda and not why:
            # Never fork then: the job starts cold (its events say why).
            why = f"{cuda}, so a rank forked from it could not use a GPU"
        if why:
            _send(conn, {"warm": False, "why": why})
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        env = header.get("env") or {}
        self.last_launch = time.monotonic()
        pid, ahead = self._hand_to_spare(header, fds)
        nproc = env.get("PET_NPROC_PER_NODE", "")
        nproc = int(nproc) if header.get("mode") == "torchrun" and nproc.isdigit() else 0
        if pid is not None:
            how = {"ahead": True, "ranks_ahead": min(ahead, nproc), "ranks": nproc}
        else:
            how = {"ahead": False, "why": self._no_spare_why()}
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                try:
                    keep = {conn.fileno(), *fds}
                    self._close_in_child(keep)
                    conn.close()
                    code = self.agent.child_main(header, fds)
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                os._exit(code if isinstance(code, int) else 1)
        for fd in fds:
            os.close(fd)
        self._learn(header, nproc)
        self.served += 1
        self.tags[pid] = (env.get("KF_JUPYTER_JOB_NAME"), env.get("KF_JUPYTER_NODE_RANK"))
        self.children[pid] = conn
        self.conns[conn] = pid
        with contextlib.suppress(OSError):
            self._write_meta("ready")  # before the reply: the pool reads as busy from now on
        reply = {"pid": pid, "warm": True, "zygote": os.getpid(), "served": self.served, **how}
        _send(conn, reply)

    # ------------------------------------------------------------ learned imports

    def _import_learned(self, at_start=False):
        """Import what earlier jobs' ranks imported beyond the pool (learn.py), one module at a
        time; a running pool stops between two modules when a launch arrives (the rest waits
        for the next idle spell). A module that started a thread or CUDA is remembered as bad
        and the pool process starts again without it."""
        if self.learn is None:
            self.learn = _load_by_path("kfj_warm_learn", "learn.py")
            self.learn.mark_framework()
            self.learned = self.learn.Learned(self.meta_path)
        self.learned.take()
        names = self.learned.pending()
        done = 0
        for name in names:
            if not at_start and select.select([self.listener], [], [], 0)[0]:
                break  # a launch is waiting: serve it first
            taint = self.learned.import_one(name, self.budget, cuda_initialised)
            done += 1
            if taint:
                self.learned.save()
                self._restart()
        self.learned.save()
        return done

    def _learn_when_idle(self):
        """A running pool imports what its jobs learned once no node runs and the last job's
        end is recorded (when it would fork its next spares: this runs first, so the spares it
        forks then have the modules; spares forked before are replaced)."""
        if self.children or self.ending or self.learned is None or self.cuda_why:
            return
        if not self.learned.log_changed():
            return
        if not self.learned.take() and not self.learned.pending():
            return
        self._kill_spares()
        with contextlib.suppress(OSError):
            self._write_meta("learning")
        if self._import_learned():
            self.agent._skip_import_finalizers(self.preload)
            self.learn.prepare(self.learned.log, self.learned.known())
        self.last_active = time.monotonic()
        with contextlib.suppress(OSError):
            self._write_meta("ready")

    def _restart(self):
        """Start this pool process again (the same arguments), without what it imported."""
        self._kill_spares()
        if self.listener is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.sock_path)
            self.listener.close()
        sys.stdout.write("kf-jupyter warm pool: restarting without a learned module that is bad\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, *sys.argv])

    # ------------------------------------------------------------ forked ahead

    def _close_in_child(self, keep=()):
        """In a fresh fork: close what belongs to the server (listener, wake-up pipe, the
        connections of other launches, the spares' sockets)."""
        signal.set_wakeup_fd(-1)
        for fd in self.wake:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.listener.close()
        for c in list(self.conns):
            if c.fileno() not in keep:
                c.close()
        for _pid, sock, _ranks in self.spares:
            sock.close()
        for sock in self.notices:
            sock.close()

    def _hand_to_spare(self, header, fds):
        """Give the launch to a node forked ahead: (its pid, ranks it forked ahead), or
        (None, 0) when none is ready (the caller forks one now). Its socket stays open: the
        node says on it that it ended with 0 (`agent.exit_notice`, `_on_notice`)."""
        while self.spares:
            pid, sock, ranks = self.spares.pop(0)
            try:
                self.agent.send_msg(sock, header, fds)
            except OSError:
                sock.close()
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                continue  # it died: the next one, or a fork
            self.notices[sock] = pid
            return pid, ranks
        return None, 0

    def _on_notice(self, sock):
        """A node handed a launch said it ended with 0, right before its `os._exit`: report its
        end now, without waiting for the kernel to tear down its memory (a fork of the pool)."""
        pid = self.notices.pop(sock, None)
        try:
            said = sock.recv(16)
        except OSError:
            said = b""
        sock.close()
        if said == b"0" and pid in self.children:
            self.noticed.add(pid)  # swept again once it is reaped (_reap)
            self._node_ended(pid, 0)

    def _drop_notice(self, pid):
        for sock, of in list(self.notices.items()):
            if of == pid:
                self.notices.pop(sock)
                sock.close()

    def _no_spare_why(self):
        if self.children:
            keeps = f"{self.want_nodes} node{'s' if self.want_nodes > 1 else ''}"
            return (
                f"no node forked ahead was left (the pool keeps {keeps} forked ahead, and the "
                "nodes before this one took them)"
            )
        if self.ending:
            return (
                "no node forked ahead was ready yet (the pool forks the next one once the job "
                "before has recorded its end)"
            )
        return "no node forked ahead was ready yet (the pool was still forking it)"

    def _learn(self, header, nproc):
        """Keep as many spares as the job that just arrived has nodes (and ranks per node)."""
        env = header.get("env") or {}
        nodes = 1
        for var in ("PET_NNODES", "JAX_NUM_PROCESSES", "DMLC_NUM_WORKER"):
            value = str(env.get(var) or "")
            if value.isdigit() and int(value) > 0:
                nodes = int(value)
                break
        self.want_nodes = max(1, min(nodes, MAX_SPARE_NODES))
        if header.get("mode") == "torchrun":
            self.want_ranks = max(1, min(nproc, MAX_SPARE_RANKS))

    def _refill(self):
        """Fork one spare node when fewer are kept than wanted, unless a job is starting: not
        while nodes run, for REFILL_SECONDS after the last launch."""
        if self.cuda_why or len(self.spares) >= self.want_nodes or self.stopping:
            return
        now = time.monotonic()
        if self.children and now - self.last_launch < REFILL_SECONDS:
            return
        for conn, since in list(self.ending.items()):
            if now - since >= REFILL_SECONDS:  # a launcher that holds on: stop waiting for it
                self.ending.pop(conn)
                self.conns.pop(conn, None)
                conn.close()
        if not self.children and self.ending:
            return  # a job is ending: its supervisor is writing the end, its kernel reading it
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ranks = self.want_ranks
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                ours.close()
                self._close_in_child()
                code = self.agent.spare_main(theirs, ranks, parent)
            except BaseException:
                import traceback

                with contextlib.suppress(Exception):
                    traceback.print_exc()
            os._exit(code if isinstance(code, int) else 1)
        theirs.close()
        self.spares.append((pid, ours, ranks))
        with contextlib.suppress(OSError):
            self._write_meta("ready")

    def _drop_spare(self, pid):
        for item in list(self.spares):
            if item[0] == pid:
                self.spares.remove(item)
                item[1].close()
                return True
        return False

    def _kill_spares(self):
        for pid, sock, _ranks in self.spares:
            sock.close()
            below = _children_of(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            for grand in below:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(grand, signal.SIGKILL)
        for pid, _sock, _ranks in self.spares:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.spares = []

    def _on_conn(self, conn):
        pid = self.conns.get(conn)
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:
            # The shim is gone (killed): nothing may outlive it.
            if pid is not None:
                self._kill_node(pid)
            self.conns.pop(conn, None)
            self.ending.pop(conn, None)
            conn.close()
            return
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            sig = msg.get("signal")
            if isinstance(sig, int) and pid is not None and pid in self.children:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def _reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            if self._drop_spare(pid):
                continue  # a spare that died before its launch (killed): replaced later
            if pid in self.children:
                self._node_ended(pid, code)
            elif pid in self.noticed:
                # A node that said its end: what it left may have reached us only as it died.
                self.noticed.discard(pid)
                self._sweep_orphans()
            # else: an orphan re-parented to us, now reaped

    def _node_ended(self, pid, code):
        """A node ended (reaped, or it said so as it exited): stop what it left, tell its
        launcher its exit code."""
        conn = self.children.pop(pid)
        self._drop_notice(pid)
        self._sweep_orphans()
        self.last_active = time.monotonic()
        # Whatever the node left behind (its session, children in sessions of their own)
        # goes with it, as the supervisor stops what a cold job leaves.
        self._kill_node(pid)
        self.tags.pop(pid, None)
        if conn is not None:
            _send(conn, {"exit": code})
            # Kept until the launcher closes it (it has recorded the end): see _refill.
            self.conns[conn] = None
            self.ending[conn] = time.monotonic()

    def _sweep_orphans(self):
        """Stop every child of the pool that is not a node, with what is below it. Each node is
        a child subreaper (agent.py), so a process reaches the pool only when the node it was
        under has ended: it is what that node left (a double-forked daemon), as a cold job's
        supervisor stops what its nodes leave."""
        below = _children_of(os.getpid())
        mine = os.getpid()
        spares = {pid for pid, _sock, _ranks in self.spares}
        for pid, ppid in below.items():
            if ppid == mine and pid not in self.children and pid not in spares:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                for grand, _ in _children_of(pid).items():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(grand, signal.SIGKILL)

    def _kill_node(self, pid):
        known = self.trees.pop(pid, {})
        known.update(_descendants(pid))
        tag = self.tags.get(pid)
        if tag and tag[0]:
            spares = {p for p, _sock, _ranks in self.spares}
            known.update(_adopted_of(tag, set(self.children) | spares))
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        _kill_known(known)

    def _shutdown(self):
        self._kill_spares()
        for pid in list(self.children):
            self._kill_node(pid)
        for path in (self.sock_path, self.meta_path):
            with contextlib.suppress(OSError):
                if path == self.meta_path or os.path.exists(path):
                    os.unlink(path)
        if self.meta_path.endswith(".json"):  # the pid the kernel wrote as it launched us
            with contextlib.suppress(OSError):
                os.unlink(self.meta_path[: -len(".json")] + ".launch")


def main(argv):
    """Entry point (see the module docstring)."""
    sock_path, meta_path, preload, owner, owner_ct, idle = argv[1:7]
    budget = float(argv[7]) if len(argv) > 7 else None
    os.umask(0o077)
    z = Zygote(
        sock_path,
        meta_path,
        [m for m in preload.split(",") if m],
        int(owner),
        float(owner_ct) if owner_ct not in ("", "none") else None,
        float(idle),
        budget,
    )
    try:
        z.serve()
    finally:
        z._shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
