"""Progress (`trainerStatus`, KEP-2779) on the local backend: the job's status endpoint, the
official SDK's `update_trainjob_status`, `kf_jupyter.report` and the runner's shim.

The endpoint is checked against what the Trainer's status server does (pkg/statusserver): the
same path, bearer token, payload and `metav1.Status` errors.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer
from kf_jupyter.backends.local.status_endpoint import StatusEndpoint
from kf_jupyter.progress import eta_text, parse_trainer_status, progress_text

from .test_local_support import client_fixture  # noqa: F401  (the `client` fixture)

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-12-01T10:00:00+00:00"
NOW_Z = "2026-12-01T10:00:00Z"  # as the Trainer's server echoes and stores it (metav1.Time)


@pytest.fixture
def endpoint(tmp_path: Path) -> Any:
    ep = StatusEndpoint(str(tmp_path), "job-x")
    yield ep
    ep.close()


def post(ep: Any, body: Any, token: str | None = "", path: str | None = None) -> tuple[int, Any]:
    """POST to the endpoint as a client would (token '' = the job's own)."""
    url = ep.url if path is None else ep.url.split("/apis/")[0] + path
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token or ep.token}"
    ctx = ssl.create_default_context(cafile=ep.ca_cert) if ep.ca_cert else None
    req = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def stored(ep: Any) -> Any:
    path = Path(ep.job_dir) / "trainer-status.json"
    return json.loads(path.read_text()) if path.exists() else None


