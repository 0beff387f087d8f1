"""RuntimeConfig packages locally: nothing installed when satisfied; else one layered env, reused."""

from __future__ import annotations

import http.server
import importlib.metadata
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kf_jupyter import JAXTrainer, RuntimeConfig
from kf_jupyter.backends.local.envs import env_key, satisfied
from kf_jupyter.errors import JobFailedError

from .test_local_support import client_fixture  # noqa: F401

#: A tiny pure-python wheel that the project's environment does not have.
MISSING = "inflection"


def uses_packages():
    import sys
    from importlib.util import find_spec

    import six

    # torch is in the project's venv only, not in the interpreter that venv is built on.
    out = {
        "six": six.__version__,
        "python": sys.executable,
        "torch": find_spec("torch") is not None,
    }
    try:
        import inflection

        out["inflection"] = inflection.camelize("device_type")
    except ImportError:
        out["inflection"] = None
    return out


def trainer() -> JAXTrainer:
    return JAXTrainer(func=uses_packages, initialize_distributed=False)


def test_satisfied_packages_build_nothing(client):
    rc = RuntimeConfig(packages_to_install=["six", "numpy>=1"])
    name = client.train(trainer(), runtime_config=rc)
    client.wait_for_job_status(name, timeout=60)
    import sys

    out = client.get_job_result(name)
    assert Path(out["python"]).parent == Path(sys.executable).parent
    assert out["inflection"] is None
    assert not (client.backend.state_dir / "envs").exists()


def test_satisfied_checks_versions_and_extras():
    import sys

    assert satisfied(sys.executable, ["six", "numpy>=1"])
    assert not satisfied(sys.executable, ["numpy<1"])
    assert not satisfied(sys.executable, ["no-such-package-kfj"])
    assert env_key("p", ["b", "a"], []) == env_key("p", ["a", "b"], [])
    assert env_key("p", ["a"], []) != env_key("p", ["a"], ["https://example.org/simple"])


@pytest.mark.slow
def test_missing_package_builds_one_env_and_reuses_it(client):
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version(MISSING)
    rc = RuntimeConfig(packages_to_install=["six", MISSING])
    name = client.train(trainer(), runtime_config=rc)
    client.wait_for_job_status(name, timeout=240)
    out = client.get_job_result(name)
    assert out["inflection"] == "DeviceType"
    assert out["torch"] is True  # the layered env sees the kernel's venv, not only the base python
    envs = [p for p in (client.backend.state_dir / "envs").iterdir() if p.is_dir()]
    assert len(envs) == 1 and Path(out["python"]).parent == envs[0] / "bin"
    # The kernel's environment is untouched.
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version(MISSING)
    # A second job with the same config (other order) reuses the env: pip does not run again
    # (its log and the env's ready marker are left as they were).
    pip_log = next((client.backend.state_dir / "envs").glob("*.pip.log"))
    ready = envs[0] / ".kf-jupyter-ready"
    before = (pip_log.stat().st_mtime_ns, ready.stat().st_mtime_ns)
    second = client.train(
        trainer(), runtime_config=RuntimeConfig(packages_to_install=[MISSING, "six"])
    )
    assert (pip_log.stat().st_mtime_ns, ready.stat().st_mtime_ns) == before
    client.wait_for_job_status(second, timeout=60)
    assert client.get_job_result(second)["inflection"] == "DeviceType"
    assert len([p for p in (client.backend.state_dir / "envs").iterdir() if p.is_dir()]) == 1


@pytest.fixture
def gated_index(tmp_path) -> Iterator[tuple[str, threading.Event]]:
    """A PEP 503 index on 127.0.0.1 with one wheel (`kfj-demo-gated`, VALUE = 42) whose
    download waits until the event is set: pip is held mid-install as long as a test wants."""
    from .test_pip_prelude import _wheel

    pkg = tmp_path / "index" / "simple" / "kfj-demo-gated"
    pkg.mkdir(parents=True)
    wheel = _wheel(pkg, "kfj_demo_gated")
    (pkg / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    gate = threading.Event()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path / "index"), **kw)

        def do_GET(self):
            if self.path.endswith(".whl"):
                gate.wait(120)
            super().do_GET()

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple", gate
    gate.set()
    server.shutdown()
    server.server_close()


