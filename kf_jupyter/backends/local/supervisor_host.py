"""A fork server for job supervisors (standard library, psutil if present; run by path).

    python -I supervisor_host.py SOCKET RECORD OWNER_PID OWNER_CREATE_TIME IDLE_SECONDS SPARES

Starting a job's supervisor as a new process costs a Python start, its imports (psutil, the
status endpoint's asyncio and ssl) and an `openssl` run for the job's certificate: 0.1-0.3 s
on a quiet 2-core machine, more loaded, on the path of every job (issue 21). This process has
done the imports once and keeps the next job's certificate made ahead (in SPARES, one folder
per certificate, each used by one job only). Each connection on the Unix socket SOCKET (in the
warm pool's owner-only folder; peers of another user are refused) is one job: a JSON request
(`job_dir`, the kernel's environment, working directory, umask, resource limits and CPU
affinity). It forks; the child becomes a new session with the kernel's environment, working
directory, umask, limits and affinity, its output in the job's `supervisor.log`, and runs
`supervisor.main` on the job folder, exactly the code a supervisor started as a process runs.
The reply is `{"pid": N}` (or `{"error": why}`: nothing was forked; the kernel then starts the
supervisor as a process, as before).

A supervisor forked from here is not tied to this process: it is its own session and outlives
it, as a supervisor started by the kernel outlives the kernel. This process never runs a job
itself and stays single-threaded (it forks): connections are read without blocking, beside
each other, so one that stays silent delays no other (it is dropped after REQUEST_SECONDS). It exits when its owner (the kernel that started
it) is gone, after IDLE_SECONDS without a job, or when RECORD is removed (`stop`), and never
stops a supervisor when it does.

The kernel's side (`host_for`, `ensure_started`, `submit`, `stop`) is at the end of this file.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REQUEST_MAX = 16 * 1024 * 1024
#: How long a connection has to send its whole request (it is read beside the others: one
#: that stays silent delays no other kernel's job, issue 38).
REQUEST_SECONDS = 10.0
#: Connections waiting for their request at most (the oldest is dropped to make room).
PENDING_MAX = 64
OWNER_CHECK_SECONDS = 1.0
#: While a supervisor this host forked still runs, how long after its job came the host waits
#: before it forks the next one ahead.
AHEAD_SECONDS = 1.0
#: When none runs, how long after the last one ended (a kernel re-running a job starts the
#: next one right away; the fork would run beside its start).
AHEAD_IDLE_SECONDS = 0.02
#: What a supervisor forked ahead shows as its last argument until its job comes (`ps`).
AHEAD_TITLE = "(forked ahead; waiting for a job)"
SUFFIX = ".host"
_HERE = os.path.dirname(os.path.abspath(__file__))
_CODE = ("supervisor.py", "status_endpoint.py", "gpus.py", "supervisor_host.py")


def _load(name: str) -> Any:
    mod = f"kfj_host_{name.removesuffix('.py')}"
    spec = importlib.util.spec_from_file_location(mod, os.path.join(_HERE, name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _alive(pid: int, create_time: float | None) -> bool:
    try:
        import psutil

        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or abs(p.create_time() - create_time) < 1.0
    except ImportError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False
    except Exception:
        return False


def limits_why(rlimits: dict[str, Any] | None) -> str:
    """Why the kernel's resource limits cannot be given to a child of this process ('' if they
    can): a hard limit above this process's own cannot be raised without privilege."""
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
                return f"the kernel's {name} hard limit ({want}) is above the host's ({hard})"
    return ""


def set_cmdline(argv: list[str]) -> bool:
    """Show `argv` as this process's command line (`/proc/PID/cmdline`, `ps`), written over the
    memory of the arguments it was started with, as setproctitle does; False if they do not fit.

    A supervisor forked from the host then reads as the process a kernel would have started
    (`python -I supervisor.py JOB_DIR`): who looks for a job's processes by its folder in their
    command line (`ps`, the reliability tests) finds it. CPython keeps its own copy of its
    arguments (`sys.orig_argv`), so nothing reads that memory after start."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/self/stat", "rb") as fh:
            data = fh.read()
        fields = data[data.rindex(b")") + 2 :].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48 and 49)
    except (OSError, ValueError, IndexError):
        return False
    new = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
    size = end - start
    if start <= 0 or len(new) > size:
        return False
    import ctypes

    ctypes.memmove(start, new + b"\0" * (size - len(new)), size)
    return True


def _name_as_supervisor(last: str) -> None:
    """Read as `python -I supervisor.py LAST` (`set_cmdline`)."""
    set_cmdline([sys.executable, "-I", os.path.join(_HERE, "supervisor.py"), last])


def _fork(run: Callable[[], int]) -> int:
    """Fork: the child runs `run()` and exits with its code (1, its traceback on stderr, if it
    raises); the parent gets the child's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = run()
        except BaseException:
            import traceback

            with contextlib.suppress(Exception):
                traceback.print_exc()
        finally:
            os._exit(code if isinstance(code, int) else 1)
    return pid


