"""This machine's GPUs for local jobs: discovery, usage, and the store-wide allocator.

Standard library only: the supervisor loads this file by path (see supervisor._load_sibling).

- Discovery and usage ask `nvidia-smi` (`--query-gpu=... --format=csv,noheader,nounits`), in a
  child process: neither the kernel nor a warm pool ever loads a driver library or initialises
  CUDA to learn what is there (docs/local-backend.md, "GPUs").
- The allocator keeps `<state>/gpus/allocations.json` under an `fcntl` lock in the same folder,
  so concurrent jobs from any kernel (or the server extension) never get the same device. Each
  entry names the job, its node and the supervisor that holds it (pid and creation time). An
  entry whose supervisor is gone is reclaimed by the next allocation, once none of that job's
  recorded processes is alive any more (a crashed supervisor's ranks may still run on the device
  until `delete_job` stops them).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

QUERY_FIELDS = "index,uuid,name,memory.total"
USAGE_FIELDS = "uuid,utilization.gpu,memory.used,memory.total"
SMI_TIMEOUT_SECONDS = 15.0
ALLOCATIONS = "allocations.json"
#: NCCL settings for one host (the job's own environment wins): every emulated node is on
#: 127.0.0.1, so NCCL's bootstrap and socket transport use the loopback interface (it would
#: otherwise pick the first non-loopback interface, a VPN or docker bridge on many workstations),
#: and InfiniBand is not probed (ranks on one host talk through P2P/shared memory).
NCCL_DEFAULTS: dict[str, str] = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}


class GPUQueryError(Exception):
    """nvidia-smi is there but could not list the devices (no driver loaded, ...)."""


def smi_path(env: Mapping[str, str] | None = None) -> str | None:
    """The `nvidia-smi` on PATH (the given environment's, else this process's)."""
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    return shutil.which("nvidia-smi", path=path)


def _smi(fields: str, env: Mapping[str, str] | None) -> list[list[str]]:
    exe = smi_path(env)
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=SMI_TIMEOUT_SECONDS,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GPUQueryError(f"{exe} could not be run: {exc}") from None
    if out.returncode != 0:
        said = " ".join((out.stdout + out.stderr).split())[:300]
        raise GPUQueryError(f"{exe} failed (exit code {out.returncode}): {said}")
    return [
        [cell.strip() for cell in line.split(",")]
        for line in out.stdout.splitlines()
        if line.strip()
    ]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def discover(env: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The GPUs nvidia-smi lists: [{index, uuid, name, memory_mib}] in index order ([] if no
    nvidia-smi). Raises GPUQueryError if nvidia-smi is there and fails."""
    devices = []
    for row in _smi(QUERY_FIELDS, env):
        if len(row) < 4 or not row[1]:
            continue
        mem = _number(row[-1])
        devices.append(
            {
                "index": int(row[0]) if row[0].isdigit() else len(devices),
                "uuid": row[1],
                # A name may hold a comma: everything between the uuid and the memory.
                "name": ", ".join(row[2:-1]),
                "memory_mib": int(mem) if mem is not None else None,
            }
        )
    return sorted(devices, key=lambda d: d["index"])


def usage(
    uuids: Sequence[str], env: Mapping[str, str] | None = None
) -> dict[str, dict[str, float | None]]:
    """{uuid: {utilization (%), memory_used_mib, memory_total_mib}} of these devices, now."""
    wanted = set(uuids)
    out: dict[str, dict[str, float | None]] = {}
    for row in _smi(USAGE_FIELDS, env):
        if len(row) >= 4 and row[0] in wanted:
            out[row[0]] = {
                "utilization": _number(row[1]),
                "memory_used_mib": _number(row[2]),
                "memory_total_mib": _number(row[3]),
            }
    return out


def device_label(dev: Mapping[str, Any]) -> str:
    """`GPU 2 (NVIDIA A100, GPU-1a2b3c4d)`: index, name and the start of the UUID."""
    uuid = str(dev.get("uuid", ""))
    short = uuid[:12] if uuid.startswith("GPU-") else uuid[:8]
    name = f"{dev.get('name')}, " if dev.get("name") else ""
    return f"GPU {dev.get('index')} ({name}{short})"


