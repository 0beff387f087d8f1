"""A warm node's agent store listens before its ranks get their launch (issue 21): a rank that
reaches `init_process_group` first waits in the backlog instead of being refused (torch's client
then retried after a 0.5-0.75 s back-off). Real torch TCPStore, real sockets."""

from __future__ import annotations

import socket
import sys
import threading
from datetime import timedelta
from typing import Any

import pytest

from kf_jupyter.backends.local.ports import free_port

from .test_warm_rank_end import agent_fixture  # noqa: F401

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the warm pool is Linux"),
]


def test_a_rank_that_comes_before_the_store_is_served_not_refused(agent: Any) -> None:
    from torch.distributed import TCPStore

    port = free_port()
    listener = agent.listen_early(port)
    try:
        # Before the store exists: a connection is taken (it was refused before this change).
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        got: dict[str, Any] = {}

        def rank() -> None:  # a rank's client, as init_process_group makes it
            try:
                client = TCPStore("127.0.0.1", port, None, False, timedelta(seconds=30))
                client.set("rank0", "here")
                got["ok"] = True
            except Exception as exc:  # pragma: no cover (reported below)
                got["error"] = exc

        t = threading.Thread(target=rank)
        t.start()
        server = TCPStore(
            "127.0.0.1",
            port,
            None,
            True,
            timedelta(seconds=30),
            wait_for_workers=False,
            master_listen_fd=listener.detach(),  # the store's from now on, as in the node
        )
        t.join(60)
        assert got == {"ok": True}, got
        assert server.get("rank0") == b"here"
    finally:
        listener.close()


def test_a_port_already_taken_says_so(agent: Any) -> None:
    port = free_port()
    taken = agent.listen_early(port)
    try:
        with pytest.raises(OSError, match=f"port {port} cannot listen"):
            agent.listen_early(port)
    finally:
        taken.close()
