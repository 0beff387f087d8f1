"""Warm for real training code (issue 34): a first job never waits for a pool that is still
importing, and the pool learns the modules its jobs import (torch._dynamo for an optimizer) so
that the next warm ranks find them imported, while seeing what cold ranks see.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer, TorchTrainer
from kf_jupyter.backends.local.warm import pool as warm_pool
from kf_jupyter.config import RuntimeConfig

from .test_local_support import client_fixture  # noqa: F401
from .test_warm import _run_dump, _wait_all_ready, _wait_ready, dump_world

pytestmark = pytest.mark.slow


def jax_sum():
    import os

    import jax.numpy as jnp

    return float(jnp.ones(2).sum()) + int(os.environ.get("JAX_PROCESS_ID", "0"))


def _blocked_pool_site(tmp_path: Path) -> tuple[Path, Path]:
    """A sitecustomize that holds every pool process in its imports until `flag` exists (a
    pool importing for as long as the test wants, as on a loaded machine); jobs' ranks pass."""
    site = tmp_path / "slowsite"
    site.mkdir()
    flag = tmp_path / "release-the-pool"
    (site / "sitecustomize.py").write_text(
        "import os, sys, time\n"
        "if any(a.endswith('zygote.py') for a in sys.orig_argv):\n"
        f"    while not os.path.exists({str(flag)!r}):\n"
        "        time.sleep(0.05)\n"
    )
    return site, flag


def test_a_first_job_never_waits_for_a_pool_that_is_still_importing(client, tmp_path):
    """A first 2-node JAX job in a fresh state folder, whose pool cannot finish importing until
    the test lets it: the job completes cold, saying why, without waiting for the pool; once
    the pool is ready the next job starts warm from it."""
    site, flag = _blocked_pool_site(tmp_path)
    rc = RuntimeConfig(env={"PYTHONPATH": str(site)})
    try:
        start = time.monotonic()
        name = client.train(JAXTrainer(func=jax_sum, num_nodes=2), runtime_config=rc)
        job = client.wait_for_job_status(name, timeout=240)
        took = time.monotonic() - start
        assert job.status == "Complete" and job.warm is False, client.get_job_events(name)
        assert client.get_job_result(name) == 2.0
        cold = [e.message for e in client.get_job_events(name) if e.reason == "ColdStart"]
        assert len(cold) == 2 and all("rather than wait" in m for m in cold), cold
        pools = warm_pool.list_pools(client.backend.state_dir)
        assert [p["state"] for p in pools] == ["starting"], (pools, took)  # still importing
    finally:
        flag.write_text("go")
    _wait_all_ready(client)
    name = client.train(JAXTrainer(func=jax_sum, num_nodes=2), runtime_config=rc)
    job = client.wait_for_job_status(name, timeout=240)
    assert job.status == "Complete" and job.warm is True, client.get_job_events(name)


def sgd_step(out_dir=None):
    """One DDP step with a real optimizer (the first `SGD(...)` imports torch._dynamo)."""
    import json
    import os
    import sys

    preloaded = "torch._dynamo" in sys.modules
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.ones(8, 4)).sum()
    loss.backward()
    opt.step()
    del model, opt  # DDP goes before its process group (as the quickstart does)
    dist.destroy_process_group()
    if out_dir:
        with open(os.path.join(out_dir, f"{os.environ['RANK']}.json"), "w") as fh:
            json.dump({"preloaded": preloaded}, fh)
    return float(loss)


def uses_colorsys():
    """Imports a small standard-library module the pool does not have: the pool learns it."""
    import colorsys

    return [colorsys.__name__, getattr(colorsys, "MINE", "stdlib")]


