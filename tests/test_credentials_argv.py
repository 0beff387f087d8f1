"""No credential in any process's command line (issue 13, item 1).

`/proc/PID/cmdline` is readable by every local user (`ps -ef`), unlike `/proc/PID/environ`. While
real jobs install packages from a PEP 503 index on 127.0.0.1 that wants basic auth, a scanner reads
the command line of every process on the machine, again and again, and the password must appear in
none of them: not in the layered-environment build's pip, not in `mpirun` (whose argv carries the
ranks' script), not in the cluster command's own pip step when it runs for real.
"""

from __future__ import annotations

import base64
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kf_jupyter import MPITrainer, RuntimeConfig, TorchTrainer, program
from kf_jupyter.build import build_trainjob
from kf_jupyter.runtimes import Runtime

from .test_local_support import client_fixture  # noqa: F401
from .test_pip_prelude import _wheel

pytestmark = pytest.mark.slow

USER = "kfj-user"
PASSWORD = "Pw-7Qz9-not-in-argv"


@pytest.fixture(scope="module")
def auth_index(tmp_path_factory) -> Iterator[str]:
    """A PEP 503 index on 127.0.0.1 that answers 401 without USER:PASSWORD; yields its /simple URL."""
    root = tmp_path_factory.mktemp("auth-index")
    pkg = root / "simple" / "kfj-demo-a"
    pkg.mkdir(parents=True)
    wheel = _wheel(pkg, "kfj_demo_a")
    (pkg / "index.html").write_text(f'<a href="{wheel.name}">{wheel.name}</a>\n')
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def do_GET(self):
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="kfj"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://{USER}:{PASSWORD}@127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


class CmdlineScanner:
    """Reads every process's /proc/PID/cmdline in a loop; remembers what it saw."""

    def __init__(self) -> None:
        self.leaks: list[str] = []
        self.seen: set[str] = set()
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        secret = PASSWORD.encode()
        while not self._stop.is_set():
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                        raw = fh.read()
                except OSError:
                    continue
                line = raw.replace(b"\0", b" ").decode(errors="replace")
                if secret in raw:
                    self.leaks.append(line[:300])
                if line:
                    self.seen.add(line[:400])
            self.scans += 1
            time.sleep(0.01)  # a scan every ~10 ms catches pip (>0.5 s); 2 shared cores

    def saw(self, *needles: str) -> bool:
        """Some scanned command line held all `needles` (the scan did see the process)."""
        return any(all(n in s for n in needles) for s in list(self.seen))

    def __enter__(self) -> CmdlineScanner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


#: The scan run by an unprivileged user (stdlib only, for the system python3): until `stop`
#: exists, read every /proc/PID/cmdline; then write what it saw to `result.json`.
_NOBODY_SCAN = r"""
import json, os, sys, time
out, secret = sys.argv[1], os.environ["KFJ_SCAN_SECRET"].encode()
leaks, seen, scans = [], set(), 0


def dump():
    with open(os.path.join(out, "result.tmp"), "w") as fh:
        json.dump({"leaks": leaks, "seen": sorted(seen), "scans": scans, "uid": os.getuid()}, fh)
    os.replace(os.path.join(out, "result.tmp"), os.path.join(out, "result.json"))


while not os.path.exists(os.path.join(out, "stop")):
    before = (len(seen), len(leaks))
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        line = raw.replace(b"\0", b" ").decode(errors="replace")
        if secret in raw:
            leaks.append(line[:300])
        if line:
            seen.add(line[:400])
    scans += 1
    if (len(seen), len(leaks)) != before or scans == 1:
        dump()  # what it saw so far, for the test to wait on
    time.sleep(0.01)
dump()
"""


