"""The supervisor hands a known warm launch to the pool itself (issue 21; standard library only).

A warm node's command normally runs through four processes before the pool sees it: the
supervisor starts `bash -c SCRIPT`, which `exec`s the `torchrun` (or `python3`) shim on PATH, a
`#!/bin/sh` script that `exec`s `python -I -S shim.py`, which connects to the pool. When the
backend recognised the script as exactly the one kf-jupyter generated (`warm/launch.py`: it
only writes the shipped files and `exec`s the launcher), the supervisor does what bash would
have done, in its own process: it writes the files (owner-only, as the script's `umask 077`
does), computes the environment bash would pass on (`shell_env`), and sends the pool the very
launch the shim would have sent (the same header: argv, environment, working directory, umask,
limits, affinity, and the node's stdin/stdout/stderr). It then stands for the node as the shim
did: the node's pid is the process the supervisor watches and signals (its session), the pool's
`{"exit": CODE}` is its exit, and the connection closing kills the node (the pool's rule).

Whenever something is not as the generated launch expects (an environment bash would change in
a way not reproduced here, a pool not accepting launches yet, a pool that declines), the launch
runs as before, through bash and the shim, and the job's events say why (`WarmViaShim`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import select
import socket
import struct
import subprocess
import time
from collections.abc import Mapping
from typing import Any

#: How long the supervisor waits for the pool's answer to a launch before it gives up on it.
REPLY_SECONDS = 10.0
#: Variables bash drops from the environment it passes on (`bash -c 'exec PROGRAM'`, bash 5).
_DROPPED = frozenset(
    {
        "_",
        "BASHPID",
        "BASH_ARGV0",
        "BASH_COMMAND",
        "BASH_SUBSHELL",
        "BASH_VERSINFO",
        "COMP_WORDBREAKS",
        "HISTCMD",
        "PPID",
        "PS1",
        "PS2",
        "RANDOM",
        "SRANDOM",
    }
)
#: Variables bash rewrites or acts on (bash options, tracing, the functions it exports): a
#: launch with one of them runs through bash itself.
_BASH_OWN = frozenset(
    {
        "BASH",
        "BASHOPTS",
        "BASH_COMPAT",
        "BASH_ENV",
        "BASH_EXECUTION_STRING",
        "BASH_VERSION",
        "BASH_XTRACEFD",
        "ENV",
        "EPOCHREALTIME",
        "EPOCHSECONDS",
        "IFS",
        "LINENO",
        "OPTERR",
        "OPTIND",
        "POSIXLY_CORRECT",
        "PS4",
        "SHELLOPTS",
    }
)
_HERE = os.path.dirname(os.path.abspath(__file__))
_SHIM: Any = None


def shim() -> Any:
    """warm/shim.py, loaded once (its event texts and records are reused as they are)."""
    global _SHIM
    if _SHIM is None:
        path = os.path.join(_HERE, "warm", "shim.py")
        spec = importlib.util.spec_from_file_location("kfj_warm_shim", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _SHIM = module
    return _SHIM


def _same_dir(a: str, b: str) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def shell_env(env: Mapping[str, str], cwd: str) -> tuple[dict[str, str] | None, str]:
    """The environment `bash -c '...; exec PROGRAM'` started in `cwd` with `env` passes to
    PROGRAM, then the shim's own clean-up (its folder off PATH, the KF_JUPYTER_WARM_*
    variables): (that environment, '') or (None, why it is not reproduced here)."""
    out = dict(env)
    for key in out:
        if key in _BASH_OWN or key.startswith("BASH_FUNC_"):
            return None, f"the environment sets {key}, which bash acts on"
    if "LC_ALL" in out and out["LC_ALL"] not in ("", "C", "POSIX", "C.UTF-8", "C.utf8"):
        return None, "the environment sets LC_ALL, which bash checks (and may warn about)"
    for key in _DROPPED:
        out.pop(key, None)
    # PWD: kept when it names the working directory, else bash sets it (variables.c).
    pwd = out.get("PWD", "")
    if not (pwd.startswith("/") and _same_dir(pwd, cwd)):
        out["PWD"] = os.path.realpath(cwd)
    # OLDPWD: dropped unless it names a directory.
    if "OLDPWD" in out and not os.path.isdir(out["OLDPWD"]):
        del out["OLDPWD"]
    # SHLVL: bash adds one, `exec` takes it back; a value it would reset (with a warning) or
    # that is not a plain number is left to bash.
    level = out.get("SHLVL")
    if level is None:
        out["SHLVL"] = "0"
    else:
        text = level.strip()
        if not text.isdigit() or not text.isascii() or int(text) >= 999:
            return None, f"SHLVL={level!r} is not a shell level bash keeps as it is"
        out["SHLVL"] = str(int(text))
    shim_bin = out.get("KF_JUPYTER_WARM_BIN", "")
    out["PATH"] = os.pathsep.join(p for p in out.get("PATH", "").split(os.pathsep) if p != shim_bin)
    for var in shim()._VARS:  # the shim's own clean-up, the same list
        out.pop(var, None)
    return out, ""


def write_files(files: list[list[str]]) -> None:
    """The shipped files, as the script's `umask 077; printf '%s' TEXT >FILE` writes them."""
    old = os.umask(0o077)
    try:
        for path, text in files:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            with os.fdopen(fd, "wb") as fh:
                fh.write(text.encode("utf-8", "surrogateescape"))
    finally:
        os.umask(old)


