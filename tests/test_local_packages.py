"""RuntimeConfig packages locally: nothing installed when satisfied; else one layered env, reused."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from kf_jupyter import JAXTrainer, RuntimeConfig
from kf_jupyter.backends.local.envs import env_key, satisfied
from kf_jupyter.errors import PackageInstallError

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


@pytest.mark.slow
def test_install_failure_is_a_clear_error(client):
    rc = RuntimeConfig(packages_to_install=["kf-jupyter-no-such-package-xyz==9.9.9"])
    with pytest.raises(PackageInstallError, match="kf-jupyter-no-such-package-xyz") as err:
        client.train(trainer(), runtime_config=rc)
    assert "pip's log" in str(err.value)
    assert client.list_jobs() == []
    assert [p for p in (client.backend.state_dir / "envs").iterdir() if p.is_dir()] == []
