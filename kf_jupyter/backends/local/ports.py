"""The rendezvous port of a local job: its own, machine-wide, until the job ends.

Where ports come from. A port from `bind(("", 0))` comes from the kernel's ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`, usually 32768-60999), the range every outgoing
connection on the machine draws its local port from: another job's gloo or store client could
connect *from* it before the job's store listens. So ports are drawn at random from below the
ephemeral range, where the kernel never places an outgoing connection, and checked free on every
address (IPv4 and IPv6). `KF_JUPYTER_PORT_RANGE=LO-HI` (inclusive) narrows the draw, for a
machine whose firewall opens only some ports.

Who owns a port (issue 40). Checking "free" is not owning: two kernels, a kernel and a sweep
driver, or two users could pick the same free port between the check and the store's listen.
A port is therefore *leased* machine-wide before it is checked, with a Unix socket bound in the
abstract namespace (`@kf-jupyter/rendezvous-port/N`):
- the abstract namespace belongs to the network namespace, exactly the scope of a TCP port, so
  every process that can collide on the port (any user, any state folder) sees the lease, and
  no process that cannot does;
- `bind` is atomic (the second binder gets EADDRINUSE), and a lease ends when its socket is
  closed, by the holder or by the kernel when the holder dies: nothing to clean up, no files,
  no permissions;
- the kernel that chose the port holds the lease until the job is over (`Leases`), and the job's
  supervisor holds a second name (`.../N/job`, `hold`) from its start until it exits, so the
  port stays the job's even after the kernel is gone. A new claim needs both names free.
Once the job's store listens, the listening socket itself keeps every other binder off.

What is still possible: a program that is not kf-jupyter binding the port in the window before
the job listens. The supervisor then reports that as the job's failure in one sentence
(`taken_port_message`), not as a rank's error.
"""

from __future__ import annotations

import os
import re
import socket
from collections import deque

_LOWEST = 20000  # below the usual registered services; above the classic low ports
_RECENT: deque[int] = deque(maxlen=512)
_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
RANGE_ENV = "KF_JUPYTER_PORT_RANGE"
RANGE_WAIT_SECONDS = 10.0  # how long a job waits for a port of a narrow range to be given back
_LEASE = "\0kf-jupyter/rendezvous-port/{port}"
_HELD = "\0kf-jupyter/rendezvous-port/{port}/job"


def ephemeral_range(text: str | None = None) -> tuple[int, int]:
    """The kernel's ephemeral port range (lo, hi), inclusive; Linux's default where unreadable."""
    try:
        if text is None:
            with open(_RANGE_FILE, encoding="ascii") as fh:
                text = fh.read()
        lo, hi = (int(x) for x in text.split()[:2])
        if 0 < lo <= hi <= 65535:
            return lo, hi
    except (OSError, ValueError):
        pass
    return 32768, 60999


def configured_range(value: str | None = None) -> tuple[int, int] | None:
    """`KF_JUPYTER_PORT_RANGE` ("LO-HI", inclusive) as [lo, hi + 1); None when unset.

    Raises ValueError with what to write when it is set but malformed."""
    raw = os.environ.get(RANGE_ENV, "") if value is None else value
    if not raw.strip():
        return None
    m = re.fullmatch(r"\s*(\d{1,5})\s*-\s*(\d{1,5})\s*", raw)
    if not m or not (1024 <= int(m.group(1)) <= int(m.group(2)) <= 65535):
        raise ValueError(
            f"{RANGE_ENV}={raw!r} is not a port range: write it as LO-HI with "
            "1024 <= LO <= HI <= 65535 (for example 20000-20999), or unset it."
        )
    return int(m.group(1)), int(m.group(2)) + 1


def candidate_range(text: str | None = None) -> tuple[int, int]:
    """Where rendezvous ports are drawn from, [lo, hi): `KF_JUPYTER_PORT_RANGE` when set, else
    the ports outside the ephemeral range."""
    chosen = configured_range() if text is None else None
    if chosen is not None:
        return chosen
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


def _bind_name(name: str) -> socket.socket | None:
    """A Unix socket bound to the abstract `name`, or None when someone holds it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(name)
    except OSError:
        s.close()
        return None
    return s


def _claim(port: int) -> socket.socket | None:
    """The lease of `port` when neither a kernel nor a job's supervisor holds it."""
    lease = _bind_name(_LEASE.format(port=port))
    if lease is None:
        return None
    probe = _bind_name(_HELD.format(port=port))  # a supervisor whose kernel is gone
    if probe is None:
        lease.close()
        return None
    probe.close()
    return lease