class UnprivilegedScanner:
    """The same scan as another, unprivileged user (nobody), as a local attacker would run it."""

    def __init__(self) -> None:
        import shutil
        import tempfile

        self.python = shutil.which("python3", path="/usr/bin:/bin")
        if os.geteuid() != 0 or shutil.which("setpriv") is None or self.python is None:
            pytest.skip("needs root and setpriv to scan as the unprivileged user nobody")
        self.dir = Path(tempfile.mkdtemp(prefix="kfj-scan-", dir="/tmp"))
        os.chown(self.dir, 65534, 65534)
        self.result: dict = {}

    def __enter__(self) -> UnprivilegedScanner:
        self.proc = subprocess.Popen(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             self.python, "-I", "-c", _NOBODY_SCAN, str(self.dir)],
            env={"PATH": "/usr/bin:/bin", "KFJ_SCAN_SECRET": PASSWORD},  # not in its own argv
        )  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        import json
        import shutil

        (self.dir / "stop").touch()
        self.proc.wait(timeout=60)
        self.result = json.loads((self.dir / "result.json").read_text())
        shutil.rmtree(self.dir, ignore_errors=True)

    def saw(self, *needles: str) -> bool:
        """Some command line the unprivileged scan read held all `needles` (so far)."""
        result = self.result
        if not result:  # still running: what it has written so far
            import json

            try:
                result = json.loads((self.dir / "result.json").read_text())
            except (OSError, ValueError):
                return False
        return any(all(n in s for n in needles) for s in result.get("seen", []))


