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
from kf_jupyter.options import Warm

from .test_local_support import client_fixture  # noqa: F401
from .test_warm import _normalize, _wait_all_ready, dump_world

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