def _pool_learned(client: Any, name: str, timeout: float = 300) -> dict[str, Any]:
    """The running torch pool once it has imported the learned module `name`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for p in warm_pool.list_pools(client.backend.state_dir):
            meta = warm_pool._read_meta(Path(p["meta_path"])) or {}
            if p.get("alive") and p["state"] == "ready" and name in (meta.get("learned") or []):
                return p
        time.sleep(0.1)
    raise AssertionError(
        f"no pool imported {name} in {timeout} s: {warm_pool.list_pools(client.backend.state_dir)}"
    )


def _differences(cold: dict[str, Any], warm: dict[str, Any]) -> list[Any]:
    """What differs between the cold and warm records, per rank and field (env by variable)."""
    out: list[Any] = []
    for rank in sorted(set(cold) | set(warm)):
        c, w = cold.get(rank, {}), warm.get(rank, {})
        for field in sorted(set(c) | set(w)):
            if field == "env":
                ce, we = c.get("env", {}), w.get("env", {})
                out += [(rank, k, ce.get(k), we.get(k)) for k in sorted(set(ce) | set(we))
                        if ce.get(k) != we.get(k)]  # fmt: skip
            elif c.get(field) != w.get(field):
                out.append((rank, field, c.get(field), w.get(field)))
    return out


def test_the_pool_learns_torch_dynamo_from_an_optimizer_step(client, tmp_path):
    """A warm DDP job with an SGD step imports torch._dynamo in its ranks; the pool records it
    (from which job), imports it once idle, and the next job's ranks find it imported. Their
    environment, argv, cwd and sys.path still match a cold run's."""
    _wait_ready(client, "torch")
    trainer = lambda **kw: TorchTrainer(num_nodes=1, num_proc_per_node=2, **kw)  # noqa: E731
    first = client.train(trainer(func=sgd_step))
    job = client.wait_for_job_status(first, timeout=300)
    assert job.status == "Complete" and job.warm is True, client.get_job_events(first)
    pool = _pool_learned(client, "torch._dynamo")
    assert pool["learned"]["modules"]["torch._dynamo"]["job"] == first
    out = tmp_path / "again"
    out.mkdir()
    name = client.train(trainer(func=sgd_step, func_args={"out_dir": str(out)}))
    job = client.wait_for_job_status(name, timeout=300)
    assert job.status == "Complete" and job.warm is True, client.get_job_events(name)
    seen = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert seen == {"0": {"preloaded": True}, "1": {"preloaded": True}}, seen
    make = lambda **kw: trainer(func=dump_world, **kw)  # noqa: E731
    _, cold = _run_dump(client, make, tmp_path, warm=False)
    _, warm = _run_dump(client, make, tmp_path, warm=True)
    assert cold == warm and len(cold) == 2, _differences(cold, warm)
    from kf_jupyter.magics.render import pool_learned_lines

    lines = "\n".join(pool_learned_lines(warm_pool.list_pools(client.backend.state_dir)))
    assert f"learned from job {first}: " in lines and "torch._dynamo (" in lines, lines


def test_a_learned_module_never_shadows_the_users_own(client, tmp_path, monkeypatch):
    """Once the pool has learned `colorsys`, a job whose folder has its own `colorsys.py`
    runs cold (and imports the user's module), saying why; a job without one runs warm."""
    _wait_ready(client, "torch")
    trainer = lambda **kw: TorchTrainer(num_nodes=1, num_proc_per_node=1, **kw)  # noqa: E731
    first = client.train(trainer(func=uses_colorsys))
    assert client.wait_for_job_status(first, timeout=300).warm is True
    _pool_learned(client, "colorsys")
    name = client.train(trainer(func=uses_colorsys))
    assert client.wait_for_job_status(name, timeout=300).warm is True
    assert client.get_job_result(name) == ["colorsys", "stdlib"]
    nb = tmp_path / "notebook"
    nb.mkdir()
    (nb / "colorsys.py").write_text("MINE = 'the user'\n")
    monkeypatch.chdir(nb)
    name = client.train(trainer(func=uses_colorsys))
    job = client.wait_for_job_status(name, timeout=300)
    assert job.warm is False, client.get_job_events(name)
    assert client.get_job_result(name) == ["colorsys", "the user"]
    cold = [e.message for e in client.get_job_events(name) if e.reason == "ColdStart"]
    assert any("colorsys.py" in m and "has the name of module" in m for m in cold), cold
