"""The local status endpoint under attack by another local user (issue 20, High).

A job's status endpoint listens on 127.0.0.1, so any local user can connect to it. The unprivileged
user `nobody` opens 2,000 idle connections and keeps slowloris connections trickling bytes while a
job runs under the common 1,024 open-file limit: the job must complete normally, its supervisor
must live to the end, and the ranks' own progress reports must still land.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from kf_jupyter import JAXTrainer

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401

ATTACKER = r"""
import json, os, resource, socket, ssl, sys, time
port, folder, n_idle, n_slow = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
ctx = ssl.create_default_context()
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
PATH = b"/apis/trainer.kubeflow.org/v1alpha1/namespaces/local/trainjobs/x/status"
stats = {"uid": os.getuid(), "idle": 0, "slow_bytes": 0, "slow_reconnects": 0, "errors": 0}

def idle():
    return socket.create_connection(("127.0.0.1", port), timeout=10)  # established, then silent

def slow(kind):
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    if kind == "http":  # a TLS handshake, then a request that never ends
        s = ctx.wrap_socket(s)
        s.sendall(b"POST " + PATH + b" HTTP/1.1\r\nHost: x\r\n")
    else:  # a TLS record that never ends
        s.sendall(b"\x16\x03\x01\x02\x00")
    s.settimeout(0.2)
    return [kind, s]

held = []
for _ in range(n_idle):
    try:
        held.append(idle())
        stats["idle"] += 1
    except OSError:
        stats["errors"] += 1
slows = []
for i in range(n_slow):
    try:
        slows.append(slow("http" if i % 2 else "tls"))
    except OSError:
        stats["errors"] += 1
open(os.path.join(folder, "ready"), "w").close()
while not os.path.exists(os.path.join(folder, "stop")):
    for entry in list(slows):
        try:
            entry[1].send(b"X-Slow: 1\r\n" if entry[0] == "http" else b"\x01")
            stats["slow_bytes"] += 1
        except OSError:
            slows.remove(entry)
            try:
                slows.append(slow(entry[0]))
                stats["slow_reconnects"] += 1
            except OSError:
                stats["errors"] += 1
    time.sleep(0.5)
with open(os.path.join(folder, "result.json"), "w") as fh:
    json.dump(stats, fh)
"""


def report_under_attack(url_file: str, go_file: str) -> str:
    import os
    import time

    import kf_jupyter

    with open(url_file + ".tmp", "w") as fh:
        fh.write(os.environ["KUBEFLOW_TRAINER_SERVER_URL"])
    os.replace(url_file + ".tmp", url_file)
    end = time.monotonic() + 300
    while not os.path.exists(go_file) and time.monotonic() < end:
        time.sleep(0.1)
    for step in range(1, 13):
        kf_jupyter.report(step=step, progress=step / 12, loss=1.0 / step)
        time.sleep(1.0)
    return "done"


class Nobody:
    """The attacker script, run as the unprivileged user nobody."""

    def __init__(self, port: int, n_idle: int = 2000, n_slow: int = 20) -> None:
        python = shutil.which("python3", path="/usr/bin:/bin")
        if os.geteuid() != 0 or shutil.which("setpriv") is None or python is None:
            pytest.skip("needs root and setpriv to attack as the unprivileged user nobody")
        self.dir = Path(tempfile.mkdtemp(prefix="kfj-attack-", dir="/tmp"))
        os.chown(self.dir, 65534, 65534)
        self.proc = subprocess.Popen(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-I", "-c",
             ATTACKER, str(port), str(self.dir), str(n_idle), str(n_slow)],
            env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip

    def wait_ready(self, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while not (self.dir / "ready").exists():
            assert self.proc.poll() is None, "the attacker ended early"
            assert time.monotonic() < end, "the attacker did not get ready"
            time.sleep(0.1)

    def stop(self) -> dict[str, Any]:
        (self.dir / "stop").touch()
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        result = json.loads((self.dir / "result.json").read_text())
        shutil.rmtree(self.dir, ignore_errors=True)
        return result


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="another local user (nobody) holds 2,000 idle and 20 slowloris connections to a "
    "running job's status endpoint, under a 1,024 open-file limit",
    area="local",
)
def test_the_status_endpoint_survives_idle_and_slowloris_connections_from_another_user(
    client: Any, tmp_path: Path, record_property: Any
) -> None:
    url_file, go_file = str(tmp_path / "url"), str(tmp_path / "go")
    os.chmod(tmp_path, 0o755)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))  # the supervisor's
    try:
        name = client.train(
            JAXTrainer(
                func=report_under_attack,
                func_args={"url_file": url_file, "go_file": go_file},
                num_nodes=1,
                initialize_distributed=False,
            )
        )
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    end = time.monotonic() + 180
    while not os.path.exists(url_file):
        assert time.monotonic() < end, "\n".join(client.get_job_logs(name))
        time.sleep(0.1)
    port = int(Path(url_file).read_text().split("://127.0.0.1:")[1].split("/")[0])
    attacker = Nobody(port)
    try:
        attacker.wait_ready()
        Path(go_file).touch()
        job = client.wait_for_job_status(name, status={"Complete", "Failed"}, timeout=300)
    finally:
        Path(go_file).touch()
        stats = attacker.stop()
    logs = "\n".join(client.get_job_logs(name))
    record_property("attacker_idle_connections", stats["idle"])
    record_property("attacker_slow_bytes", stats["slow_bytes"])
    assert job.status == "Complete", (job.status, job.message, logs, stats)
    assert stats["uid"] == 65534 and stats["idle"] == 2000 and stats["slow_bytes"] > 0, stats
    assert client.get_job_result(name) == "done"
    ts = job.trainer_status
    assert ts is not None and ts.progress_percentage == 100, ts  # the last report landed
    assert ts.metrics.get("step") == "12", ts.metrics
    assert_no_orphans(name)
