"""The `torchrun` / `python3` shim on a warm job's PATH (standard library; run with `python -I -S`).

    python -I -S shim.py PROGRAM ARGS...

It takes itself out of the environment (its folder from PATH, the KF_JUPYTER_WARM_* variables),
then asks the warm pool (KF_JUPYTER_WARM_SOCKET) to start PROGRAM ARGS with exactly that
environment, this working directory and these stdin/stdout/stderr. It then stands for the node:
signals it gets go to the node, and it exits as the node did. When the pool is not there or
declines (something the warm path does not do), it runs the real PROGRAM itself: a cold start.
Either way it records which in the job's events and in `warm-<node>.json`.

It starts on the path of every warm node, so it imports only C modules (`_socket`, `_struct`,
`_signal`, `_json`): `json`, `socket` and `signal` pull in `re` and `enum`, which took 15-35 ms
of the 20-50 ms this interpreter took to reach its first line (issue 21).
"""

import _json
import _signal
import _socket
import _struct
import os
import sys
import time

_VARS = (
    "KF_JUPYTER_WARM_SOCKET",
    "KF_JUPYTER_WARM_BIN",
    "KF_JUPYTER_WARM_PYTHON",
    "KF_JUPYTER_WARM_SHIM",
    "KF_JUPYTER_WARM_META",
    "KF_JUPYTER_WARM_FRAMEWORK",
    "KF_JUPYTER_WARM_UNNAMED",
)


def _dumps(obj):
    """JSON text of str / int / bool / None / list / dict, as `json.dumps` writes it (ASCII)."""
    if isinstance(obj, str):
        return _json.encode_basestring_ascii(obj)
    if obj is None:
        return "null"
    if obj is True or obj is False:
        return "true" if obj else "false"
    if isinstance(obj, (int, float)):
        return repr(obj)
    if isinstance(obj, (list, tuple)):
        return "[" + ", ".join(_dumps(x) for x in obj) + "]"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{_dumps(str(k))}: {_dumps(v)}" for k, v in obj.items()) + "}"
    raise TypeError(f"cannot encode {type(obj).__name__}")


class _Context:
    """What the C scanner of `_json` reads from a JSONDecoder."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name):
        return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


_scan = _json.make_scanner(_Context())


def _loads(text):
    """One JSON value (what `json.loads` reads from the pool's reply lines)."""
    text = text.strip()
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def _clean_env():
    env = dict(os.environ)
    # What `sh` dropped on its way here (names not shell identifiers, `A-B`, `1X`; issue 38):
    # the supervisor carried them in KF_JUPYTER_WARM_UNNAMED, as bash passed them on.
    try:
        carried = _loads(env.get("KF_JUPYTER_WARM_UNNAMED") or "{}")
    except ValueError:
        carried = {}
    if isinstance(carried, dict):
        for key, value in carried.items():
            if isinstance(key, str) and isinstance(value, str) and key and "=" not in key:
                env.setdefault(key, value)
    shim_bin = env.get("KF_JUPYTER_WARM_BIN", "")
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p != shim_bin]
    env["PATH"] = os.pathsep.join(path)
    for var in _VARS:
        env.pop(var, None)
    return env, path