def test_the_endpoint_looks_like_the_trainers(endpoint: Any) -> None:
    env = endpoint.env()
    assert env["KUBEFLOW_TRAINER_SERVER_URL"].startswith("https://127.0.0.1:")
    assert env["KUBEFLOW_TRAINER_SERVER_URL"].endswith(
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/local/trainjobs/job-x/status"
    )
    assert Path(env["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read_text() == endpoint.token
    assert os.stat(env["KUBEFLOW_TRAINER_SERVER_TOKEN"]).st_mode & 0o077 == 0  # owner only
    assert "BEGIN CERTIFICATE" in Path(env["KUBEFLOW_TRAINER_SERVER_CA_CERT"]).read_text()
    body = {
        "trainerStatus": {
            "progressPercentage": 45,
            "estimatedRemainingSeconds": 120,
            "metrics": [{"name": "loss", "value": "0.15"}],
            "lastUpdatedTime": NOW,
        }
    }
    code, answer = post(endpoint, body)
    body["trainerStatus"]["lastUpdatedTime"] = NOW_Z
    assert (code, answer) == (200, body)  # 200 with the parsed payload
    ts = parse_trainer_status(stored(endpoint)["trainerStatus"])
    assert ts is not None and ts.progress_percentage == 45 and ts.metrics == {"loss": "0.15"}
    assert progress_text(ts) == "45% · ETA 2m 00s"
    # A later status replaces the whole of it (the Trainer applies it with force ownership).
    code, _ = post(endpoint, {"trainerStatus": {"progressPercentage": 50, "lastUpdatedTime": NOW}})
    assert code == 200
    assert stored(endpoint) == {
        "trainerStatus": {"progressPercentage": 50, "lastUpdatedTime": NOW_Z}
    }


@pytest.mark.parametrize(
    ("token", "body", "code", "reason"),
    [
        (None, {"trainerStatus": {"lastUpdatedTime": NOW}}, 403, "Forbidden"),
        ("not-the-token", {"trainerStatus": {"lastUpdatedTime": NOW}}, 403, "Forbidden"),
        ("", b"{not json", 422, "Invalid"),
        ("", [1, 2], 422, "Invalid"),
        ("", {"trainerStatus": {"progressPercentage": 150, "lastUpdatedTime": NOW}}, 422, "Invalid"),
        ("", {"trainerStatus": {"progressPercentage": "45", "lastUpdatedTime": NOW}}, 422, "Invalid"),
        ("", {"trainerStatus": {"progressPercentage": 45}}, 422, "Invalid"),
        ("", {"trainerStatus": {"lastUpdatedTime": "yesterday"}}, 422, "Invalid"),
        (
            "",
            {"trainerStatus": {"metrics": [{"name": "x" * 65, "value": "1"}], "lastUpdatedTime": NOW}},
            422,
            "Invalid",
        ),
        ("", {"trainerStatus": {"metrics": [{"name": "loss", "value": 0.1}], "lastUpdatedTime": NOW}}, 422, "Invalid"),
        ("", b"{" + b" " * 70000 + b"}", 413, "RequestEntityTooLarge"),
        # Closing with megabytes unread makes the kernel reset the connection: the client
        # must still read the 413 (the body is read out before close, as net/http does).
        ("", b"{" + b" " * 2_000_000 + b"}", 413, "RequestEntityTooLarge"),
    ],
    ids=[
        "no-token", "wrong-token", "not-json", "not-an-object", "progress-over-100",
        "progress-a-string", "no-lastUpdatedTime", "bad-time", "long-metric-name",
        "metric-value-not-a-string", "too-large", "far-too-large",
    ],
)  # fmt: skip
def test_unauthenticated_or_malformed_posts_are_refused(
    endpoint: Any, token: str | None, body: Any, code: int, reason: str
) -> None:
    got, answer = post(endpoint, body, token=token)
    assert got == code
    assert answer["status"] == "Failure" and "kind" not in answer  # as the Trainer encodes it
    assert answer["reason"] == reason and answer["code"] == code and answer["message"]
    assert stored(endpoint) is None  # nothing was recorded


def test_other_paths_and_methods_and_an_empty_update(endpoint: Any) -> None:
    # Another job's path: the job's token is not for it (the Trainer checks the audience).
    other = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/local/trainjobs/other-job/status"
    assert post(endpoint, {"trainerStatus": {"lastUpdatedTime": NOW}}, path=other)[0] == 403
    assert post(endpoint, {"trainerStatus": {"lastUpdatedTime": NOW}}, path="/apis/x")[0] == 404
    ctx = ssl.create_default_context(cafile=endpoint.ca_cert)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(endpoint.url, timeout=10, context=ctx)
    assert err.value.code == 404  # its mux sends every other method to the not-found handler
    # No trainerStatus: 200, and nothing changes (as the Trainer's server does).
    assert post(endpoint, {}) == (200, {})
    assert stored(endpoint) is None


def test_the_official_sdk_call_posts_to_it_unchanged(endpoint: Any, monkeypatch: Any) -> None:
    from kubeflow.trainer import update_trainjob_status
    from kubeflow.trainer.backends.kubernetes import utils as sdk_utils

    for key, value in endpoint.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sdk_utils, "_last_update_time", 0.0)  # its 5 s throttle, per process
    monkeypatch.setattr(sdk_utils, "_cached_token", None)
    assert update_trainjob_status(
        progress_percent=30, estimated_remaining_seconds=9, metrics={"acc": 0.5}
    )
    ts = parse_trainer_status(stored(endpoint)["trainerStatus"])
    assert ts is not None
    assert (ts.progress_percentage, ts.estimated_remaining_seconds) == (30, 9)
    assert ts.metrics == {"acc": "0.5"} and ts.last_updated_time is not None


def test_eta_text() -> None:
    assert [eta_text(s) for s in (None, 5, 65, 3600 * 2 + 600)] == ["", "5s", "1m 05s", "2h 10m"]


# -- real local jobs --------------------------------------------------------------------------


def sdk_progress():
    from kubeflow.trainer import update_trainjob_status

    return update_trainjob_status(
        progress_percent=42, estimated_remaining_seconds=30, metrics={"loss": 0.25}
    )


def report_progress():
    import os

    import kf_jupyter

    rank = int(os.environ["JAX_PROCESS_ID"])
    kf_jupyter.report(step=1, progress=0.25, loss=2.0 + rank)
    # At once again: throttled (one post per 5 s), so this one waits and is sent at exit.
    kf_jupyter.report(step=4, progress=1.0, loss=0.5 + rank)
    return rank


def test_a_local_job_reports_with_the_official_sdk(client: Any) -> None:
    name = client.train(JAXTrainer(func=sdk_progress, num_nodes=1, initialize_distributed=False))
    job = client.wait_for_job_status(name, timeout=120)
    assert client.get_job_result(name) is True  # update_trainjob_status said it was sent
    ts = job.trainer_status
    assert ts is not None, "\n".join(client.get_job_logs(name))
    assert (ts.progress_percentage, ts.estimated_remaining_seconds) == (42, 30)
    assert ts.metrics == {"loss": "0.25"}
    assert client.get_job(name).to_dict()["trainer_status"]["progress_percentage"] == 42
    # what the token file of the job is: owner-only, in the job's folder
    token = client.backend.jobs_dir / name / "trainer" / "token"
    assert token.stat().st_mode & 0o077 == 0


def test_report_posts_from_rank_zero_and_sends_the_last_one_at_exit(client: Any) -> None:
    name = client.train(JAXTrainer(func=report_progress, num_nodes=2, initialize_distributed=False))
    job = client.wait_for_job_status(name, timeout=120)
    ts = job.trainer_status
    assert ts is not None, "\n".join(client.get_job_logs(name))
    assert ts.progress_percentage == 100 and ts.estimated_remaining_seconds == 0
    assert ts.metrics == {"loss": "0.5", "step": "4"}  # rank 0's (rank 1 does not post)
    # the log markers stay (in the raw records; readable views hide them), from every rank
    lines = [rec.line for rec in client.iter_log_records(name)]
    assert sum("##kf-jupyter:report " in ln for ln in lines) == 4


def test_the_runner_shim_posts_without_kf_jupyter(endpoint: Any, tmp_path: Path) -> None:
    """In an image without kf-jupyter, the runner's own report() posts the same way."""
    func = tmp_path / "func.py"
    func.write_text(
        "def train():\n"
        "    import sys, kf_jupyter\n"
        "    assert 'shim' in (kf_jupyter.__doc__ or ''), kf_jupyter\n"
        "    kf_jupyter.report(step=7, progress=0.5, loss=1.5)\n"
        "    return 1\n"
    )
    args = tmp_path / "args.json"
    args.write_text("{}")
    runner = tmp_path / "kf_entry.py"
    runner.write_text((REPO / "kf_jupyter" / "entrypoint.py").read_text())
    env = {"PATH": os.environ["PATH"], **endpoint.env()}
    # -I -S: no site-packages, so kf_jupyter cannot be imported and the shim is used
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(runner), str(func), "train", str(args), "none"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "##kf-jupyter:report " in proc.stdout
    ts = parse_trainer_status(stored(endpoint)["trainerStatus"])
    assert ts is not None and ts.progress_percentage == 50
    assert ts.metrics == {"loss": "1.5", "step": "7"}


def transformers_training(output_dir):
    """A Transformers Trainer on a tiny BERT built from a config (no download), CPU."""
    import os

    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=64,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    data = [
        {
            "input_ids": torch.randint(1, 64, (8,)),
            "attention_mask": torch.ones(8, dtype=torch.long),
            "labels": torch.tensor(i % 2),
        }
        for i in range(32)
    ]
    args = TrainingArguments(
        output_dir=output_dir,
        max_steps=12,
        per_device_train_batch_size=4,
        logging_steps=2,
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data)
    assert any(type(cb).__name__ == "KubeflowCallback" for cb in trainer.callback_handler.callbacks)
    return trainer.train().training_loss


@pytest.mark.slow
def test_a_transformers_trainer_reports_loss_and_progress_locally(
    client: Any, tmp_path: Path
) -> None:
    pytest.importorskip("transformers")
    from kf_jupyter import TorchTrainer

    trainer = TorchTrainer(
        func=transformers_training,
        func_args={"output_dir": str(tmp_path / "out")},
        num_nodes=1,
        num_proc_per_node=1,
    )
    name = client.train(trainer)
    job = client.wait_for_job_status(name, timeout=600)
    loss = client.get_job_result(name)
    ts = job.trainer_status
    assert ts is not None, "\n".join(client.get_job_logs(name))
    assert ts.progress_percentage == 100 and ts.estimated_remaining_seconds == 0
    assert float(ts.metrics["loss"]) > 0 and float(ts.metrics["train_loss"]) == pytest.approx(
        loss, rel=1e-3
    )


# -- how the views show it ---------------------------------------------------------------------


def _status(pct: int, eta: int, second: int, **metrics: str) -> Any:
    from datetime import UTC, datetime

    from kf_jupyter.types import TrainerStatus

    when = datetime(2026, 12, 1, 10, 0, second, tzinfo=UTC)
    return TrainerStatus(pct, eta, dict(metrics), when)


def test_the_monitor_state_takes_progress_eta_and_metric_points_from_trainer_status() -> None:
    from kf_jupyter.widgets.state import LogState

    state = LogState()
    state.apply_trainer_status(_status(20, 80, 1, loss="2.0", current_step="2", total_steps="10"))
    state.apply_trainer_status(
        _status(20, 80, 1, loss="2.0", current_step="2", total_steps="10")
    )  # the same status again: no point
    state.apply_trainer_status(_status(40, 60, 6, loss="1.5", current_step="4", note="warm-up"))
    assert state.progress == 0.4 and state.eta_seconds == 60
    assert state.metrics == {"loss": [(2.0, 2.0), (4.0, 1.5)]}  # numbers only, over steps
    assert "data-metric='loss'" in state.chart_svg()
    # the record's progress is the one number (the sidebar and panel show it too); report()
    # markers still win for metric points (they are not throttled)
    state.add(
        "rank-0", '##kf-jupyter:report {"step": 5, "progress": 0.5, "metrics": {"loss": 1.0}}'
    )
    assert state.progress == 0.4
    state.apply_trainer_status(_status(45, 50, 11, loss="1.2", current_step="5"))
    assert state.progress == 0.45 and state.eta_seconds == 50
    assert state.metrics["loss"][-1] == (5.0, 1.0)


def test_a_last_status_in_the_same_second_as_the_one_before_is_taken() -> None:
    """`lastUpdatedTime` keeps whole seconds: a short job's first report and its last one (sent
    at exit) share it. The monitor had read the first; it must take the last (CI saw 3% left on
    a finished job's bar while its chart reached step 29)."""
    from kf_jupyter.widgets.state import LogState

    state = LogState()
    state.apply_trainer_status(_status(3, None, 7, loss="0.66", step="0"))
    state.apply_trainer_status(_status(100, 0, 7, loss="0.20", step="29"))
    assert state.progress == 1.0 and state.eta_seconds == 0
    assert state.metrics["loss"] == [(0.0, 0.66), (29.0, 0.2)]


def test_a_job_without_a_recorded_progress_takes_the_log_markers() -> None:
    from kf_jupyter.widgets.state import LogState

    state = LogState()
    state.add("rank-0", '##kf-jupyter:report {"step": 5, "progress": 0.5, "metrics": {}}')
    assert state.progress == 0.5


def test_progress_is_written_one_way_and_has_no_eta_when_not_running() -> None:
    from kf_jupyter.progress import progress_label, progress_text

    assert progress_label(45, 185, "Running") == "45% · ETA 3m 05s"
    assert progress_label(100, 0, "Running") == "100%"  # never "100% · ETA 0s"
    assert progress_label(100, 5, "Running") == "100%"
    assert progress_label(45, 185, "Suspended") == "45%"
    assert progress_label(45, 185, "Complete") == "45%"
    assert progress_label(45, 185, "Failed") == "45%"
    assert progress_text(_status(60, 30, 1), "Complete") == "60%"
    assert progress_text(None, "Running") == ""


def test_kf_jobs_rows_show_progress_and_eta() -> None:
    from kf_jupyter.magics.render import JOB_HEADERS, job_rows
    from kf_jupyter.types import TrainJob

    jobs = [
        TrainJob("a", "Running", "local", trainer_status=_status(45, 185, 1)),
        TrainJob("b", "Running", "local"),
    ]
    rows = job_rows(jobs)
    col = JOB_HEADERS.index("progress")
    assert [r[col] for r in rows] == ["45% · ETA 3m 05s", "-"]


def test_the_sdk_layer_posts_what_the_official_call_would(endpoint: Any, monkeypatch: Any) -> None:
    """kf_jupyter.sdk.update_trainjob_status: the report() line, and the exact trainerStatus."""
    import time

    from kf_jupyter.sdk import update_trainjob_status

    for key, value in endpoint.env().items():
        monkeypatch.setenv(key, value)
    assert update_trainjob_status(
        progress_percent=30, estimated_remaining_seconds=9, metrics={"acc": 0.5, "phase": "warm-up"}
    )
    end = time.monotonic() + 20  # posted from a daemon thread, at most once per 5 s
    while stored(endpoint) is None and time.monotonic() < end:
        time.sleep(0.05)
    ts = parse_trainer_status(stored(endpoint)["trainerStatus"])
    assert ts is not None and (ts.progress_percentage, ts.estimated_remaining_seconds) == (30, 9)
    assert ts.metrics == {"acc": "0.5", "phase": "warm-up"}


def test_a_local_job_posts_its_progress_every_second_a_cluster_job_every_five() -> None:
    """Every view reads progress from the job's record (one number everywhere), so how often
    rank 0 posts is how far the progress bar may trail the chart, which follows the log: a
    local job's own endpoint (this machine) takes a post per second, the Trainer's once per 5 s."""
    from kf_jupyter.entrypoint import _kfj_status_interval

    assert _kfj_status_interval("https://127.0.0.1:41234/apis/x/status") == 1.0
    assert _kfj_status_interval("http://localhost:8080/s") == 1.0
    assert _kfj_status_interval("https://[::1]:8443/s") == 1.0
    svc = "https://kubeflow-trainer-controller-manager.kubeflow.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/j/status"
    assert _kfj_status_interval(svc) == 5.0
    assert _kfj_status_interval("not a url") == 5.0


def test_a_jobs_shape_is_written_in_words() -> None:
    from kf_jupyter.progress import shape_text

    assert shape_text(1, 2) == "1 node × 2 processes"
    assert shape_text(2, 1) == "2 nodes × 1 process"
    assert shape_text(2, "4") == "2 nodes × 4 processes"
    assert shape_text(1, "auto") == "1 node"
    assert shape_text(None, 2) == "-"