def plan_text(plan: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """`node-0: GPU 0, 1 · node-1: GPU 2, 3` (indexes of each node's devices)."""
    return " · ".join(
        f"{node}: GPU {', '.join(str(d.get('index')) for d in devs)}"
        for node, devs in plan.items()
        if devs
    )


# ----------------------------------------------------------------------------- the allocator


def store_dir(state_dir: str) -> str:
    """The allocator's owner-only folder in the state directory."""
    path = os.path.join(state_dir, "gpus")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(state_dir: str) -> Iterator[str]:
    d = store_dir(state_dir)
    fd = os.open(os.path.join(d, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield os.path.join(d, ALLOCATIONS)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read(path: str) -> dict[str, dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def _write(path: str, data: Mapping[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


Alive = Callable[[int, Any], bool]


def _job_processes_alive(state_dir: str, job: str, alive: Alive) -> bool:
    """Some process the job's status.json records (nodes, their descendants) is still alive."""
    try:
        with open(os.path.join(state_dir, "jobs", job, "status.json"), encoding="utf-8") as fh:
            st = json.load(fh)
    except (OSError, ValueError):
        return False
    known = [(p.get("pid"), p.get("create_time")) for p in (st.get("processes") or {}).values()]
    known += [tuple(d) for d in st.get("descendants") or [] if len(d) == 2]
    return any(pid and alive(int(pid), ct) for pid, ct in known)


def _reclaim(state_dir: str, data: dict[str, dict[str, Any]], alive: Alive) -> bool:
    """Drop entries whose supervisor and processes are gone; True if any was dropped."""
    dropped = False
    verdict: dict[tuple[Any, Any], bool] = {}
    for uuid, entry in list(data.items()):
        key = (entry.get("owner_pid"), entry.get("owner_create_time"))
        if key not in verdict:
            pid = entry.get("owner_pid")
            verdict[key] = bool(pid) and alive(int(pid), entry.get("owner_create_time"))
            if not verdict[key]:
                verdict[key] = _job_processes_alive(state_dir, str(entry.get("job")), alive)
        if not verdict[key]:
            del data[uuid]
            dropped = True
    return dropped


def holders(data: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The jobs holding devices, sorted."""
    return sorted({str(e.get("job")) for e in data.values()})


def allocate(
    state_dir: str,
    job: str,
    requests: Mapping[str, int],
    inventory: Sequence[Mapping[str, Any]],
    owner: tuple[int, float | None],
    alive: Alive,
) -> tuple[dict[str, list[dict[str, Any]]] | None, int, list[str]]:
    """Give each process of `requests` ({process name: devices}) its own free devices.

    Returns (plan, free, holders): the plan ({process: [device]}, devices in index order) when
    there were enough free devices, else None and how many are free and which jobs hold the
    others. Devices this job already held (a resumed job) are given back first.
    """
    need = sum(requests.values())
    with _locked(state_dir) as path:
        data = _read(path)
        changed = _reclaim(state_dir, data, alive)
        for uuid in [u for u, e in data.items() if e.get("job") == job]:
            del data[uuid]
            changed = True
        free = [d for d in inventory if d["uuid"] not in data]
        if need > len(free):
            if changed:
                _write(path, data)
            return None, len(free), holders(data)
        plan: dict[str, list[dict[str, Any]]] = {}
        it = iter(free)
        now = time.time()
        for proc, k in requests.items():
            plan[proc] = [dict(next(it)) for _ in range(k)]
            for dev in plan[proc]:
                data[dev["uuid"]] = {
                    "job": job,
                    "process": proc,
                    "owner_pid": owner[0],
                    "owner_create_time": owner[1],
                    "since": now,
                }
        _write(path, data)
        return plan, len(free) - need, holders(data)


def release(state_dir: str, job: str, owner_pid: int | None = None) -> int:
    """Free the devices `job` holds (only those its supervisor `owner_pid` took, if given)."""
    if not os.path.isdir(os.path.join(state_dir, "gpus")):
        return 0
    with _locked(state_dir) as path:
        data = _read(path)
        mine = [
            u
            for u, e in data.items()
            if e.get("job") == job and (owner_pid is None or e.get("owner_pid") == owner_pid)
        ]
        for uuid in mine:
            del data[uuid]
        if mine:
            _write(path, data)
        return len(mine)


def allocations(state_dir: str, alive: Alive | None = None) -> dict[str, dict[str, Any]]:
    """{uuid: entry} held now (stale entries reclaimed first when `alive` is given)."""
    if not os.path.isdir(os.path.join(state_dir, "gpus")):
        return {}
    with _locked(state_dir) as path:
        data = _read(path)
        if alive is not None and _reclaim(state_dir, data, alive):
            _write(path, data)
        return data


def waiting_message(need: int, free: int, held_by: Sequence[str]) -> str:
    """`waiting for 2 GPUs, 1 free (the others are held by job a)`."""
    noun = "GPU" if need == 1 else "GPUs"
    text = f"waiting for {need} {noun}, {free} free"
    if held_by:
        jobs = ", ".join(held_by[:5]) + (" ..." if len(held_by) > 5 else "")
        text += f" (the others are held by job{'s' if len(held_by) > 1 else ''} {jobs})"
    return text