def uses_gated() -> int:
    import kfj_demo_gated

    return kfj_demo_gated.VALUE


@pytest.mark.slow
def test_the_install_is_the_jobs_first_phase_with_pip_in_its_log(client, gated_index, monkeypatch):
    """Issue 22: train() used to build the environment before the job existed, so the user saw
    nothing for the whole pip install. Now the job exists at once and says what it does."""
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    url, gate = gated_index
    rc = RuntimeConfig(packages_to_install=["kfj-demo-gated"], pip_index_urls=[url])
    names: list[str] = []
    submit = threading.Thread(
        target=lambda: names.append(
            client.train(
                JAXTrainer(func=uses_gated, initialize_distributed=False), runtime_config=rc
            )
        ),
        daemon=True,
    )
    submit.start()
    submit.join(60)  # before: train() waited for pip, which waits for the gate
    assert names, "train() did not return while pip was installing"
    name = names[0]
    install_log = client.backend.job_dir(name) / "install.log"
    deadline = time.monotonic() + 120
    while "kfj-demo-gated" not in (install_log.read_text() if install_log.exists() else ""):
        assert time.monotonic() < deadline, "pip's output never reached the job's install.log"
        time.sleep(0.2)
    job = client.get_job(name)
    assert job.status == "Created"
    assert job.phase == "Package environment: installing 1 package (kfj-demo-gated) with pip…"
    assert any(e.reason == "InstallingPackages" for e in client.get_job_events(name))
    gate.set()
    client.wait_for_job_status(name, timeout=180)
    assert client.get_job_result(name) == 42
    reasons = [e.reason for e in client.get_job_events(name)]
    assert reasons.index("InstalledPackages") < reasons.index("Running"), reasons
    assert "Successfully installed kfj-demo-gated" in install_log.read_text()
    # a second job reuses the environment: no install phase, no pip
    second = client.train(
        JAXTrainer(func=uses_gated, initialize_distributed=False), runtime_config=rc
    )
    client.wait_for_job_status(second, timeout=120)
    assert client.get_job_result(second) == 42
    assert "InstallingPackages" not in [e.reason for e in client.get_job_events(second)]


@pytest.mark.slow
def test_cancel_while_installing_stops_pip(client, gated_index, monkeypatch):
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    url, _gate = gated_index
    rc = RuntimeConfig(packages_to_install=["kfj-demo-gated"], pip_index_urls=[url])
    name = client.train(
        JAXTrainer(func=uses_gated, initialize_distributed=False), runtime_config=rc
    )
    install_log = client.backend.job_dir(name) / "install.log"
    deadline = time.monotonic() + 120
    while "kfj-demo-gated" not in (install_log.read_text() if install_log.exists() else ""):
        assert time.monotonic() < deadline, "pip's output never reached the job's install.log"
        time.sleep(0.2)
    client.backend.cancel_job(name)
    job = client.get_job(name)
    assert (job.status, job.reason) == ("Failed", "Cancelled"), job
    pips = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "kfj-demo-gated" in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid()
    ]
    assert pips == [], [p.info["cmdline"] for p in pips]


@pytest.mark.slow
def test_install_failure_is_a_clear_error(client):
    rc = RuntimeConfig(packages_to_install=["kf-jupyter-no-such-package-xyz==9.9.9"])
    name = client.train(trainer(), runtime_config=rc)
    with pytest.raises(JobFailedError):
        client.wait_for_job_status(name, timeout=240)
    job = client.get_job(name)
    assert job.reason == "PackageInstallFailed", job
    assert "kf-jupyter-no-such-package-xyz" in job.message and "pip's log" in job.message
    assert (
        "kf-jupyter-no-such-package-xyz"
        in (client.backend.job_dir(name) / "install.log").read_text()
    )
    assert [p for p in (client.backend.state_dir / "envs").iterdir() if p.is_dir()] == []
