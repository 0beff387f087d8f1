"""A local job's rendezvous port can't be taken by another job's outgoing connection.

The clean-clone CI once failed a warm torch job with EADDRINUSE on its rendezvous port: the port
came from the ephemeral range, where every outgoing connection on the machine (another job's gloo
or store client) also takes its local port.
"""

from __future__ import annotations

import socket

from kf_jupyter.backends.local import ports


def test_rendezvous_ports_are_outside_the_ephemeral_range_and_not_handed_out_twice():
    lo, hi = ports.ephemeral_range()
    picked = [ports.free_port() for _ in range(300)]
    assert all(not (lo <= p <= hi) for p in picked), (lo, hi, picked)
    assert len(set(picked)) == len(picked)
    for p in picked[:20]:  # each is bindable, as torchrun's TCPStore will bind it
        with socket.socket() as s:
            s.bind(("0.0.0.0", p))


def test_a_port_someone_listens_on_is_never_chosen(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        # Only that port is a candidate: free_port must not return it.
        monkeypatch.setattr(ports, "candidate_range", lambda: (port, port + 1))
        assert ports.free_port() != port


def test_the_candidate_range_follows_the_kernels_setting():
    assert ports.candidate_range("32768\t60999\n") == (20000, 32768)
    assert ports.candidate_range("1024 60999") == (61000, 65536)  # the range moved low
    assert ports.candidate_range("1024 65000") == (0, 0)  # no room: the kernel chooses
    assert ports.ephemeral_range("garbage") == (32768, 60999)
