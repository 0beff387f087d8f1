"""Secrets never leak: a canary given as a Secret reference and as index-URL credentials is
looked for in everything the tool prints, writes or sends to the browser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import comm
import pytest
from IPython.core.interactiveshell import InteractiveShell

from kf_jupyter import RuntimeConfig, SecretRef, TrainerClient, ValidationError
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.magics.core import KubeflowMagics
from kf_jupyter.trainers import MPITrainer

TOKEN = "canary-tok-7f3a9e"
PASSWORD = "canary-pw-51c0d2"
INDEX = f"https://bob:{PASSWORD}@127.0.0.1:9/simple"
CANARIES = (TOKEN.encode(), PASSWORD.encode())


class RecordingComm(comm.base_comm.BaseComm):
    """Keeps every message a widget would send to the browser."""

    sent: ClassVar[list[str]] = []

    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        RecordingComm.sent.append(json.dumps(data or {}, default=str))


def leaks(blob: bytes | str) -> list[str]:
    data = blob.encode() if isinstance(blob, str) else blob
    return [c.decode() for c in CANARIES if c in data]


def job_fn() -> int:
    import os

    token = os.environ["KFJ_CANARY_TOKEN"]
    print("token length", len(token))  # the job uses the secret but does not print it
    return len(token)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.setenv("KFJ_CANARY_TOKEN", TOKEN)  # where the local backend resolves the SecretRef
    RecordingComm.sent = []
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm(*a, **k))
    # the notebook's folder (shipped as the workspace): not this repository, whose test files
    # hold the canaries themselves
    (tmp_path / "notebook").mkdir()
    monkeypatch.chdir(tmp_path / "notebook")
    return tmp_path


def config() -> RuntimeConfig:
    # numpy is installed already, so nothing is fetched from the (unreachable) index.
    return RuntimeConfig(
        packages_to_install=["numpy"],
        pip_index_urls=[INDEX],
        env={"KFJ_CANARY_TOKEN": SecretRef("hf", "token")},
    )


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="Secret canary: job store, logs, dry runs, magics output, widget messages, errors",
    area="hostile",
    tries=1,
)
def test_canary_appears_nowhere(env: Path, capsys) -> None:
    client = TrainerClient(LocalBackendConfig(state_dir=env / "state"))
    trainer = MPITrainer(func=job_fn, num_proc_per_node=1)

    # Python API: repr, dry run, the job itself, its logs, events and listing.
    printed = [repr(config())]
    printed.append(json.dumps(client.dry_run(trainer, runtime_config=config()), default=str))
    name = client.train(trainer, runtime_config=config())
    job = client.wait_for_job_status(name, timeout=120)
    assert client.get_job_result(name) == len(TOKEN)  # the secret did reach the job
    printed += list(client.get_job_logs(name))
    printed += [json.dumps(e.to_dict()) for e in client.get_job_events(name)]
    printed.append(json.dumps(job.to_dict()))

    # Errors that involve the credentials.
    for bad in (f"https://bob:{PASSWORD}@host with space/simple", f"ftp://bob:{PASSWORD}@h/x"):
        with pytest.raises(ValidationError) as info:
            RuntimeConfig(pip_index_urls=[bad])
        printed.append(str(info.value))

    # The magics: dry runs (local plan and TrainJob YAML), a run with its monitor widget.
    sh = InteractiveShell.instance()
    magics = KubeflowMagics(shell=sh)
    magics.widgets = "on"
    sh.register_magics(magics)
    sh.user_ns["rc"] = config()
    cell = "import os\nprint('len', len(os.environ['KFJ_CANARY_TOKEN']))\n"
    for line in (
        "mpitrain -p 1 --config rc --dry-run",
        "mpitrain -p 1 --config rc --dry-run --backend kubernetes --runtime deepspeed-distributed",
        "mpitrain -p 1 --config rc --name canary-run",
    ):
        sh.run_cell(f"%%{line}\n{cell}")
    sh.run_line_magic("kf_jobs", "")
    sh.run_line_magic("kf_logs", "canary-run")
    out = capsys.readouterr()
    printed += [out.out, out.err]
    assert "len 17" in out.out or any("len 17" in m for m in RecordingComm.sent), out

    assert not [p[:300] for p in printed if leaks(p)], "a canary was printed"
    assert RecordingComm.sent, "the monitor widget sent nothing"
    assert not leaks("\n".join(RecordingComm.sent)), "a canary reached widget state"
    for path in (env / "state").rglob("*"):
        if path.is_file():
            assert not leaks(path.read_bytes()), f"a canary was written to {path}"
    for j in client.list_jobs():
        client.delete_job(j.name)