def _which(name, path):
    for d in path:
        cand = os.path.join(d or ".", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _job_dir(env):
    logs = env.get("KF_JUPYTER_RANK_LOG_DIR")
    return os.path.dirname(logs) if logs else None


def _record(env, warm, message, extra):
    jd = _job_dir(env)
    if not jd or not os.path.isdir(jd):
        return
    node = f"node-{env.get('KF_JUPYTER_NODE_RANK', '0')}"
    info = {"node": node, "warm": warm, "message": message, "time": time.time(), **extra}
    try:
        fd = os.open(
            os.path.join(jd, f"warm-{node}.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
        )
        try:
            os.write(fd, _dumps(info).encode())
        finally:
            os.close(fd)
        line = _dumps(
            {
                "time": info["time"],
                "type": "Normal",
                "reason": "WarmStart" if warm else "ColdStart",
                "message": f"{node}: {message}",
                "object": node,
            }
        )
        fd = os.open(
            os.path.join(jd, "events.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _rlimits():
    """This launcher's resource limits (the kernel's, through the supervisor): a warm node gets
    them, as a cold one inherits them."""
    import resource

    out = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            try:
                out[name] = list(resource.getrlimit(getattr(resource, name)))
            except (OSError, ValueError):
                pass
    return out


def _affinity():
    try:
        return sorted(os.sched_getaffinity(0))
    except (OSError, AttributeError):
        return None


def _remember_cold(env, why):
    """One line in the pools' cold log (warm/cold.jsonl, shown by %kf_pool)."""
    meta = os.environ.get("KF_JUPYTER_WARM_META", "")
    if not meta:
        return
    node = f"node-{env.get('KF_JUPYTER_NODE_RANK', '0')}"
    line = _dumps(
        {"time": time.time(), "job": env.get("KF_JUPYTER_JOB_NAME", "?"), "node": node, "why": why}
    )
    try:
        fd = os.open(
            os.path.join(os.path.dirname(meta), "cold.jsonl"),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND,
            0o600,
        )
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _cold(program, args, env, path, why):
    real = _which(program, path)
    if real is None:
        sys.stderr.write(f"kf-jupyter: {program}: command not found on PATH\n")
        return 127
    _record(env, False, f"started cold ({why})", {})
    _remember_cold(env, why)
    os.execve(real, [program, *args], env)
    return 127  # not reached


def _connect(sock_path, meta_path):
    """A connection to a pool that accepts launches now, else (None, why the node starts cold).

    A node never waits for a pool that is still importing its framework (issue 34): a cold
    start does the same imports itself, so waiting could only make the job slower than cold (a
    pool imports beside a whole machine's other work: a first 2-node JAX job waited 18-26 s for
    one against 4-5 s cold). The job starts cold at once and the jobs after it go warm."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
        return s, None
    except OSError as exc:
        s.close()
        why = exc.strerror or str(exc)
    if _starting(meta_path):
        return None, (
            "the warm pool is still importing its framework; this node starts cold rather "
            "than wait for it, and the next jobs start warm"
        )
    return None, f"the warm pool is not ready ({why})"


def _starting(meta_path):
    """The pool of `meta_path` exists but does not accept launches yet (it imports)."""
    if not meta_path:
        return False
    try:
        with open(meta_path, encoding="utf-8") as fh:
            meta = _loads(fh.read())
        pid = int(meta.get("pid") or 0)
        if not pid:
            return True  # the kernel has just started it; the pool has not written its pid
        os.kill(pid, 0)
        return meta.get("state") == "starting"
    except (OSError, ValueError, AttributeError):
        return False


class _Lines:
    """Lines read from a socket (what `socket.makefile().readline()` gives, without `socket`).
    A signal handler running meanwhile (`forward`) does not end a wait: PEP 475 retries."""

    def __init__(self, conn):
        self.conn = conn
        self.buf = b""

    def readline(self):
        while b"\n" not in self.buf:
            chunk = self.conn.recv(65536)
            if not chunk:
                line, self.buf = self.buf, b""
                return line.decode("utf-8", "replace")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode("utf-8", "replace") + "\n"


def _warm_message(first):
    """The WarmStart event: which process, and whether it was forked ahead of the job."""
    pid, pool, served = first.get("pid"), first.get("zygote"), first.get("served")
    if first.get("ahead"):
        ranks = int(first.get("ranks") or 0)
        ahead = int(first.get("ranks_ahead") or 0)
        tail = ""
        if ranks:
            tail = f"; {ahead} of its {ranks} ranks forked ahead"
            if ahead < ranks:
                tail += f", {ranks - ahead} forked at its start"
        return (
            f"started warm (pid {pid}, forked ahead of the job by pool process {pool}, "
            f"launch {served} of that pool{tail})"
        )
    why = first.get("why")
    return (
        f"started warm (pid {pid}, forked from pool process {pool} as it arrived, launch "
        f"{served} of that pool" + (f"; {why})" if why else ")")
    )


def main(argv):
    """Entry point: `shim.py PROGRAM ARGS...`."""
    program, args = argv[1], list(argv[2:])
    sock_path = os.environ.get("KF_JUPYTER_WARM_SOCKET", "")
    meta_path = os.environ.get("KF_JUPYTER_WARM_META", "")
    env, path = _clean_env()
    mode = "torchrun" if program == "torchrun" else "python"
    if mode == "python" and (not args or args[0].startswith("-") or not args[0].endswith(".py")):
        # Not a script run (pip, -c, -m): nothing to warm; run the real interpreter quietly.
        real = _which(program, path)
        if real is None:
            sys.stderr.write(f"kf-jupyter: {program}: command not found on PATH\n")
            return 127
        os.execve(real, [program, *args], env)
    if not sock_path:
        return _cold(program, args, env, path, "no warm pool for this job")
    conn, why = _connect(sock_path, meta_path)
    if conn is None:
        return _cold(program, args, env, path, why)
    umask = os.umask(0o077)
    os.umask(umask)
    header = _dumps(
        {"mode": mode, "argv": [program, *args], "env": env, "cwd": os.getcwd(), "umask": umask,
         "rlimits": _rlimits(), "affinity": _affinity()}
    ).encode("utf-8")  # fmt: skip
    fds = [0, 1, 2]
    reader = _Lines(conn)
    try:
        payload = _struct.pack("!I", len(header)) + header
        sent = conn.sendmsg(
            [payload], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _struct.pack("3i", *fds))]
        )
        if sent < len(payload):
            conn.sendall(payload[sent:])
        first = _loads(reader.readline() or "{}")
    except (OSError, ValueError) as exc:
        conn.close()
        return _cold(program, args, env, path, f"the warm pool did not answer ({exc})")
    if not first.get("warm"):
        conn.close()
        return _cold(program, args, env, path, first.get("why") or "the warm pool declined")
    pid = first.get("pid")
    _record(env, True, _warm_message(first), {"pid": pid, "pool_pid": first.get("zygote")})

    def forward(signum, frame):
        try:
            conn.sendall((_dumps({"signal": signum}) + "\n").encode())
        except OSError:
            pass

    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGQUIT):
        _signal.signal(sig, forward)
    while True:
        try:
            line = reader.readline()
        except OSError:
            line = ""
        if not line:
            sys.stderr.write(
                "kf-jupyter: the warm pool process ended while this node ran; the node was "
                "stopped. Run the job again (or with warm=False).\n"
            )
            return 1
        try:
            msg = _loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict) and "exit" in msg:
            code = int(msg["exit"])
            if code < 0:
                _signal.signal(-code, _signal.SIG_DFL)
                os.kill(os.getpid(), -code)
                time.sleep(1)
                return 128 - code
            return code


if __name__ == "__main__":
    _code = main(sys.argv)
    # The node's exit reaches the supervisor as this process's: skip the interpreter's
    # teardown (nothing here is left to flush or finalize), it is on every warm job's exit path.
    for _stream in (sys.stdout, sys.stderr):
        try:
            _stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(_code if isinstance(_code, int) else 1)