def _wait(cond, what: str, timeout: float = 180.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_for_release(release: str) -> int:
    import os
    import time

    import kfj_demo_a

    while not os.path.exists(release):
        time.sleep(0.05)
    return kfj_demo_a.VALUE


@pytest.mark.reliability(
    scenario="index URL with a password, MPI job whose package is built into a layered env: the "
    "password is in no process's /proc/PID/cmdline (pip of the build, mpirun, ranks) while it "
    "runs, scanned by the test and by the unprivileged user nobody",
    area="hostile",
    tries=1,
)
def test_mpi_job_and_layered_env_build_keep_the_password_out_of_every_argv(
    client, auth_index, tmp_path, monkeypatch, record_property
) -> None:
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    # Run from a notebook folder of its own: the job ships its working folder, and this test
    # file (which holds the password) is not what the check is about.
    notebook = tmp_path / "notebook"
    notebook.mkdir()
    monkeypatch.chdir(notebook)
    release = tmp_path / "release"
    rc = RuntimeConfig(packages_to_install=["kfj-demo-a"], pip_index_urls=[auth_index])
    trainer = MPITrainer(
        func=wait_for_release, func_args={"release": str(release)}, num_proc_per_node=2
    )
    names: list[str] = []
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            names.append(client.train(trainer, runtime_config=rc))
        except BaseException as exc:  # reported below
            errors.append(exc)

    with UnprivilegedScanner() as nobody, CmdlineScanner() as scan:
        t = threading.Thread(target=submit)
        t.start()
        t.join(timeout=300)
        assert not errors, errors
        # (b) the layered environment is built as the job's first phase (by its supervisor):
        # pip is seen by the scan.
        _wait(lambda: scan.saw("pip", "install"), "pip of the env build")
        # (a) mpirun and its ranks run until released.
        _wait(lambda: scan.saw("mpirun"), "mpirun to be seen by the scan")
        _wait(lambda: scan.saw("kf_entry.py"), "the ranks to be seen by the scan")
        _wait(lambda: nobody.saw("mpirun") and nobody.saw("kf_entry.py"), "the nobody scan")
        first = scan.scans
        _wait(lambda: scan.scans > first + 3, "a few more full scans while the ranks wait")
        release.touch()
        client.wait_for_job_status(names[0], timeout=180)
    record_property("full_process_table_scans", scan.scans)
    record_property("scans_as_nobody", nobody.result["scans"])
    assert client.get_job_result(names[0]) == 42  # the package came from the password index
    assert not scan.leaks, f"the password is in a command line: {scan.leaks[:3]}"
    assert nobody.result["uid"] == 65534 and nobody.saw("mpirun") and nobody.saw("kf_entry.py")
    assert not nobody.result["leaks"], nobody.result["leaks"][:3]
    # Nor is it in any file of the job store (job.json, plan.json, logs, pip's log).
    written = [
        str(p)
        for p in client.backend.state_dir.rglob("*")
        if p.is_file() and not p.is_symlink() and PASSWORD.encode() in p.read_bytes()
    ]
    assert not written, written


@pytest.mark.reliability(
    scenario="index URL with a password, the cluster command's own pip step run for real (torch "
    "and MPI scripts): the password is in neither the TrainJob's command nor any process's argv",
    area="hostile",
    tries=1,
)
def test_cluster_command_pip_step_keeps_the_password_out_of_argv(auth_index, tmp_path) -> None:
    venv_dir = tmp_path / "img"
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir)], check=True)
    rc = RuntimeConfig(packages_to_install=["kfj-demo-a"], pip_index_urls=[auth_index])
    rt = Runtime(name="torch-distributed", framework="torch", ml_policy="torch")
    job = build_trainjob(TorchTrainer(func=wait_for_release), rt, rc)
    st = job["spec"]["trainer"]
    assert PASSWORD not in st["command"][2]
    mpi = build_trainjob(
        MPITrainer(func=wait_for_release),
        Runtime(name="mpi", framework="mpi", ml_policy="mpi"),
        rc,
    )["spec"]["trainer"]
    assert PASSWORD not in mpi["command"][2]
    assert "-x KF_JUPYTER_PIP_INDEX_0 " in mpi["command"][2]  # reaches ranks on other nodes
    env = {e["name"]: e["value"] for e in st["env"]}
    assert env == program.index_env([auth_index])
    # Run the prelude the way the container does (bash -c, the TrainJob's env), with a scan.
    script = "set -e\n" + program.workdir() + program.pip_prelude(rc.packages, rc.index_urls)
    proc_env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    proc_env.update(
        env,
        PATH=f"{venv_dir / 'bin'}:/usr/bin:/bin",
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_CACHE_DIR="1",
        TMPDIR=str(tmp_path),
    )
    with CmdlineScanner() as scan:
        proc = subprocess.run(
            ["bash", "-c", script], env=proc_env, capture_output=True, text=True, timeout=300
        )
    assert proc.returncode == 0, proc.stderr
    assert scan.saw("pip", "install"), "the scan never saw pip"
    assert not scan.leaks, f"the password is in a command line: {scan.leaks[:3]}"
    out = subprocess.run(
        [venv_dir / "bin" / "python", "-c", "import kfj_demo_a; print(kfj_demo_a.VALUE)"],
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "42"


@pytest.mark.reliability(
    scenario="index URL with a password kept in a Kubernetes Secret (env PIP_INDEX_URL as a "
    "SecretRef): the TrainJob holds only the reference; the pip step run with the Secret's "
    "value in its env installs, the password in no argv",
    area="hostile",
    tries=1,
)
def test_index_url_from_a_secret_ref(auth_index, tmp_path) -> None:
    from kf_jupyter import SecretRef, ValidationError

    rc = RuntimeConfig(
        packages_to_install=["kfj-demo-a"],
        env={"PIP_INDEX_URL": SecretRef("pypi-credentials", "index-url")},
    )
    rt = Runtime(name="torch-distributed", framework="torch", ml_policy="torch")
    st = build_trainjob(TorchTrainer(func=wait_for_release), rt, rc)["spec"]["trainer"]
    assert PASSWORD not in str(st)
    assert st["env"] == [
        {
            "name": "PIP_INDEX_URL",
            "valueFrom": {"secretKeyRef": {"name": "pypi-credentials", "key": "index-url"}},
        }
    ]
    both = RuntimeConfig(
        packages_to_install=["kfj-demo-a"],
        pip_index_urls=["https://pypi.example.com/simple"],
        env={"PIP_INDEX_URL": SecretRef("pypi-credentials", "index-url")},
    )
    with pytest.raises(ValidationError, match="given twice"):
        build_trainjob(TorchTrainer(func=wait_for_release), rt, both)
    # The container gets PIP_INDEX_URL from the Secret (the kubelet resolves valueFrom).
    venv_dir = tmp_path / "img"
    subprocess.run([sys.executable, "-m", "venv", str(venv_dir)], check=True)
    script = "set -e\n" + program.workdir() + program.pip_prelude(rc.packages, rc.index_urls)
    proc_env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    proc_env.update(
        PIP_INDEX_URL=auth_index,
        PATH=f"{venv_dir / 'bin'}:/usr/bin:/bin",
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_CACHE_DIR="1",
        TMPDIR=str(tmp_path),
    )
    with CmdlineScanner() as scan:
        proc = subprocess.run(
            ["bash", "-c", script], env=proc_env, capture_output=True, text=True, timeout=300
        )
    assert proc.returncode == 0, proc.stderr
    assert scan.saw("pip", "install") and not scan.leaks, scan.leaks[:3]
