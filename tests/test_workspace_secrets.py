"""Credentials, links and special files in workspace shipping (issue 20, Medium and Low).

The workspace is copied into the job folder locally and packed into a ConfigMap on a cluster
(readable by anyone who can read ConfigMaps in the namespace). Credential files the old built-in
exclusions missed, links out of the folder, special files and growing files all shipped; a
crafted archive unpacked without bound in the pod.
"""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import types
import warnings
from pathlib import Path

import pytest

from kf_jupyter import entrypoint
from kf_jupyter.errors import ValidationError
from kf_jupyter.workspace import (
    Workspace,
    WorkspaceSecretWarning,
    archive,
    copy_into,
    snapshot_for,
    take_snapshot,
)

#: The issue's list: names the old exclusions missed.
CREDENTIAL_FILES = [
    ".envrc", ".pgpass", ".npmrc", ".vault-token", ".s3cfg", ".bash_history", ".python_history",
    "id_ecdsa", "id_dsa", "kubeconfig", "credentials.json", "service-account.json", "client.p12",
    "putty.ppk", "secrets.toml",
]  # fmt: skip
# Built at run time, so that this file itself holds no key header (it ships in dry runs).
DASHES = "-" * 5
KEY = f"{DASHES}BEGIN OPENSSH PRIVATE KEY{DASHES}\nb3BlbnNzaC1rZXktdjEAAAAA\n{DASHES}END OPENSSH PRIVATE KEY{DASHES}\n"  # fmt: skip
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"
TRAINER = types.SimpleNamespace(func=lambda: None)


def folder(tmp_path: Path) -> Path:
    root = tmp_path / "nb"
    root.mkdir()
    (root / "train.py").write_text("def main():\n    return 1\n")
    for name in CREDENTIAL_FILES:
        (root / name).write_text("password=hunter2\n")
    home_ssh = tmp_path / "home" / ".ssh"
    home_ssh.mkdir(parents=True)
    (home_ssh / "id_rsa").write_text(KEY)
    (root / "notes.txt").symlink_to(home_ssh / "id_rsa")  # a link out of the folder
    (root / "deploy.cfg").write_text(f"aws_key = {AWS_KEY_ID}\n{KEY}")  # any name
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_rsa").write_text(KEY)
    (root / "inner.txt").symlink_to(root / ".ssh" / "id_rsa")  # inside, to an excluded file
    return root


@pytest.mark.reliability(
    scenario="a workspace holding 15 credential files the old exclusions missed, key material "
    "under an innocent name, and links to ~/.ssh/id_rsa",
    area="hostile",
)
def test_credentials_and_links_out_are_not_shipped_and_the_dry_run_says_why(
    tmp_path: Path,
) -> None:
    root = folder(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        snap = snapshot_for(TRAINER, None, str(root))
    assert snap is not None
    assert [f.path for f in snap.files] == ["train.py"]
    # one line, naming what looks secret
    lines = [str(w.message) for w in caught if issubclass(w.category, WorkspaceSecretWarning)]
    assert len(lines) == 1 and "\n" not in lines[0] and "look like credentials" in lines[0]
    summary = snap.summary()
    why = dict(line.split(": ", 1) for line in summary["skipped_why"])
    for name in CREDENTIAL_FILES:
        assert why[name].startswith("a credential file name"), (name, why.get(name))
    assert why["notes.txt"] == "a link out of the workspace (never followed)"
    assert why["deploy.cfg"].startswith("looks like a credential: a private key")
    assert why["inner.txt"].startswith("a link to .ssh/id_rsa")
    assert set(summary["credentials"]) >= {*CREDENTIAL_FILES, "deploy.cfg", "inner.txt"}
    # what actually travels: the archive (cluster) and the copy (local)
    with tarfile.open(fileobj=io.BytesIO(archive(snap)), mode="r:gz") as tar:
        assert tar.getnames() == ["train.py"]
    copy_into(snap, tmp_path / "copy")
    assert sorted(os.listdir(tmp_path / "copy")) == ["train.py"]


def test_a_kfignore_line_can_ship_a_file_the_scan_would_hold_back(tmp_path: Path) -> None:
    root = tmp_path / "nb"
    root.mkdir()
    (root / "parse_keys.py").write_text(f"HEADER = '''{KEY}'''\n")
    (root / "test.pem").write_text("not a key\n")
    snap = take_snapshot(Workspace(), str(root))
    assert snap.files == ()
    (root / ".kfignore").write_text("!parse_keys.py\n!test.pem\n")
    snap = take_snapshot(Workspace(), str(root))
    assert sorted(f.path for f in snap.files) == [".kfignore", "parse_keys.py", "test.pem"]


def test_special_and_growing_files_respect_the_limit_on_bytes_read(tmp_path: Path) -> None:
    """A /proc file lists as 0 bytes; a file can grow after the listing: the copy wrote 5.4 MB
    under a 1 KiB limit. Only regular files ship, and the bytes read are what count."""
    root = tmp_path / "nb"
    root.mkdir()
    (root / "status").symlink_to("/proc/self/status")
    os.mkfifo(root / "pipe")
    (root / "log.txt").write_text("x" * 10)
    snap = take_snapshot(Workspace(max_bytes=1024), str(root))
    assert [f.path for f in snap.files] == ["log.txt"]
    why = dict(snap.reasons)
    assert why["status"].startswith("a link out") and why["pipe"].startswith("not a file")
    (root / "log.txt").write_text("x" * 5_000_000)  # grows after the listing
    with pytest.raises(ValidationError, match=r"more than the 1\.0 KiB left"):
        copy_into(snap, tmp_path / "copy")
    with pytest.raises(ValidationError, match=r"more than the 1\.0 KiB left"):
        archive(snap)


def bomb(size: int, header: dict[str, str] | None = None) -> bytes:
    """A small tar.gz holding one file of `size` zero bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT, pax_headers=header) as t:
        info = tarfile.TarInfo("zeros.py")
        info.size = size

        class Zeros(io.RawIOBase):
            left = size

            def readable(self) -> bool:
                return True

            def readinto(self, b: bytearray) -> int:  # type: ignore[override]
                n = min(len(b), self.left)
                b[:n] = bytes(n)
                self.left -= n
                return n

        t.addfile(info, io.BufferedReader(Zeros()))
    return gzip.compress(raw.getvalue(), 9)


@pytest.mark.reliability(
    scenario="a 64 KiB workspace archive that unpacks to 64 MiB in the pod", area="hostile"
)
def test_the_pod_side_unpack_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path / "pod-tmp"))
    (tmp_path / "pod-tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)
    packed = tmp_path / "workspace.tar.gz"
    packed.write_bytes(bomb(64 << 20))
    assert packed.stat().st_size < 128 << 10
    with pytest.raises(RuntimeError, match="unpacks to more than its limit"):
        entrypoint._kfj_unpack_workspace(str(packed))
    # the archive's own limit (the workspace's max_bytes) holds too
    packed.write_bytes(bomb(3000, {"KF_JUPYTER.max_bytes": "2000"}))
    with pytest.raises(RuntimeError, match="2000 bytes"):
        entrypoint._kfj_unpack_workspace(str(packed))
    assert os.listdir(tmp_path / "pod-tmp") == []  # nothing was written
    # what kf-jupyter packs unpacks
    root = tmp_path / "nb"
    root.mkdir()
    (root / "a.py").write_text("A = 1\n")
    packed.write_bytes(archive(take_snapshot(Workspace(max_bytes=100), str(root))))
    out = entrypoint._kfj_unpack_workspace(str(packed))
    assert Path(out, "a.py").read_text() == "A = 1\n"