class Lease:
    """A port leased machine-wide to one job; `close()` gives it back (so does process exit)."""

    def __init__(self, port: int, sock: socket.socket | None) -> None:
        self.port = port
        self._sock = sock

    def close(self) -> None:
        """Give the port back to the machine."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @property
    def held(self) -> bool:
        """Whether this process still holds the lease."""
        return self._sock is not None


def _draw(lo: int, hi: int) -> Lease | None:
    """A leased port of [lo, hi) that is free now, drawn at random; None if none was found."""
    import random

    rng = random.SystemRandom()
    if hi - lo <= 256:  # a narrow range: every port once, those not handed out lately first
        recent = set(_RECENT)
        order = sorted(rng.sample(range(lo, hi), hi - lo), key=lambda p: p in recent)
    else:
        draws = (rng.randrange(lo, hi) for _ in range(200))
        order = [p for p in draws if p not in _RECENT]
    for port in order:
        lease = _claim(port)
        if lease is None:
            continue
        if _free_everywhere(port):
            _RECENT.append(port)
            return Lease(port, lease)
        lease.close()
    return None


def _who_holds(lo: int, hi: int, most: int = 8) -> str:
    """What holds each port of [lo, hi), for the message of a full range."""
    said = []
    for port in range(lo, min(hi, lo + most)):
        lease = _claim(port)
        if lease is None:
            said.append(f"{port}: a job's")
            continue
        lease.close()
        said.append(f"{port}: {'free' if _free_everywhere(port) else 'in use'}")
    return ", ".join(said) + (", ..." if hi - lo > most else "")


def lease_port(wait: float = RANGE_WAIT_SECONDS) -> Lease:
    """A TCP port free right now, leased to the caller machine-wide (see the module's text).

    In a `KF_JUPYTER_PORT_RANGE` whose ports are all leased it waits up to `wait` seconds for
    one (a job ending gives its port back), then raises OSError saying what to do."""
    import time

    lo, hi = candidate_range()
    if hi > lo:
        narrow = configured_range() is not None
        end = time.monotonic() + (wait if narrow else 0)
        while True:
            lease = _draw(lo, hi)
            if lease is not None:
                return lease
            if time.monotonic() >= end:
                break
            time.sleep(0.05)
        if narrow:
            raise OSError(
                f"No port of {RANGE_ENV} ({lo}-{hi - 1}) is free: other jobs or programs hold "
                f"them all ({_who_holds(lo, hi)}). Widen the range, or wait for a job to end."
            )
    for _ in range(50):  # no room outside the ephemeral range: the kernel's choice, leased
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        lease = _claim(port)
        if lease is not None:
            _RECENT.append(port)
            return Lease(port, lease)
    raise OSError("no free TCP port could be leased on this machine")


def free_port() -> int:
    """A port free right now, outside the ephemeral range, not recently handed out here (not
    leased: for a preview; a job takes `lease_port()`)."""
    lease = lease_port()
    lease.close()
    return lease.port


def held_by_supervisor(port: int) -> bool:
    """Whether a job's supervisor holds `port` (its kernel may then give its lease back)."""
    probe = _bind_name(_HELD.format(port=port))
    if probe is None:
        return True
    probe.close()
    return False


def hold(port: int) -> socket.socket | None:
    """The job supervisor's hold on its port (the second name), kept until the supervisor
    exits; None when it cannot be had (the port is then held by its kernel alone)."""
    return _bind_name(_HELD.format(port=port))


_TAKEN = re.compile(
    r"EADDRINUSE|Address already in use|Errno 98\b|address is already in use", re.IGNORECASE
)


def taken_port_message(port: int, texts: dict[str, str]) -> str | None:
    """When a process of the job failed because its rendezvous `port` was taken (a line that
    says EADDRINUSE and names the port), the one-sentence cause; else None."""
    digits = re.compile(rf"(?<!\d){port}(?!\d)")
    for name, text in texts.items():
        for line in text.splitlines()[-400:]:
            if _TAKEN.search(line) and digits.search(line):
                return (
                    f"The job's rendezvous port {port} was taken by another program on this "
                    f"machine before the job could listen on it ({name}: {line.strip()[:300]}). "
                    "Nothing in your code failed: run the job again, it gets another port."
                )
    return None
