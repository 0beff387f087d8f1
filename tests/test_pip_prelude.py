"""The package-install prelude of the generated command, run for real.

A fresh virtualenv without pip stands for an image without pip; a PEP 503 index served on
127.0.0.1 holds a tiny wheel, so nothing leaves the machine.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_jupyter import program

pytestmark = pytest.mark.slow


def _wheel(directory: Path, name: str) -> Path:
    """Write a minimal pure-Python wheel `name-1.0` with an extra `fast` (needs nothing)."""
    dist = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = 42\n",
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nProvides-Extra: fast\n"
        ).encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kf-jupyter-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return out


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("index")
    for sub, name in (("simple", "kfj_demo_a"), ("other", "kfj_demo_b")):
        pkg = root / sub / name.replace("_", "-")
        pkg.mkdir(parents=True)
        wheel = _wheel(pkg, name)
        (pkg / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A virtualenv without pip (like an image that lacks it)."""
    d = tmp_path_factory.mktemp("nopip")
    venv.EnvBuilder(with_pip=False).create(d)
    assert (
        subprocess.run(
            [d / "bin" / "python", "-m", "pip", "--version"], capture_output=True
        ).returncode
        != 0
    )
    return d / "bin"


def _run_prelude(
    script: str, bin_dir: Path, tmp_path: Path, index_urls: list[str] | None = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PATH=f"{bin_dir}:/usr/bin:/bin",
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_CACHE_DIR="1",
        TMPDIR=str(tmp_path),
    )
    env.update(program.index_env(index_urls or []))  # as spec.trainer.env gives them
    return subprocess.run(
        ["bash", "-c", "set -e\n" + script], env=env, capture_output=True, text=True, timeout=300
    )


def test_installs_extras_from_several_indexes_without_pip(index, bare_python, tmp_path) -> None:
    urls = [f"{index}/simple", f"{index}/other"]
    script = program.workdir() + program.pip_prelude(["kfj-demo-a[fast]", "kfj-demo-b==1.0"], urls)
    proc = _run_prelude(script, bare_python, tmp_path, urls)
    assert proc.returncode == 0, proc.stderr
    check = subprocess.run(
        [
            bare_python / "python",
            "-c",
            "import kfj_demo_a, kfj_demo_b; print(kfj_demo_a.VALUE + kfj_demo_b.VALUE)",
        ],
        capture_output=True,
        text=True,
    )
    assert check.stdout.strip() == "84"


def test_the_install_announces_itself_before_pip_runs(index, tmp_path) -> None:
    """Issue 22: on a cluster pip ran quietly and the job read "The pod is running. No output
    yet." for the whole install. The command now says so first, and how long it took."""
    urls = [f"{index}/simple"]
    script = (
        program.workdir()
        + program.pip_prelude(["kfj-demo-a"], urls)
        + 'python3 -c "import kfj_demo_a; print(kfj_demo_a.VALUE)"\n'
    )
    venv_dir = tmp_path / "img"
    venv.EnvBuilder(with_pip=True).create(venv_dir)
    proc = _run_prelude(script, venv_dir / "bin", tmp_path, urls)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "kf-jupyter: installing 1 package (kfj-demo-a) with pip...", lines
    assert re.fullmatch(
        r"kf-jupyter: packages installed in \d+ s; starting the program", lines[1]
    ), lines
    assert lines[2:] == ["42"], lines


def test_failure_says_so_in_one_line_with_the_pip_log(index, tmp_path) -> None:
    script = program.workdir() + program.pip_prelude(["kfj-no-such-package"], [f"{index}/simple"])
    proc = _run_prelude(script, Path(sys.executable).parent, tmp_path, [f"{index}/simple"])
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0] == (
        "kf-jupyter: pip could not install kfj-no-such-package; the end of pip's log:"
    )
    assert any("kfj-no-such-package" in line for line in lines[1:]), proc.stderr


def test_skipped_when_the_local_backend_provides_the_environment(tmp_path) -> None:
    script = program.workdir() + program.pip_prelude(["kfj-no-such-package"], [])
    env_script = "export KF_JUPYTER_SKIP_INSTALL=1\n" + script
    proc = _run_prelude(env_script, Path(sys.executable).parent, tmp_path)
    assert proc.returncode == 0, proc.stderr


def _externally_managed_system_python() -> str | None:
    """A python3 outside any venv, marked EXTERNALLY-MANAGED (PEP 668), with pip; else None."""
    probe = (
        "import os, sys, sysconfig\n"
        "marked = os.path.exists(os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED'))\n"
        "print(int(marked and sys.prefix == sys.base_prefix))\n"
    )
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if not os.path.exists(cand):
            continue
        out = subprocess.run([cand, "-c", probe], capture_output=True, text=True)
        pip = subprocess.run([cand, "-m", "pip", "--version"], capture_output=True)
        if out.stdout.strip() == "1" and pip.returncode == 0:
            return cand
    return None


@pytest.mark.reliability(
    scenario="package install on an image whose Python is externally managed (PEP 668, Debian's "
    "own python3 with pip, as an unprivileged user): the prelude installs the package",
    area="hostile",
    tries=1,
)
def test_installs_into_an_externally_managed_python(index) -> None:
    python = _externally_managed_system_python()
    if python is None:
        pytest.skip("no system python3 marked EXTERNALLY-MANAGED (with pip) on this machine")
    import shutil
    import tempfile

    # An unprivileged user (as in most images' non-root user) cannot write the system
    # site-packages, so the prelude takes its --user path, which PEP 668 refuses by default.
    as_user: list[str] = []
    home = Path(tempfile.mkdtemp(prefix="kfj-pep668-", dir="/tmp"))
    try:
        if os.geteuid() == 0:
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv to drop privileges")
            os.chown(home, 65534, 65534)
            as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        env = {
            "PATH": f"{Path(python).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(home),
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_CACHE_DIR": "1",
            **program.index_env([f"{index}/simple"]),
        }
        script = (
            "set -e\n"
            + program.workdir()
            + program.pip_prelude(["kfj-demo-a"], [f"{index}/simple"])
        )
        proc = subprocess.run(
            [*as_user, "bash", "-c", script], env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        check = subprocess.run(
            [*as_user, "python3", "-c", "import kfj_demo_a; print(kfj_demo_a.VALUE)"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert check.stdout.strip() == "42", check.stderr
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_announcement_never_prints_a_package_urls_password() -> None:
    """The install's first log line names the packages; a direct URL's credentials are masked
    there (pip itself still gets the whole URL)."""
    spec = (
        "kfj-demo-a @ https://deploy:s3cret-token@pkgs.example.com/kfj_demo_a-1.0-py3-none-any.whl"
    )
    script = program.pip_prelude([spec], [])
    said = [line for line in script.splitlines() if "kf-jupyter: installing" in line]
    assert len(said) == 1 and "s3cret-token" not in said[0], said
    assert "pkgs.example.com" in said[0] and "deploy" in said[0], said
