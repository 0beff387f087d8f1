"""A plain `pip install` of the wheel gives a working lab extension and server extension."""

from __future__ import annotations

import json
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
    meta = zipfile.ZipFile(wheel).read("kf_jupyter-0.1.0.dist-info/METADATA").decode()
    required = {
        ln.split(":", 1)[1].split(";")[0].strip().split(">")[0].split("<")[0].strip().lower()
        for ln in meta.splitlines()
        if ln.startswith("Requires-Dist:") and "extra ==" not in ln
    }
    for dist in (
        "ipywidgets",
        "ipython",
        "traitlets",
        "jupyter-server",
        "jupyterlab",
        "kubernetes",
    ):
        assert dist in required, (dist, required)  # a dependency, not an extra


KERNEL_CHECK = r"""
import json, sys
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="python3")
cells = [
    "%load_ext kf_jupyter",
    "mg = get_ipython().magics_manager.registry['KubeflowMagics']\n"
    "print('widgets', mg.use_widgets())",
    "from kf_jupyter import JAXTrainer, JobMonitor, TrainerClient\n"
    "def hello():\n"
    "    print('hello from a plain install', flush=True)\n"
    "    return 7\n"
    "c = TrainerClient()\n"
    "name = c.train(JAXTrainer(func=hello, initialize_distributed=False))\n"
    "m = JobMonitor(c, name)\n"
    "display(m.widget)\n"
    "m.start()\n"
    "job = c.wait_for_job_status(name, timeout=120)\n"
    "m.join(30)\n"
    "m.finish(job)\n"
    "print('result', c.get_job_result(name), job.status)",
    "from kf_jupyter.backends.kubernetes.backend import KubernetesBackend\n"
    "import kubernetes\n"
    "print('k8s', KubernetesBackend.name)",
]
out = []
try:
    for code in cells:
        reply = kc.execute_interactive(code, timeout=240, output_hook=out.append)
        if reply["content"]["status"] != "ok":
            out.append({"error": reply["content"]})
            break
finally:
    km.shutdown_kernel(now=True)
msgs = [{"type": m["header"]["msg_type"] if "header" in m else "error",
         "content": m.get("content", m)} for m in out]
print(json.dumps(msgs, default=str))
"""


def test_plain_install_enables_both_extensions(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # No extras, nothing else: `pip install kf-jupyter` brings the notebook side whole.
    subprocess.run(
        [py, "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "VIRTUAL_ENV"))}
    env["PATH"] = f"{env_dir / 'bin'}:{env['PATH']}"
    env.pop("PYTHONPATH", None)  # the installed wheel, not a source tree
    env["KF_JUPYTER_STATE_DIR"] = str(tmp_path / "state")
    env["HOME"] = str(tmp_path / "home")
    # The widget monitor in a real kernel, and the Kubernetes backend, in the fresh venv.
    done = subprocess.run(
        [py, "-c", KERNEL_CHECK], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr
    msgs = json.loads(done.stdout.splitlines()[-1])
    assert not [m for m in msgs if m["type"] == "error"], msgs
    text = "".join(m["content"].get("text", "") for m in msgs if m["type"] == "stream")
    assert "widgets True" in text, msgs
    assert "result 7 Complete" in text, msgs
    assert "k8s kubernetes" in text, msgs
    widget = [
        m
        for m in msgs
        if m["type"] == "display_data"
        and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
    ]
    assert widget, msgs
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
