"""Warm ranks are as fresh as cold ones (issue 20, Low): resource limits and CPU affinity of the
submitting kernel (not the pool's), no file descriptor of the pool, one session and process group
per torch rank (as torchrun gives), and `sys.orig_argv` without an extra `-u`.
"""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer, TorchTrainer
from kf_jupyter.options import Warm

from .test_local_support import client_fixture  # noqa: F401
from .test_warm_orphans import warm_up


def describe(out_dir: str) -> str:
    """What a rank can see of its process: written to out_dir/<rank>.json."""
    import json
    import os
    import resource
    import sys

    rank = os.environ.get("RANK") or os.environ.get("JAX_PROCESS_ID") or "0"
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    pipes = sorted(t for fd, t in fds.items() if int(fd) > 2 and t.startswith("pipe:"))
    record = {
        "orig_argv": [
            a.replace(os.environ.get("KF_JUPYTER_JOB_NAME") or "?", "JOB")
            for a in [os.path.basename(sys.orig_argv[0]), *sys.orig_argv[1:]]
        ],
        "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE)),
        "core": list(resource.getrlimit(resource.RLIMIT_CORE)),
        "affinity": sorted(os.sched_getaffinity(0)),
        "extra_pipes": len(pipes),
        "own_session": os.getsid(0) == os.getpid(),
        "own_group": os.getpgid(0) == os.getpid(),
    }
    with open(os.path.join(out_dir, f"{rank}.json"), "w") as fh:
        json.dump(record, fh)
    return "ok"


def _run(client: Any, make: Any, out: Path, warm: bool) -> dict[str, Any]:
    out.mkdir()
    name = client.train(make(str(out)), options=[] if warm else [Warm(False)])
    job = client.wait_for_job_status(name, timeout=180)
    assert job.warm is warm, [e.message for e in client.get_job_events(name)]
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


SHAPES = {
    "torch": (
        "torch",
        lambda d: TorchTrainer(func=describe, func_args={"out_dir": d}, num_proc_per_node=2),
    ),
    "jax": ("jax", lambda d: JAXTrainer(func=describe, func_args={"out_dir": d}, num_nodes=1)),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_warm_ranks_get_the_kernels_limits_and_affinity_and_nothing_of_the_pool(
    client: Any, tmp_path: Path, shape: str
) -> None:
    _, make = SHAPES[shape]
    (tmp_path / "first").mkdir()
    warm_up(client, make(str(tmp_path / "first")))  # the pool starts with the limits of now
    for leftover in (tmp_path / "first").glob("*.json"):
        leftover.unlink()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    core = resource.getrlimit(resource.RLIMIT_CORE)
    cpus = os.sched_getaffinity(0)
    # ... then the kernel's limits and affinity change (ulimit, taskset): jobs must follow them
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 1537), hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, core[1]))
    os.sched_setaffinity(0, {min(cpus)})
    try:
        cold = _run(client, make, tmp_path / "cold", warm=False)
        warm = _run(client, make, tmp_path / "warm", warm=True)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        resource.setrlimit(resource.RLIMIT_CORE, core)
        os.sched_setaffinity(0, cpus)
    assert sorted(cold) == sorted(warm) and cold
    for rank in cold:
        c, w = cold[rank], warm[rank]
        assert c["nofile"][0] == min(soft, 1537) and c["affinity"] == [min(cpus)]
        for key in ("orig_argv", "nofile", "core", "affinity", "own_session", "own_group"):
            assert w[key] == c[key], (rank, key, c[key], w[key])
        assert w["extra_pipes"] <= c["extra_pipes"], (rank, c, w)
