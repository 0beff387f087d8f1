"""A plain `pip install` of the wheel gives a working lab extension and server extension."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not (ROOT / "kf_jupyter" / "labextension" / "package.json").exists():
        pytest.fail("the lab extension is not built: run bash scripts/setup.sh")
    out = tmp_path_factory.mktemp("dist")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        env=env,
        capture_output=True,
    )
    (whl,) = out.glob("kf_jupyter-*.whl")
    return whl


def test_wheel_ships_prebuilt_extension_and_server_config(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    share = "kf_jupyter-0.1.0.data/data/share/jupyter/labextensions/kf-jupyter-labextension/"
    assert share + "package.json" in names
    assert share + "install.json" in names
    assert any(n.startswith(share + "static/remoteEntry.") for n in names)
    assert "kf_jupyter-0.1.0.data/data/etc/jupyter/jupyter_server_config.d/kf_jupyter.json" in names


def test_plain_install_enables_both_extensions(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [py, "-m", "pip", "install", "-q", "jupyterlab==4.6.6", str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "VIRTUAL_ENV"))}
    env["PATH"] = f"{env_dir / 'bin'}:{env['PATH']}"
    lab = subprocess.run(
        [py, "-m", "jupyter", "labextension", "list"], capture_output=True, text=True, env=env
    )
    text = lab.stdout + lab.stderr
    line = next(ln for ln in text.splitlines() if "kf-jupyter-labextension" in ln)
    assert "enabled" in line and "OK" in line, text
    server = subprocess.run(
        [py, "-m", "jupyter", "server", "extension", "list"],
        capture_output=True,
        text=True,
        env=env,
    )
    text = server.stdout + server.stderr
    assert any("kf_jupyter" in ln and "enabled" in ln for ln in text.splitlines()), text
    assert "kf_jupyter 0.1.0 \x1b[32mOK" in text or "kf_jupyter 0.1.0 OK" in text, text
