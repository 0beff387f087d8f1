"""The local job store is owner-only whatever the umask (issue 13, item 7).

Specs, plain `RuntimeConfig.env` values and logs live in the store, so every folder in it is 0700
and every file kf-jupyter, its supervisor or the ranks' runner writes there is 0600, with the
umask at 000; a store left 0755/0644 by an older version is tightened on first use. Files the
job's own code writes (its TMPDIR, `tmp/`) keep the user's umask, inside a 0700 folder.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_jupyter import RuntimeConfig, TorchTrainer
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.client import TrainerClient

from .test_pip_prelude import index  # noqa: F401

pytestmark = pytest.mark.slow


def writes_in_tmpdir():
    import os
    import tempfile

    with open(os.path.join(tempfile.gettempdir(), "user-file"), "w") as fh:
        fh.write("the job's own file\n")
    print("rank says hello", flush=True)
    return {"rank": int(os.environ.get("RANK", "0"))}


@pytest.fixture
def umask_000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _modes(state: Path) -> dict[str, int]:
    """Mode of every entry under the store, except the job's own tmp/ contents."""
    out = {}
    for path in [state, *state.rglob("*")]:
        rel = path.relative_to(state)
        if len(rel.parts) > 3 and rel.parts[0] == "jobs" and rel.parts[2] == "tmp":
            continue
        try:
            out[str(rel)] = stat.S_IMODE(path.lstat().st_mode)
        except FileNotFoundError:  # renamed or removed under the walk (a pool's meta rewrite)
            continue
    return out


def _not_private(state: Path) -> list[str]:
    bad = []
    for rel, mode in _modes(state).items():
        # Folders are 0700, files 0600; the warm pool's two shim programs 0700 (or 0600 once
        # an old store was tightened: the next job sets the exec bit again).
        want = 0o700 if (state / rel).is_dir() else 0o600
        if rel.startswith("warm/bin/") and mode in (0o700, 0o600):
            continue
        if "/workspace/" in rel and mode == 0o700:  # the notebook's executables stay executable
            want = 0o700
        if mode != want:
            bad.append(f"{rel}: {oct(mode)} (want {oct(want)})")
    return bad


@pytest.mark.reliability(
    scenario="umask 000, a 2-rank torchrun job with env values and a result: every folder of the "
    "job store is 0700 and every file kf-jupyter, the supervisor or the ranks write is 0600",
    area="local",
    tries=1,
)
def test_job_store_is_owner_only_with_umask_000(tmp_path, umask_000) -> None:
    state = tmp_path / "state"
    client = TrainerClient(LocalBackendConfig(state_dir=state))
    rc = RuntimeConfig(env={"PLAIN_VALUE": "not for other users"})
    name = client.train(TorchTrainer(func=writes_in_tmpdir, num_proc_per_node=2), runtime_config=rc)
    client.wait_for_job_status(name, timeout=180)
    assert client.get_job_result(name) == {"rank": 0}
    jd = state / "jobs" / name
    # An ended job holds no file of its supervisor's: the walk below once met `.reserve`
    # vanishing under it (removed after the end was written).
    assert not (jd / ".reserve").exists()
    assert (jd / "logs" / "rank-1.log").is_file()  # the ranks' own logs are checked too
    assert (jd / "events.jsonl").is_file() and (jd / "result.pkl").is_file()
    user_file = jd / "tmp" / "user-file"
    assert stat.S_IMODE(user_file.stat().st_mode) == 0o666  # the job keeps the user's umask
    assert not _not_private(state), _not_private(state)
    client.delete_job(name)


@pytest.mark.reliability(
    scenario="a job store left 0755/0644 by an older version: tightened to 0700/0600 on first use",
    area="local",
    tries=1,
)
def test_existing_open_store_is_tightened_on_first_use(tmp_path) -> None:
    state = tmp_path / "state"
    client = TrainerClient(LocalBackendConfig(state_dir=state))
    name = client.train(TorchTrainer(func=writes_in_tmpdir))
    client.wait_for_job_status(name, timeout=180)
    # What an older kf-jupyter left behind: world-readable folders and files, no marker.
    (state / ".private-v1").unlink(missing_ok=True)
    for path in [state, *state.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
        else:
            path.chmod(0o644)
    again = TrainerClient(LocalBackendConfig(state_dir=state))
    assert [j.name for j in again.list_jobs()] == [name]
    bad = [b for b in _not_private(state) if "/tmp/" not in b]
    assert not bad, bad


@pytest.mark.reliability(
    scenario="umask 000, a layered package environment built in the store (venv, pip, pip's "
    "log, lock, torchrun shim): nothing in it readable by group or others",
    area="local",
    tries=1,
)
def test_layered_env_is_owner_only_with_umask_000(tmp_path, index, umask_000) -> None:  # noqa: F811
    import sys

    from kf_jupyter.backends.local.envs import layered_env

    envs = tmp_path / "state" / "envs"
    python = layered_env(sys.executable, ["kfj-demo-a"], [f"{index}/simple"], envs)
    assert python.exists()
    open_to_others = [
        f"{p.relative_to(envs)}: {oct(stat.S_IMODE(p.lstat().st_mode))}"
        for p in [envs, *envs.rglob("*")]
        if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077
    ]
    assert not open_to_others, open_to_others[:10]
