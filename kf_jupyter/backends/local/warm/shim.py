"""The `torchrun` / `python3` shim on a warm job's PATH (standard library; run with `python -I -S`).

    python -I -S shim.py PROGRAM ARGS...

It takes itself out of the environment (its folder from PATH, the KF_JUPYTER_WARM_* variables),
then asks the warm pool (KF_JUPYTER_WARM_SOCKET) to start PROGRAM ARGS with exactly that
environment, this working directory and these stdin/stdout/stderr. It then stands for the node:
signals it gets go to the node, and it exits as the node did. When the pool is not there or
declines (something the warm path does not do), it runs the real PROGRAM itself: a cold start.
Either way it records which in the job's events and in `warm-<node>.json`.
"""

import json
import os
import signal
import socket
import struct
import sys
import time

#: How long a node waits for a pool process that is still importing its framework (alive and
#: saying "starting") before it starts cold. Waiting is never slower than starting cold: the pool
#: began importing before this node did, and a cold start would import the same framework again
#: beside it, on the same cores. The pool dying ends the wait at once.
WAIT_STARTING_SECONDS = 300.0
#: How long a node waits for a pool the kernel has just launched and whose pid is not written.
WAIT_LAUNCHED_SECONDS = 5.0
_VARS = (
    "KF_JUPYTER_WARM_SOCKET",
    "KF_JUPYTER_WARM_BIN",
    "KF_JUPYTER_WARM_PYTHON",
    "KF_JUPYTER_WARM_SHIM",
    "KF_JUPYTER_WARM_META",
    "KF_JUPYTER_WARM_FRAMEWORK",
)


def _clean_env():
    env = dict(os.environ)
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
        with os.fdopen(fd, "w") as fh:
            json.dump(info, fh)
        line = json.dumps(
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


def _remember_cold(env, why):
    """One line in the pools' cold log (warm/cold.jsonl, shown by %kf_pool)."""
    meta = os.environ.get("KF_JUPYTER_WARM_META", "")
    if not meta:
        return
    node = f"node-{env.get('KF_JUPYTER_NODE_RANK', '0')}"
    line = json.dumps(
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


def _launched_alive(meta_path):
    """True if the pid the kernel wrote as it launched the pool (`<key>.launch`) still runs."""
    try:
        with open(meta_path[: -len(".json")] + ".launch") as fh:
            os.kill(int(fh.read().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def _connect(sock_path, meta_path):
    """A connection to a ready pool; wait for one that is still importing (while it lives)."""
    end = time.monotonic() + WAIT_STARTING_SECONDS
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(sock_path)
            return s, None
        except OSError as exc:
            s.close()
            why = exc.strerror or str(exc)
        starting = False
        if meta_path:
            try:
                with open(meta_path) as fh:
                    meta = json.load(fh)
                pid = int(meta.get("pid") or 0)
                if pid:
                    os.kill(pid, 0)
                    starting = meta.get("state") == "starting"
                else:  # the kernel has just started it; the pool has not written its pid
                    age = time.time() - float(meta.get("created", 0))
                    starting = age < WAIT_LAUNCHED_SECONDS or _launched_alive(meta_path)
            except (OSError, ValueError):
                starting = False
        if not starting or time.monotonic() >= end:
            return None, f"the warm pool is not ready ({why})"
        time.sleep(0.02)


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
    header = json.dumps(
        {"mode": mode, "argv": [program, *args], "env": env, "cwd": os.getcwd(), "umask": umask}
    ).encode("utf-8")
    fds = [0, 1, 2]
    try:
        conn.sendmsg(
            [struct.pack("!I", len(header)) + header],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", *fds))],
        )
        reader = conn.makefile("r", encoding="utf-8")
        first = json.loads(reader.readline() or "{}")
    except (OSError, ValueError) as exc:
        conn.close()
        return _cold(program, args, env, path, f"the warm pool did not answer ({exc})")
    if not first.get("warm"):
        conn.close()
        return _cold(program, args, env, path, first.get("why") or "the warm pool declined")
    pid = first.get("pid")
    _record(
        env,
        True,
        f"started warm (pid {pid}, forked from pool process {first.get('zygote')}, "
        f"launch {first.get('served')} of that pool)",
        {"pid": pid, "pool_pid": first.get("zygote")},
    )

    def forward(signum, frame):
        try:
            conn.sendall((json.dumps({"signal": signum}) + "\n").encode())
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
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
            msg = json.loads(line)
        except ValueError:
            continue
        if "exit" in msg:
            code = int(msg["exit"])
            if code < 0:
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
                time.sleep(1)
                return 128 - code
            return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
