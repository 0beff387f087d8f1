"""The rendezvous port of a local job, chosen so that nothing else can take it before the job binds it.

A port from `bind(("", 0))` comes from the kernel's ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`, usually 32768-60999), the same range every outgoing
connection on the machine draws its local port from. Between our check and torchrun's
TCPStore binding it (a second or more on a loaded machine), another job's gloo or store client
could connect *from* that port, and torchrun failed with EADDRINUSE. So the port is drawn at
random from below the ephemeral range, where the kernel never places an outgoing connection,
checked free on every address (IPv4 and IPv6), and not handed out twice by this process within
its recent picks. Only a listener started by someone else in that window can still collide, as
with any launcher.
"""

from __future__ import annotations

import random
import socket
from collections import deque
from pathlib import Path

_LOWEST = 20000  # below the usual registered services; above the classic low ports
_RECENT: deque[int] = deque(maxlen=512)
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(text: str | None = None) -> tuple[int, int]:
    """The kernel's ephemeral port range (lo, hi), inclusive; Linux's default where unreadable."""
    try:
        raw = text if text is not None else _RANGE_FILE.read_text()
        lo, hi = (int(x) for x in raw.split()[:2])
        if 0 < lo <= hi <= 65535:
            return lo, hi
    except (OSError, ValueError):
        pass
    return 32768, 60999


def candidate_range(text: str | None = None) -> tuple[int, int]:
    """Where rendezvous ports are drawn from: the ports outside the ephemeral range, [lo, hi)."""
    lo, hi = ephemeral_range(text)
    if lo - _LOWEST >= 1000:
        return _LOWEST, lo
    if 65535 - hi >= 1000:  # an ephemeral range moved low: use the ports above it
        return hi + 1, 65536
    return 0, 0  # no room outside it: fall back to the kernel's choice


def _free_everywhere(port: int) -> bool:
    """True when `port` can be bound on every IPv4 and IPv6 address right now (TIME_WAIT counts
    as taken: no SO_REUSEADDR here)."""
    families = [(socket.AF_INET, "0.0.0.0")]
    if socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, host in families:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.bind((host, port))
        except OSError as e:
            if family == socket.AF_INET6 and e.errno in (97, 99):  # no IPv6 on this host
                continue
            return False
    return True


def free_port() -> int:
    """A TCP port free right now, outside the ephemeral range, not recently handed out here."""
    lo, hi = candidate_range()
    if hi > lo:
        rng = random.SystemRandom()
        for _ in range(200):
            port = rng.randrange(lo, hi)
            if port not in _RECENT and _free_everywhere(port):
                _RECENT.append(port)
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    _RECENT.append(port)
    return port
