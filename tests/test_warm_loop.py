"""The iteration loop's warm-pool rules (issue 21) that need no framework import: which pool a
job's launcher maps to, and why a job starts cold. The real warm runs are in test_warm.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from kf_jupyter.backends.local.envs import TORCHRUN_WRAPPER
from kf_jupyter.backends.local.warm import pool as warm_pool
from tests.magic_shell import line_magic_output


def _bin(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    path = d / "torchrun"
    path.write_text(text)
    path.chmod(0o700)
    return d


def test_a_layered_envs_torchrun_wrapper_maps_to_its_python(tmp_path):
    python = str(tmp_path / "env" / "bin" / "python")
    d = _bin(tmp_path, TORCHRUN_WRAPPER.format(python=python))
    assert warm_pool.interpreter_for("torchrun", [str(d)]) == python


def test_any_other_shell_script_stays_unknown(tmp_path):
    python = str(tmp_path / "env" / "bin" / "python")
    for text in (
        TORCHRUN_WRAPPER.format(python=python) + "echo more\n",
        TORCHRUN_WRAPPER.format(python=python).replace("torch.distributed.run", "other.mod"),
        TORCHRUN_WRAPPER.format(python="python3"),  # not a path: PATH decides, not us
        "#!/bin/sh\nexec python -m torch.distributed.run\n",
    ):
        d = _bin(tmp_path, text)
        assert warm_pool.interpreter_for("torchrun", [str(d)]) is None, text


def test_a_python_shebang_still_maps_to_its_interpreter(tmp_path):
    d = _bin(tmp_path, f"#!{sys.executable}\nimport sys\n")
    assert warm_pool.interpreter_for("torchrun", [str(d)]) == sys.executable
    assert os.access(d / "torchrun", os.X_OK)


def _start_bare_pool(state: Path, key: str) -> Path:
    """A real pool process (zygote.py) that preloads nothing: fast to start, same bookkeeping."""
    import subprocess
    import time

    d = warm_pool.warm_dir(state)
    meta = d / f"{key}.json"
    sock = warm_pool.socket_dir() / f"t{os.getpid()}-{key}.sock"
    subprocess.Popen(
        [
            sys.executable,
            str(Path(warm_pool.__file__).parent / "zygote.py"),
            str(sock),
            str(meta),
            "",
            str(os.getpid()),
            "none",
            "60",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    end = time.monotonic() + 60
    while time.monotonic() < end:
        info = warm_pool._read_meta(meta) or {}
        if info.get("state") == "ready":
            return meta
        time.sleep(0.05)
    raise AssertionError("the bare pool did not become ready")


def test_the_memory_cap_stops_the_least_recently_used_pools(tmp_path):
    import time

    state = tmp_path / "state"
    old = _start_bare_pool(state, "torch-0000000000000001")
    time.sleep(0.05)
    new = _start_bare_pool(state, "torch-0000000000000002")
    os.utime(old, (time.time() - 100, time.time() - 100))  # used longest ago
    try:
        pools = {p["key"]: p for p in warm_pool.list_pools(state)}
        assert all(p["alive"] for p in pools.values()) and len(pools) == 2
        one = max(warm_pool.pool_bytes(p) for p in pools.values())
        assert one > 0
        # Room for one pool's memory only: the older one goes, the newer one stays.
        warm_pool._make_room(warm_pool.warm_dir(state), keep=5, max_bytes=one * 1.5)
        left = [p["key"] for p in warm_pool.list_pools(state) if p["alive"]]
        assert left == ["torch-0000000000000002"], left
        assert not old.exists() and new.exists()
    finally:
        warm_pool.stop_all(state)


def test_kf_pool_says_why_jobs_started_cold(tmp_path, monkeypatch, capsys):
    from kf_jupyter import JAXTrainer, TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.options import Warm

    state = tmp_path / "state"
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(state))
    client = TrainerClient(LocalBackendConfig(state_dir=str(state)))

    def f():
        return 1

    name = client.train(JAXTrainer(func=f, initialize_distributed=False), options=[Warm(False)])
    client.wait_for_job_status(name, timeout=120)
    out = line_magic_output(capsys, "kf_pool")
    assert "Recent cold starts" in out and name in out, out
    assert "warm starts are off for this job (Warm(False))" in out, out
    assert "MiB together" in out
    client.delete_job(name)


def test_a_start_ahead_never_stops_a_pool_to_make_room(tmp_path):
    """A pool started ahead of need (`%load_ext`) fits under the caps beside the pools that run
    or is not started; a job's own start still makes room (least recently used first).
    Failed before: `prestart_pool` stopped the older pool for a pool no job had asked for."""
    from kf_jupyter import TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig

    state = tmp_path / "state"
    running = _start_bare_pool(state, "xgboost-0000000000000001")
    try:
        one_pool = LocalBackendConfig(state_dir=str(state), warm_max_pools=1)
        backend = TrainerClient(one_pool).backend
        assert backend.prestart_pool("xgboost", make_room=False) is None
        assert running.exists()
        alive = [p["key"] for p in warm_pool.list_pools(state) if p["alive"]]
        assert alive == ["xgboost-0000000000000001"], alive
        # Under the memory cap too: room for what runs, not for one more pool.
        held = sum(warm_pool.pool_bytes(p) for p in warm_pool.list_pools(state)) / 2**20
        tight = LocalBackendConfig(state_dir=str(state), warm_max_memory_mib=held + 10)
        assert TrainerClient(tight).backend.prestart_pool("xgboost", make_room=False) is None
        assert running.exists()
        assert not warm_pool.has_room(state, "xgboost", 3, held + 10)
        assert warm_pool.has_room(state, "xgboost", 3, held + 1000)
    finally:
        warm_pool.stop_all(state)


def test_a_bad_launch_request_is_answered_and_the_pool_keeps_serving(tmp_path):
    """A connection whose first message is not a whole length-prefixed header (closed before it,
    cut short, or longer than the pool reads) gets `warm: false` and the reason, and the pool
    stays ready for the next launch: the shim then starts the job cold and says why."""
    import json
    import socket
    import struct

    state = tmp_path / "state"
    meta = _start_bare_pool(state, "torch-0000000000000003")

    def reply(payload: bytes) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(json.loads(meta.read_text())["socket"])
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
            return json.loads(conn.makefile("rb").readline())

    try:
        too_large = struct.pack("!I", 64 * 1024 * 1024) + b"{}"
        cases = {
            b"": "bad launch request (short header)",
            struct.pack("!I", 100) + b'{"mode": ': "bad launch request (truncated header)",
            too_large: "bad launch request (header too large)",
        }
        for payload, why in cases.items():
            assert reply(payload) == {"warm": False, "why": why}
        assert (warm_pool._read_meta(meta) or {}).get("state") == "ready"
        assert reply(b"")["why"] == "bad launch request (short header)"
    finally:
        warm_pool.stop_all(state)


def test_config_reaches_every_warm_setting_and_kf_pool_says_how(tmp_path, monkeypatch, capsys):
    """`%config KubeflowMagics.warm_idle_seconds/warm_max_pools/warm_max_memory_mib` reach the
    local backend the magics use (issue 34: only `warm` and `warm_prestart` did, so a notebook
    under a 2 GiB limit could not lower the 4 GiB cap), and `%kf_pool` says so."""
    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.magics.core import KubeflowMagics

    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    sh = InteractiveShell.instance()
    sh.config.pop("KubeflowMagics", None)
    magics = KubeflowMagics(shell=sh)
    sh.register_magics(magics)
    try:
        sh.run_line_magic("config", "KubeflowMagics.warm_idle_seconds = 1800")
        sh.run_line_magic("config", "KubeflowMagics.warm_max_pools = 1")
        sh.run_line_magic("config", "KubeflowMagics.warm_max_memory_mib = 300")
        config = magics.client("local").backend.config
        assert (config.warm_idle_seconds, config.warm_max_pools, config.warm_max_memory_mib) == (
            1800,
            1,
            300,
        )
        capsys.readouterr()
        sh.run_line_magic("kf_pool", "")
        out = capsys.readouterr().out
        cap = warm_pool.effective_max_memory_mib(300)  # lower under a small container limit
        assert "end after 1800 s idle" in out and f"at most 1 of them holding {cap:.0f} MiB" in out
        for name in ("warm_idle_seconds", "warm_max_pools", "warm_max_memory_mib"):
            assert f"%config KubeflowMagics.{name} = " in out
        assert "%kf_pool --stop" in out
    finally:
        sh.config.pop("KubeflowMagics", None)
        warm_pool.stop_all(tmp_path / "state")
