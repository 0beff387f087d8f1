"""Finished local jobs written through the store's own writers (supervisor.py, index.py).

For the job index's tests and bench/bench_job_list.py: a folder per job with status.json and
events.jsonl as `train()` and the supervisor write them, without running anything.
"""

from __future__ import annotations

import time
from pathlib import Path

from kf_jupyter.backends.local import index as job_index
from kf_jupyter.backends.local import supervisor as sv
from kf_jupyter.types import COMPLETE, CREATED, FAILED


def write_job(state_dir: Path, name: str, created: float | None = None, finish: str = COMPLETE):
    """One job `name` in the store: Created, its node exited, then `finish` ('' leaves it
    Created). Returns the job folder."""
    jobs = Path(state_dir) / "jobs"
    jobs.mkdir(mode=sv.PRIVATE_DIR, parents=True, exist_ok=True)
    jd = jobs / name
    jd.mkdir(mode=sv.PRIVATE_DIR)
    sv.atomic_write_json(
        str(jd / "status.json"),
        {
            "name": name,
            "status": CREATED,
            "reason": "",
            "message": "",
            "created": created if created is not None else time.time(),
            "runtime": "torch-distributed",
            "framework": "torch",
            "policy": "torch",
            "num_nodes": 1,
            "num_proc_per_node": 2,
            "trainer": "TorchTrainer",
            "python": "python3",
            "cwd": str(state_dir),
            "processes": {},
        },
    )
    job_index.note(Path(state_dir), name)
    sv.append_event(str(jd), "Normal", "Created", f"job {name} created", name)
    if not finish:
        return jd
    code = 0 if finish == COMPLETE else 1

    def node(st):
        st["processes"] = {"node-0": {"node_index": 0, "pid": None, "exit_code": code}}
        if finish == FAILED:
            st["failure"] = {
                "source": "Rank 1",
                "exc_type": "RuntimeError",
                "message": f"boom in {name}",
                "traceback": ["  File 'x.py', line 1", "RuntimeError: boom"],
            }

    sv.update_status(str(jd), node)
    reason = "Completed" if finish == COMPLETE else "Error"
    sv.finish_status(str(jd), finish, reason, f"{name}: node-0 exited {code}")
    return jd