class DirectNode:
    """A node the pool started for this supervisor: what `subprocess.Popen` gives the
    supervisor of a process it started (`pid`, `poll`, `wait`, `returncode`), read from the
    pool's connection."""

    def __init__(self, conn: socket.socket, pid: int, log_fd: int, buf: bytes) -> None:
        self.conn: socket.socket | None = conn
        self.pid = pid
        self.returncode: int | None = None
        # True once the pool reported the exit: it has stopped what the node left (zygote.py).
        self.stopped_by_pool = False
        self.log_fd = log_fd
        self.buf = buf
        conn.setblocking(False)
        self._lines()

    def fileno(self) -> int:
        """The connection's descriptor (-1 once the node ended): readable when the pool writes."""
        return self.conn.fileno() if self.conn is not None and self.returncode is None else -1

    def _end(self, code: int, let_go: bool = True) -> None:
        self.returncode = code
        if let_go:
            self._let_go()
        if self.log_fd >= 0:
            os.close(self.log_fd)
            self.log_fd = -1

    def _let_go(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def _lines(self) -> None:
        while b"\n" in self.buf and self.returncode is None:
            line, _, self.buf = self.buf.partition(b"\n")
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if isinstance(msg, dict) and "exit" in msg:
                    # The connection stays open until close(): the pool forks its next spare
                    # once the supervisor has recorded the job's end and let go (zygote.py).
                    self.stopped_by_pool = True
                    self._end(int(msg["exit"]), let_go=False)

    def poll(self) -> int | None:
        """The node's exit code once the pool reported it (negative: killed by that signal)."""
        while self.returncode is None and self.conn is not None:
            try:
                chunk = self.conn.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                chunk = b""
            if not chunk:
                with contextlib.suppress(OSError):
                    os.write(
                        self.log_fd,
                        b"kf-jupyter: the warm pool process ended while this node ran; the "
                        b"node was stopped. Run the job again (or with warm=False).\n",
                    )
                self._end(1)
                break
            self.buf += chunk
            self._lines()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit (subprocess.TimeoutExpired after `timeout` seconds)."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(["node", str(self.pid)], timeout or 0.0)
            with contextlib.suppress(InterruptedError):
                select.select([self.fileno()], [], [], left)
        assert self.returncode is not None
        return self.returncode

    def close(self) -> None:
        """Let go of the connection (the pool kills the node's session if it still runs)."""
        if self.returncode is None:
            self._end(-9)
        else:
            self._let_go()


def hand_over(
    direct: Mapping[str, Any],
    env: Mapping[str, str],
    cwd: str,
    log_path: str,
    umask: int,
) -> tuple[DirectNode | None, dict[str, Any], str]:
    """Hand a recognised launch (`warm/launch.py`'s {"argv", "files"}) to the job's warm pool:
    (the node, the pool's reply, '') or (None, {}, why the launch goes through the shim)."""
    sock_path = env.get("KF_JUPYTER_WARM_SOCKET", "")
    if not sock_path:
        return None, {}, "the job has no warm pool"
    node_env, why = shell_env(env, cwd)
    if node_env is None:
        return None, {}, why
    argv = [str(a) for a in direct["argv"]]
    mode = "torchrun" if argv[0] == "torchrun" else "python"
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock_path)
    except OSError as exc:
        conn.close()
        return None, {}, f"the warm pool is not accepting launches yet ({exc.strerror or exc})"
    write_files(direct.get("files") or [])
    sh = shim()
    header = {
        "mode": mode,
        "argv": argv,
        "env": node_env,
        "cwd": os.path.realpath(cwd),
        "umask": umask,
        "rlimits": sh._rlimits(),
        "affinity": sh._affinity(),
    }
    null = os.open(os.devnull, os.O_RDONLY)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        data = json.dumps(header).encode("utf-8", "surrogatepass")
        payload = struct.pack("!I", len(data)) + data
        conn.settimeout(REPLY_SECONDS)
        sent = conn.sendmsg(
            [payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("3i", null, log, log))]
        )
        if sent < len(payload):
            conn.sendall(payload[sent:])
        buf = b""
        while b"\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                raise OSError("the pool closed the connection")
            buf += chunk
        line, _, rest = buf.partition(b"\n")
        first = json.loads(line)
    except (OSError, ValueError) as exc:
        conn.close()
        os.close(log)
        return None, {}, f"the warm pool did not answer ({exc})"
    finally:
        os.close(null)
    if not isinstance(first, dict) or not first.get("warm"):
        conn.close()
        os.close(log)
        why = first.get("why") if isinstance(first, dict) else None
        return None, {}, f"the warm pool declined ({why or 'no reason given'})"
    return DirectNode(conn, int(first["pid"]), log, rest), first, ""


def record_warm(env: Mapping[str, str], first: Mapping[str, Any]) -> None:
    """`warm-node-N.json` and the WarmStart event, as the shim writes them, saying the launch
    was handed over directly."""
    sh = shim()
    message = sh._warm_message(dict(first)) + (
        "; handed over directly by the job's supervisor (no bash, sh or shim process)"
    )
    sh._record(
        dict(env),
        True,
        message,
        {"pid": first.get("pid"), "pool_pid": first.get("zygote"), "direct": True},
    )