def set_environ(env: dict[str, Any]) -> None:
    """Make `os.environ` exactly `env` (its keys in its order): only the values that differ
    are set when the keys are already the same, in the same order (a supervisor forked ahead
    set the last job's environment, most often the next one's too)."""
    want = {str(k): str(v) for k, v in env.items()}
    if list(os.environ) != list(want):
        os.environ.clear()
        os.environ.update(want)
        return
    for key, value in want.items():
        if os.environ[key] != value:
            os.environ[key] = value


def rlimits() -> dict[str, list[int]]:
    """This process's resource limits, by name."""
    import resource

    out = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            with contextlib.suppress(OSError, ValueError):
                out[name] = list(resource.getrlimit(getattr(resource, name)))
    return out


class Host:
    """The server loop: accept jobs, fork supervisors, keep a certificate made ahead."""

    def __init__(
        self,
        sock_path: str,
        record: str,
        owner: int,
        owner_ct: float | None,
        idle: float,
        spares: str,
    ) -> None:
        self.sock_path = sock_path
        self.record = record
        self.owner = owner
        self.owner_ct = owner_ct
        self.idle = idle
        self.spares = spares
        self.children: set[int] = set()
        self.served = 0
        self.last_active = time.monotonic()
        self.making: Any = None  # (Popen of openssl, folder) while the next certificate is made
        self.spare: str | None = None  # a folder holding a ready certificate
        self.spare_n = 0
        self.stopping = False
        # A supervisor forked ahead of the next job, waiting for it on a socket: (pid, socket).
        self.ahead: tuple[int, socket.socket] | None = None
        self.last_req: dict[str, Any] | None = None  # the last job's request, rehearsed ahead
        self.last_accept = 0.0
        self.last_exit = 0.0  # when the last supervisor of a job ended
        # Connections whose request is not whole yet: (what came so far, deadline).
        self.pending: dict[socket.socket, tuple[bytearray, float]] = {}

    # ------------------------------------------------------------ certificates made ahead

    def _next_spare(self) -> None:
        """Start making the next job's certificate (openssl in the background) unless one is
        ready or being made."""
        if self.spare is not None or self.making is not None:
            return
        import shutil
        import subprocess

        openssl = shutil.which("openssl")
        if openssl is None:
            return
        self.spare_n += 1
        folder = os.path.join(self.spares, f"{os.getpid()}-{self.spare_n}")
        with contextlib.suppress(OSError):
            os.makedirs(folder, mode=0o700)
            argv = self.sv_endpoint.certificate_argv(openssl, folder)
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
            # Only spare CPU: on a small machine the job just forked is starting beside it.
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, 19)
            self.making = (proc, folder)

    def _check_spare(self) -> None:
        if self.making is None:
            return
        proc, folder = self.making
        code = proc.poll()
        if code is None:
            return
        self.making = None
        if code == 0 and os.path.isfile(os.path.join(folder, "ca.crt")):
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(folder, "tls.key"), 0o600)
            self.spare = folder
        else:
            _rmtree(folder)

    # ------------------------------------------------------------ the loop

    def _write_record(self, state: str) -> None:
        meta = {
            "pid": os.getpid(),
            "state": state,
            "served": self.served,
            "socket": self.sock_path,
            "owner_pid": self.owner,
            "python": sys.executable,
        }
        tmp = f"{self.record}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(meta, fh)
        os.replace(tmp, self.record)

    def serve(self) -> None:
        """Import what a supervisor needs, listen, serve until told or left to stop."""
        self._write_record("starting")
        self.sv = _load("supervisor.py")
        self.sv_endpoint = _load("status_endpoint.py")
        direct = _load("direct.py")
        direct.shim()  # what a warm node handed over directly reuses of the shim (issue 21)
        self.sv.preload_siblings(
            {"status_endpoint": self.sv_endpoint, "gpus": _load("gpus.py"), "direct": direct}
        )
        # What the supervisor imports lazily, done once here (no threads are started by them).
        for name in ("psutil", "asyncio", "ssl", "subprocess", "hmac", "datetime", "ctypes"):
            with contextlib.suppress(ImportError):
                __import__(name)
        os.makedirs(self.spares, mode=0o700, exist_ok=True)
        self._next_spare()
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
        self._write_record("ready")
        wake_r, wake_w = os.pipe()
        self.wake = (wake_r, wake_w)
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda s, f: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_stop)
        last_check = 0.0
        while not self.stopping:
            self._reap()
            self._check_spare()
            self._next_spare()
            self._fork_ahead()
            now = time.monotonic()
            if now - last_check >= OWNER_CHECK_SECONDS:
                last_check = now
                if not _alive(self.owner, self.owner_ct) or now - self.last_active > self.idle:
                    break
                if not os.path.exists(self.record):
                    break  # stopped (`stop`), or its folder removed
            wait = min(0.5, max(0.0, self._ahead_due()), self._expire())
            watched: list[Any] = [self.listener, wake_r, *self.pending]
            ready, _, _ = select.select(watched, [], [], wait)
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 512)
            for conn in ready:
                if conn in self.pending:
                    self._readable(conn)
            if self.listener in ready:
                self._accept()

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def _reap(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                done, _status = os.waitpid(pid, os.WNOHANG)
                if not done:
                    continue
            self.children.discard(pid)
            if self.ahead is not None and self.ahead[0] == pid:  # it died before its job
                self.ahead[1].close()
                self.ahead = None
            else:
                self.last_exit = time.monotonic()

    # ------------------------------------------------------------ a supervisor forked ahead

    def _fork_ahead(self) -> None:
        """Fork the next job's supervisor before the job comes (issue 21): the fork of this
        process, the new session and the kernel's environment are then off the job's path.

        Not while a supervisor this host forked is starting its job (AHEAD_SECONDS after the
        last job came, while it still runs): on a small machine the fork would run beside it.
        """
        if self._ahead_due() > 0:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

        def child() -> int:
            ours.close()
            return self._wait_ahead(theirs)

        pid = _fork(child)
        theirs.close()
        self.children.add(pid)
        self.ahead = (pid, ours)

    def _ahead_due(self) -> float:
        """Seconds until the next supervisor may be forked ahead (inf: not now)."""
        if self.ahead is not None or self.stopping:
            return float("inf")
        now = time.monotonic()
        if self.children:
            return self.last_accept + AHEAD_SECONDS - now
        # None runs: the kernel of the job that just ended may start the next one at once
        # (a re-run); a fork beside that start would slow it down.
        return self.last_exit + AHEAD_IDLE_SECONDS - now

    def _wait_ahead(self, sock: socket.socket) -> int:
        """In the child forked ahead: leave the host, set the environment the last job had,
        wait for a job (`{"req", "spare"}`), then become its supervisor as `_child` does. The
        host closing the socket (it ends) ends this process, before any job."""
        self._detach()
        _name_as_supervisor(AHEAD_TITLE)
        if self.last_req is not None:
            set_environ(self.last_req.get("env") or {})  # the next job's is most likely the same
        try:
            msg = _recv_json(sock)
        except (OSError, ValueError):
            return 0  # let go of: nothing ran
        req, spare = msg["req"], msg.get("spare")
        _name_as_supervisor(req["job_dir"])
        sock.sendall(b"n")  # named: the host answers the kernel now
        sock.close()
        return self._become(req, spare)

    def _hand_ahead(self, req: dict[str, Any], spare: str | None) -> int | None:
        """Give a job to the supervisor forked ahead: its pid once it reads as the job's
        supervisor, or None (none ready, or it did not answer: it is stopped, and the caller
        forks one now)."""
        if self.ahead is None:
            return None
        pid, sock = self.ahead
        self.ahead = None
        ok = False
        try:
            sock.settimeout(5.0)
            _send_json(sock, {"req": req, "spare": spare})  # a failed send: no answer below
            ok = sock.recv(1) == b"n"
        except OSError:
            ok = False
        finally:
            sock.close()
        if not ok:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            return None
        return pid

    def _stop_ahead(self) -> None:
        if self.ahead is None:
            return
        pid, sock = self.ahead
        self.ahead = None
        sock.close()
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        self.children.discard(pid)

    def _accept(self) -> None:
        """Take a connection of this user: it is read without blocking, beside the others
        (one that stays silent delays nobody; it is dropped at its deadline)."""
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
        if len(self.pending) >= PENDING_MAX:  # the oldest silent one makes room
            oldest = min(self.pending, key=lambda c: self.pending[c][1])
            self._drop(oldest, "too many connections wait for their request")
        conn.setblocking(False)
        self.pending[conn] = (bytearray(), time.monotonic() + REQUEST_SECONDS)

    def _drop(self, conn: socket.socket, why: str) -> None:
        """Answer a connection that sent no whole request with `why`, and close it."""
        self.pending.pop(conn, None)
        with contextlib.suppress(OSError):
            conn.setblocking(True)
            conn.settimeout(0.5)
        _send_json(conn, {"error": f"bad request ({why})"})
        conn.close()

    def _expire(self) -> float:
        """Drop the connections past their deadline; seconds until the next deadline."""
        now = time.monotonic()
        for conn, (_buf, deadline) in list(self.pending.items()):
            if deadline <= now:
                self._drop(conn, "no whole request in time")
        deadlines = [d for _b, d in self.pending.values()]
        return max(0.0, min(deadlines) - now) if deadlines else float("inf")

    def _readable(self, conn: socket.socket) -> None:
        """Read what a pending connection sent; serve it once its request is whole."""
        buf, _deadline = self.pending[conn]
        try:
            chunk = conn.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            self._drop(conn, str(exc))
            return
        if not chunk:
            self._drop(conn, "truncated")
            return
        buf += chunk
        if len(buf) < 4:
            return
        (length,) = struct.unpack("!I", bytes(buf[:4]))
        if length > REQUEST_MAX:
            self._drop(conn, "too large")
            return
        if len(buf) < 4 + length:
            return
        del self.pending[conn]
        with conn:
            conn.setblocking(True)
            conn.settimeout(10)
            try:
                req = json.loads(bytes(buf[4 : 4 + length]).decode("utf-8", "surrogatepass"))
            except ValueError as exc:
                _send_json(conn, {"error": f"bad request ({exc})"})
                return
            self._serve_request(conn, req)
        with contextlib.suppress(OSError):
            self._write_record("ready")

    def _serve_request(self, conn: socket.socket, req: Any) -> None:
        """Hand a whole request to the supervisor forked ahead, or fork one now; answer."""
        self.last_active = time.monotonic()
        why = self._refuse(req)
        if why:
            _send_json(conn, {"error": why})
            return
        spare, self.spare = self.spare, None
        self.last_accept = time.monotonic()
        pid = self._hand_ahead(req, spare)
        ahead = pid is not None
        if pid is None:
            pid = self._fork_now(conn, req, spare)
        self.last_req = req
        self.children.add(pid)
        self.served += 1
        _send_json(conn, {"pid": pid, "served": self.served, "ahead": ahead})

    def _fork_now(self, conn: socket.socket, req: dict[str, Any], spare: str | None) -> int:
        """Fork the job's supervisor now (none was forked ahead): its pid, once it reads as
        the job's supervisor."""
        ready_r, ready_w = os.pipe()

        def child() -> int:
            conn.close()
            os.close(ready_r)
            # First: it reads as the supervisor of its job before train() returns.
            _name_as_supervisor(req["job_dir"])
            os.close(ready_w)
            return self._child(req, spare)

        pid = _fork(child)
        os.close(ready_w)
        with contextlib.suppress(OSError):
            select.select([ready_r], [], [], 5.0)  # closed by the child once it is named
        os.close(ready_r)
        return pid

    @staticmethod
    def _refuse(req: Any) -> str:
        if not isinstance(req, dict):
            return "the request is not an object"
        jd = req.get("job_dir")
        if not isinstance(jd, str) or not os.path.isfile(os.path.join(jd, "spawn.json")):
            return "no job folder with a spawn.json"
        if not isinstance(req.get("env"), dict) or not isinstance(req.get("cwd"), str):
            return "the request has no environment or working directory"
        return limits_why(req.get("rlimits"))

    def _child(self, req: dict[str, Any], spare: str | None) -> int:
        """The forked child: become the job's supervisor (as `python -I supervisor.py JOB_DIR`
        started by the kernel would be) and run it."""
        self._detach()
        return self._become(req, spare)

    def _detach(self) -> None:
        """In a forked child: let go of the host's socket and wake-up pipe, the default
        signal handlers, a session of its own."""
        signal.set_wakeup_fd(-1)
        for fd in self.wake:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.listener.close()
        for conn in self.pending:  # another kernel's connection: its host answers it
            conn.close()
        self.pending.clear()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()

    def _become(self, req: dict[str, Any], spare: str | None) -> int:
        """In a detached child: the job's output, limits, CPUs, folder, environment and umask,
        then `supervisor.main` on the job folder."""
        import resource

        job_dir = req["job_dir"]
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(
            os.path.join(job_dir, "supervisor.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in (null, log):
            if fd > 2:
                os.close(fd)
        for name, pair in (req.get("rlimits") or {}).items():
            which = getattr(resource, name, None)
            if which is not None and isinstance(pair, list) and len(pair) == 2:
                with contextlib.suppress(OSError, ValueError):
                    resource.setrlimit(which, (pair[0], pair[1]))
        affinity = req.get("affinity")
        if affinity:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                os.sched_setaffinity(0, affinity)
        with contextlib.suppress(OSError):
            os.chdir(req["cwd"])
        set_environ(req["env"])
        os.umask(int(req.get("umask", 0o022)))
        if spare is not None:
            self.sv_endpoint.SPARE_CERTIFICATE = spare
        sys.argv = [os.path.join(_HERE, "supervisor.py"), job_dir]
        return int(self.sv.main(sys.argv))

    def shutdown(self) -> None:
        """Remove the socket and record, the certificates and the supervisor made ahead (no
        supervisor of a job stops)."""
        self._stop_ahead()
        for conn in list(self.pending):
            self._drop(conn, "the supervisor host stops")
        for path in (self.sock_path, self.record):
            with contextlib.suppress(OSError):
                os.unlink(path)
        if self.making is not None:
            with contextlib.suppress(Exception):
                self.making[0].kill()
                self.making[0].wait(5)
            _rmtree(self.making[1])
        if self.spare is not None:
            _rmtree(self.spare)


def _rmtree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _send_json(conn: socket.socket, obj: Any) -> None:
    data = json.dumps(obj).encode("utf-8", "surrogatepass")
    with contextlib.suppress(OSError):
        conn.sendall(struct.pack("!I", len(data)) + data)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(min(1 << 20, n - len(data)))
        if not chunk:
            raise ValueError("truncated")
        data += chunk
    return data


def _recv_json(conn: socket.socket) -> Any:
    (length,) = struct.unpack("!I", _recv_exact(conn, 4))
    if length > REQUEST_MAX:
        raise ValueError("too large")
    return json.loads(_recv_exact(conn, length).decode("utf-8", "surrogatepass"))


def main(argv: list[str]) -> int:
    """Entry point (see the module docstring)."""
    sock_path, record, owner, owner_ct, idle, spares = argv[1:7]
    os.umask(0o077)
    host = Host(
        sock_path,
        record,
        int(owner),
        float(owner_ct) if owner_ct not in ("", "none") else None,
        float(idle),
        spares,
    )
    try:
        host.serve()
    finally:
        host.shutdown()
    return 0


# ----------------------------------------------------------------------------- the kernel's side


#: How long the kernel waits for the host's answer before starting the supervisor itself.
SUBMIT_TIMEOUT = 10.0


def code_key() -> str:
    """What the host runs: the interpreter and this folder's supervisor code (an edited or
    upgraded package gets a new host)."""
    parts = [sys.executable, _HERE, str(os.getuid())]
    for name in _CODE:
        with contextlib.suppress(OSError):
            parts.append(f"{name}:{os.stat(os.path.join(_HERE, name)).st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def host_for(state_dir: Path) -> tuple[Path, Path]:
    """(socket, record) of the supervisor host of this state folder and code. OSError when
    the owner-only folder for sockets cannot be had (then supervisors start as processes)."""
    from .warm import pool as warm_pool

    key = code_key()
    where = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:8]
    sock = warm_pool.socket_dir() / f"{where}-host-{key}.sock"
    return sock, warm_pool.warm_dir(state_dir) / f"supervisor-{key}{SUFFIX}"


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            out = json.load(fh)
        return out if isinstance(out, dict) else {}
    except (OSError, ValueError):
        return {}


#: The hosts this process started, by state folder: one at a time (a process that moves to
#: another state folder, as a test run does hundreds of times, stops the one it left).
_STARTED: dict[str, tuple[Path, int]] = {}


def _retire_others(state_dir: Path) -> None:
    here = str(Path(state_dir).resolve())
    for other, (record, pid) in list(_STARTED.items()):
        if other == here:
            continue
        del _STARTED[other]
        meta = _read(record)
        if int(meta.get("pid") or 0) != pid:
            continue  # not ours any more
        with contextlib.suppress(OSError):
            record.unlink()  # the host ends within a second (it never stops a supervisor)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def ensure_started(state_dir: Path, idle_seconds: float) -> bool:
    """Start the host of this state folder unless it runs; True if it runs already."""
    import fcntl
    import subprocess

    sock, record = host_for(state_dir)
    _retire_others(state_dir)
    d = record.parent
    lock = os.open(d / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        meta = _read(record)
        pid = int(meta.get("pid") or 0)
        if pid and _alive(pid, None):
            return True
        for stale in (sock, record):
            with contextlib.suppress(OSError):
                stale.unlink()
        owner_ct = "none"
        with contextlib.suppress(Exception):
            import psutil

            owner_ct = repr(psutil.Process(os.getpid()).create_time())
        logfd = os.open(d / "supervisor-host.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    os.path.join(_HERE, "supervisor_host.py"),
                    str(sock),
                    str(record),
                    str(os.getpid()),
                    owner_ct,
                    repr(float(idle_seconds)),
                    str(d / "certificates"),
                ],
                cwd=str(d),
                stdin=subprocess.DEVNULL,
                stdout=logfd,
                stderr=logfd,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(logfd)
        # The pid at once (the host rewrites the record as it starts): no second one is started.
        fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"pid": proc.pid, "state": "launched"}, fh)
        _STARTED[str(Path(state_dir).resolve())] = (record, proc.pid)
        import threading

        threading.Thread(target=proc.wait, name="kf-jupyter-host-reap", daemon=True).start()
        return False
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)


def submit(state_dir: Path, job_dir: Path) -> tuple[int | None, str]:
    """Have the host fork the supervisor of `job_dir`: (pid, '') or (None, why not)."""
    try:
        sock, _record = host_for(state_dir)
    except OSError as exc:
        return None, str(exc)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(SUBMIT_TIMEOUT)
        try:
            conn.connect(str(sock))
        except OSError as exc:
            return None, f"no supervisor host is listening ({exc.strerror or exc})"
        umask = os.umask(0o077)
        os.umask(umask)
        affinity = None
        with contextlib.suppress(OSError, AttributeError):
            affinity = sorted(os.sched_getaffinity(0))
        try:
            cwd = os.getcwd()
        except OSError:  # the kernel's folder was removed: a supervisor process would keep it
            return None, "the kernel's working directory is gone"
        req = {
            "job_dir": str(job_dir),
            "env": dict(os.environ),
            "cwd": cwd,
            "umask": umask,
            "rlimits": rlimits(),
            "affinity": affinity,
        }
        try:
            _send_json(conn, req)
            answer = _recv_json(conn)
        except (OSError, ValueError) as exc:
            return None, f"the supervisor host did not answer ({exc})"
        pid = answer.get("pid") if isinstance(answer, dict) else None
        if isinstance(pid, int) and pid > 0:
            return pid, ""
        return None, str((answer or {}).get("error") or "the supervisor host declined")
    finally:
        conn.close()


def stop(state_dir: Path, timeout: float = 5.0) -> int:
    """Stop every supervisor host of this state folder (their supervisors run on); how many."""
    d = Path(state_dir) / "warm"
    n = 0
    for record in d.glob(f"*{SUFFIX}"):
        meta = _read(record)
        with contextlib.suppress(OSError):
            record.unlink()
        pid = int(meta.get("pid") or 0)
        if not pid or not _alive(pid, None):
            continue
        n += 1
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + timeout
        while time.monotonic() < end and _alive(pid, None):
            time.sleep(0.02)
        if _alive(pid, None):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        sock = meta.get("socket")
        if sock:
            with contextlib.suppress(OSError):
                os.unlink(sock)
    return n


if __name__ == "__main__":
    sys.exit(main(sys.argv))
