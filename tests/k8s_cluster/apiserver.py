"""Start a real etcd + kube-apiserver v1.20.2 on 127.0.0.1 for tests.

Binary lookup (first hit wins):

1. ``$KF_KUBE_APISERVER`` (path to a kube-apiserver binary);
2. ``<repo>/../shared/k8s/kube-apiserver-v1.20.2.xz``, unpacked once into
   ``~/.cache/kf-jupyter/kube-apiserver-<sha256>`` and checked against the known sha256;
3. ``<repo>/../shared/k8s/apiserver.sh build`` (about 4 minutes, needs root for apt), whose output
   is copied into the same cache.

etcd is Debian's ``etcd`` (apt package ``etcd-server``). Certificates are made with the
``openssl`` CLI. Everything (pki, etcd data, logs) lives in one temp dir, removed by ``stop()``
unless ``KF_K8S_KEEP=1``.
"""

from __future__ import annotations

import ctypes
import hashlib
import lzma
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kf_jupyter.backends.local.ports import free_port
from tests.k8s_cluster import HarnessUnavailable

APISERVER_SHA256 = "6a3688b70d7e474d76aa2e5e7d7f434e96196982a42d0d7364d070a6e058654a"
REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_K8S = REPO_ROOT.parent / "shared" / "k8s"
# kube-apiserver's graceful shutdown waits for every open watch to time out: SIGKILL after this.
APISERVER_GRACE = 2.0
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kf-jupyter"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_apiserver_binary() -> Path:
    """Locate (or unpack, or build) kube-apiserver v1.20.2; HarnessUnavailable if impossible."""
    env = os.environ.get("KF_KUBE_APISERVER")
    if env:
        path = Path(env)
        if not os.access(path, os.X_OK):
            raise HarnessUnavailable(f"KF_KUBE_APISERVER={env} is not an executable file")
        return path
    cached = CACHE_DIR / f"kube-apiserver-{APISERVER_SHA256[:16]}"
    if os.access(cached, os.X_OK):
        return cached
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
    xz = SHARED_K8S / "kube-apiserver-v1.20.2.xz"
    if xz.is_file():
        with lzma.open(xz) as src, tmp.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    elif (SHARED_K8S / "apiserver.sh").is_file():
        build_bin = CACHE_DIR / "build-bin"
        log = CACHE_DIR / "build.log"
        with log.open("wb") as out:
            rc = subprocess.call(
                ["bash", str(SHARED_K8S / "apiserver.sh"), "build"],
                env={**os.environ, "K8S_BIN": str(build_bin)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if rc != 0 or not (build_bin / "kube-apiserver").is_file():
            raise HarnessUnavailable(f"building kube-apiserver failed (rc={rc}); see {log}")
        shutil.copyfile(build_bin / "kube-apiserver", tmp)
    else:
        raise HarnessUnavailable(
            "kube-apiserver v1.20.2 not found: set KF_KUBE_APISERVER, or provide "
            f"{xz} (or {SHARED_K8S / 'apiserver.sh'} to build it)"
        )
    digest = _sha256(tmp)
    if digest != APISERVER_SHA256:
        tmp.unlink()
        raise HarnessUnavailable(f"kube-apiserver sha256 mismatch: got {digest}")
    tmp.chmod(0o755)
    tmp.replace(cached)
    return cached


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """preexec_fn: SIGTERM this child when the thread that started it dies (no orphans)."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(pki: Path) -> None:
    """CA, serving cert for 127.0.0.1/localhost, service-account key pair (openssl CLI)."""
    if shutil.which("openssl") is None:
        raise HarnessUnavailable("openssl CLI not found (apt-get install openssl)")
    pki.mkdir(parents=True, exist_ok=True)
    days = "3650"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", days, "-subj",
             "/CN=kf-jupyter-test-ca", "-keyout", "ca.key", "-out", "ca.crt", cwd=pki)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=pki)  # fmt: skip
    (pki / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", days, "-extfile", "san.ext", "-out", "server.crt",
             cwd=pki)  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


class ApiServer:
    """etcd + kube-apiserver on loopback, with an admin (system:masters) and a `limited` user."""

    def __init__(self, name: str = "kf-test") -> None:
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"kf-k8s-{name}-"))
        self.pki = self.dir / "pki"
        self.admin_token = secrets.token_hex(16)
        self.limited_token = secrets.token_hex(16)
        self.port = 0
        self.etcd_port = 0
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._binary: Path | None = None
        self.start_seconds = 0.0  # wall time of the last start() (etcd + apiserver ready)

    # -- properties --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> str:
        return str(self.pki / "ca.crt")

    @property
    def server_cert(self) -> tuple[str, str]:
        """(cert, key) of the 127.0.0.1 serving cert, signed by ca_file (reusable by stand-ins)."""
        return str(self.pki / "server.crt"), str(self.pki / "server.key")

    @property
    def kubeconfig_path(self) -> str:
        return str(self.dir / "admin.kubeconfig")

    @property
    def limited_kubeconfig_path(self) -> str:
        return str(self.dir / "limited.kubeconfig")

    @property
    def log_files(self) -> dict[str, Path]:
        return {"etcd": self.dir / "etcd.log", "apiserver": self.dir / "apiserver.log"}

    def pids(self) -> list[int]:
        return [p.pid for p in (self._etcd, self._apiserver) if p is not None and p.poll() is None]

    def rss_bytes(self) -> int:
        """Resident memory of etcd + kube-apiserver (from /proc)."""
        total = 0
        for pid in self.pids():
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        return total

    def api_client(self, limited: bool = False) -> Any:
        """A `kubernetes.client.ApiClient` for the admin (or the `limited`) user."""
        from kubernetes import config

        path = self.limited_kubeconfig_path if limited else self.kubeconfig_path
        return config.new_client_from_config(config_file=path)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 120.0) -> ApiServer:
        t0 = time.monotonic()
        if shutil.which("etcd") is None:
            raise HarnessUnavailable("etcd not found (apt-get install etcd-server)")
        self._binary = find_apiserver_binary()
        make_pki(self.pki)
        (self.pki / "tokens.csv").write_text(
            f"{self.admin_token},admin,admin,system:masters\n{self.limited_token},limited,limited\n"
        )
        self.port = free_port()
        self._start_etcd(timeout)
        self._start_apiserver(timeout)
        self._write_kubeconfig(self.kubeconfig_path, "admin", self.admin_token)
        self._write_kubeconfig(self.limited_kubeconfig_path, "limited", self.limited_token)
        self.start_seconds = time.monotonic() - t0
        return self

    def _start_etcd(self, timeout: float) -> None:
        self.etcd_port, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer}"
        args = [
            "etcd", "--name", "kf", "--data-dir", str(self.dir / "etcd-data"),
            "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"kf={peer_url}", "--listen-metrics-urls", "",
            "--unsafe-no-fsync",
        ]  # fmt: skip
        self._etcd = self._spawn(args, self.log_files["etcd"])
        self._wait_http(f"{client_url}/health", timeout, self._etcd, "etcd")

    def _start_apiserver(self, timeout: float) -> None:
        assert self._binary is not None
        p = self.pki
        args = [
            str(self._binary),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={p / 'server.crt'}", f"--tls-private-key-file={p / 'server.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            f"--token-auth-file={p / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24", "--endpoint-reconciler-type=none",
            "--enable-admission-plugins=NamespaceLifecycle",
            "--disable-admission-plugins=ServiceAccount",
            # as kubeadm and managed clusters run it: privileged pods are Pod Security's call
            "--allow-privileged=true",
            f"--cert-dir={self.dir / 'cert-dir'}",
        ]  # fmt: skip
        self._apiserver = self._spawn(args, self.log_files["apiserver"])
        self._wait_http(f"{self.url}/readyz", timeout, self._apiserver, "kube-apiserver")

    def _spawn(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.dir,
                # PDEATHSIG fires when the *thread* that forked dies: only from the main thread.
                preexec_fn=_die_with_parent
                if threading.current_thread() is threading.main_thread()
                else None,
            )

    def _wait_http(
        self, url: str, timeout: float, proc: subprocess.Popen[bytes], what: str
    ) -> None:
        ctx = ssl.create_default_context(cafile=self.ca_file)
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.admin_token}"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        log = self.log_files["etcd" if what == "etcd" else "apiserver"]
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        self.stop(remove_dir=False)
        raise RuntimeError(f"{what} did not become ready at {url} (log {log}):\n{tail}")

    def _write_kubeconfig(self, path: str, user: str, token: str) -> None:
        Path(path).write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: {self.name}\n  cluster:\n    server: {self.url}\n"
            f"    certificate-authority: {self.ca_file}\n"
            f"users:\n- name: {user}\n  user:\n    token: {token}\n"
            f"contexts:\n- name: {user}@{self.name}\n  context:\n    cluster: {self.name}\n"
            f"    user: {user}\n    namespace: default\n"
            f"current-context: {user}@{self.name}\n"
        )

    @staticmethod
    def _terminate(proc: subprocess.Popen[bytes] | None, grace: float) -> None:
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart_apiserver(self, timeout: float = 120.0) -> float:
        """Stop and start only kube-apiserver (same port, etcd keeps its data); returns seconds."""
        t0 = time.monotonic()
        self._terminate(self._apiserver, APISERVER_GRACE)
        self._start_apiserver(timeout)
        return time.monotonic() - t0

    def stop(self, remove_dir: bool | None = None) -> None:
        """Stop our own two processes (apiserver first), then remove the temp dir."""
        self._terminate(self._apiserver, APISERVER_GRACE)
        self._terminate(self._etcd, 10.0)
        self._apiserver = self._etcd = None
        if remove_dir is None:
            remove_dir = os.environ.get("KF_K8S_KEEP", "") in ("", "0")
        if remove_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
