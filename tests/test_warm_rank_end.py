"""A warm rank tells its node it ended before its memory is torn down (issue 21): what the node
counts, and what a rank says, with real forked processes and sockets."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

import kf_jupyter

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, pidfd")

AGENT = Path(kf_jupyter.__file__).parent / "backends" / "local" / "warm" / "agent.py"


@pytest.fixture(scope="module", name="agent")
def agent_fixture() -> Any:
    """warm/agent.py, loaded by path as the pool loads it."""
    spec = importlib.util.spec_from_file_location("agent_under_test", AGENT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rank(say: bytes | None, linger: float, code: int) -> tuple[int, socket.socket]:
    """A forked process standing for a rank: it says `say` on its socket, stays `linger` s
    (a slow teardown), then exits with `code`."""
    node_end, rank_end = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            node_end.close()
            if say is not None:
                rank_end.send(say)
            time.sleep(linger)
        finally:
            os._exit(code)
    rank_end.close()
    return pid, node_end


def _reap(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def test_a_rank_that_said_it_succeeded_counts_as_ended_before_it_is_gone(agent: Any) -> None:
    slow, slow_sock = _rank(b"0", linger=30, code=0)
    quiet, quiet_sock = _rank(None, linger=0, code=0)
    pids = {slow: (0, 0), quiet: (1, 1)}
    notices = {slow: slow_sock, quiet: quiet_sock}
    start = time.monotonic()
    try:
        ends = []
        for pid, code in agent._rank_ends(pids, notices):
            ends.append((pid, code, time.monotonic() - start))
            pids.pop(pid)
        assert sorted((p, c) for p, c, _ in ends) == sorted([(slow, 0), (quiet, 0)])
        assert max(t for _, _, t in ends) < 20, "the node waited for the slow rank's exit"
        # the one that said nothing was reaped; the one that said 0 is left to its exit
        with pytest.raises(ChildProcessError):
            os.waitpid(quiet, os.WNOHANG)
        assert os.waitpid(slow, os.WNOHANG) == (0, 0)
        assert notices == {}  # every socket of the node's was closed
    finally:
        _reap(slow)
        _reap(quiet)


def test_a_rank_that_failed_or_was_killed_is_counted_by_its_exit_status(agent: Any) -> None:
    failed, failed_sock = _rank(None, linger=0, code=3)
    killed, killed_sock = _rank(None, linger=30, code=0)
    garbled, garbled_sock = _rank(b"x", linger=0.2, code=5)  # only "0" is taken as a success
    os.kill(killed, signal.SIGKILL)
    pids = {failed: (0, 0), killed: (1, 1), garbled: (2, 2)}
    notices = {failed: failed_sock, killed: killed_sock, garbled: garbled_sock}
    try:
        got = {}
        for pid, code in agent._rank_ends(pids, notices):
            got[pid] = code
            pids.pop(pid)
        assert got == {failed: 3, killed: -signal.SIGKILL, garbled: 5}
    finally:
        for pid in (failed, killed, garbled):
            _reap(pid)


def _said(agent: Any, code: int) -> bytes:
    ours, theirs = socket.socketpair()
    agent._hold_notice(theirs)
    try:
        agent.exit_notice(code)
        ours.setblocking(False)
        try:
            return ours.recv(16)
        except BlockingIOError:
            return b""
    finally:
        agent._NOTICE = None
        ours.close()
        theirs.close()


def test_a_rank_says_only_a_success_and_only_without_cuda(agent: Any, monkeypatch) -> None:
    assert _said(agent, 0) == b"0"
    assert _said(agent, 1) == b""
    # A stand-in for torch with CUDA initialised: the devices are free only once the rank is
    # gone, so the node must wait for its exit.
    cuda = types.SimpleNamespace(is_initialized=lambda: True)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert _said(agent, 0) == b""


def test_a_fork_of_the_process_that_holds_the_socket_says_nothing(agent: Any) -> None:
    """A user's `os.fork()` whose child falls through to the runner's end must not tell the
    node (or the pool) that the process it forked from ended: only the holder says."""
    ours, theirs = socket.socketpair()
    agent._hold_notice(theirs)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child)
            try:
                agent.exit_notice(0)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        ours.setblocking(False)
        with pytest.raises(BlockingIOError):
            ours.recv(16)
        agent.exit_notice(0)  # the holder itself
        assert ours.recv(16) == b"0"
    finally:
        agent._NOTICE = None
        ours.close()
        theirs.close()


def test_a_process_holding_a_gpu_device_file_says_nothing(agent: Any, monkeypatch, tmp_path):
    """JAX, XGBoost or CuPy on a GPU do not set torch's flag: an open device file is what tells
    (a file of this test's folder stands for /dev/nvidia0, which this machine has none of)."""
    monkeypatch.setattr(agent, "_GPU_DEVICES", (str(tmp_path / "nvidia"),))
    device = tmp_path / "nvidia0"
    device.write_bytes(b"")
    assert _said(agent, 0) == b"0"
    with open(device, "rb"):
        assert _said(agent, 0) == b""
    assert _said(agent, 0) == b"0"


def test_a_rank_whose_program_closed_the_socket_says_nothing_on_what_took_its_number(
    agent: Any,
) -> None:
    ours, theirs = socket.socketpair()
    agent._hold_notice(theirs)
    number = theirs.fileno()
    other_ours, other_theirs = socket.socketpair()
    try:
        os.close(number)  # the program closed it behind Python's back...
        os.dup2(other_theirs.fileno(), number)  # ...and the number now names its own socket
        agent.exit_notice(0)
        other_ours.setblocking(False)
        with pytest.raises(BlockingIOError):
            other_ours.recv(16)
    finally:
        agent._NOTICE = None
        for s in (ours, other_ours, other_theirs):
            s.close()
        theirs.detach()
        os.close(number)
