"""Python environments for local jobs: use the kernel's when it has the packages, else a layered one.

A layered environment is a venv with `--system-site-packages` on top of the kernel's python,
built once per distinct (python, sorted packages, index URLs) under `<state>/envs/<hash>` with a
file lock, so concurrent jobs never build it twice and later jobs reuse it at no cost.

A job whose environment is not built yet builds it as its first phase (docs/local-backend.md,
"Packages"): its supervisor runs `python -m kf_jupyter.backends.local.envs` (`main`), which
echoes pip's output into the job's `install.log` while the job reads "Package environment:
installing N packages…".
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from ...config import mask_secrets
from ...errors import PackageInstallError

#: Defines kfj_check(specs) -> bool: every requirement is installed (run in the target python).
_CHECK = r"""
import json, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement

def ok(spec, seen):
    req = Requirement(spec)
    if req.marker is not None and not req.marker.evaluate():
        return True
    try:
        dist = metadata.distribution(req.name)
    except metadata.PackageNotFoundError:
        return False
    if req.specifier and not req.specifier.contains(dist.version, prereleases=True):
        return False
    for extra in req.extras:
        for sub in dist.requires or []:
            r = Requirement(sub)
            if r.marker is not None and r.marker.evaluate({"extra": extra}) and not (
                r.marker.evaluate({"extra": ""})
            ):
                key = (r.name.lower(), str(r.specifier))
                if key not in seen:
                    seen.add(key)
                    if not ok(str(r).split(";")[0], seen):
                        return False
    return True

def kfj_check(specs):
    seen = set()
    return all(ok(s, seen) for s in specs)
"""

_CHECK_MAIN = 'print("1" if kfj_check(json.loads(sys.argv[1])) else "0")\n'


def satisfied(python: str, packages: Sequence[str]) -> bool:
    """All `packages` (pip requirements) are installed in `python`'s environment."""
    if not packages:
        return True
    if python == sys.executable:
        namespace: dict[str, object] = {}
        exec(compile(_CHECK, "<kf-jupyter package check>", "exec"), namespace)
        try:
            return bool(namespace["kfj_check"](list(packages)))  # type: ignore[operator]
        except Exception:
            return False
    proc = subprocess.run(
        [python, "-c", _CHECK + _CHECK_MAIN, json.dumps(list(packages))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode == 0 and proc.stdout.strip() == "1"


def env_key(python: str, packages: Sequence[str], index_urls: Sequence[str]) -> str:
    """The hash naming the layered environment of this (python, packages, index URLs)."""
    data = json.dumps(
        [os.path.realpath(python), sorted(packages), list(index_urls)], separators=(",", ":")
    )
    return hashlib.sha256(data.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


_SITE_DIRS = (
    "import json, site, sys, sysconfig\n"
    "paths = [sysconfig.get_paths()[k] for k in ('purelib', 'platlib')]\n"
    "paths += site.getsitepackages()\n"
    "print(json.dumps([p for i, p in enumerate(paths) if p not in paths[:i]]))\n"
)


def _site_dirs(python: str) -> list[str]:
    out = subprocess.run([python, "-c", _SITE_DIRS], capture_output=True, text=True, check=True)
    return [str(p) for p in json.loads(out.stdout)]


def _link_base_site(python: str, env_python: Path, target: Path) -> None:
    """Make the env see the base python's own site-packages (after its own).

    `--system-site-packages` exposes the *base interpreter's* site-packages; when `python` is
    itself a venv (the usual kernel), its packages would be invisible. A .pth file that calls
    site.addsitedir() on each of its site dirs adds them, their .pth files included.
    """
    base = _site_dirs(python)
    own = set(_site_dirs(str(env_python)))
    lines = [f"import site; site.addsitedir({d!r})\n" for d in base if d not in own]
    env_site = next(
        d
        for d in _site_dirs(str(env_python))
        if d.startswith(str(target)) and d.endswith("site-packages")
    )
    pth = Path(env_site, "_kf_jupyter_base.pth")
    pth.write_text("".join(lines))
    pth.chmod(0o600)


def _pip_index_env(index_urls: Sequence[str]) -> dict[str, str]:
    """PIP_INDEX_URL / PIP_EXTRA_INDEX_URL for these index URLs (first, then the others)."""
    env: dict[str, str] = {}
    if index_urls:
        env["PIP_INDEX_URL"] = index_urls[0]
    if len(index_urls) > 1:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(index_urls[1:])
    return env


def _owner_only(root: Path) -> None:
    """Remove group and other permission bits from everything under `root` (links skipped)."""
    for d, dirs, files in os.walk(root):
        for entry in [*dirs, *files]:
            path = os.path.join(d, entry)
            with contextlib.suppress(OSError):
                mode = os.lstat(path).st_mode
                if not stat.S_ISLNK(mode) and mode & 0o077:
                    os.chmod(path, stat.S_IMODE(mode) & ~0o077)


#: The `torchrun` of a layered environment whose torch comes from the kernel's environment (the
#: warm pool knows this exact text: warm/pool.py).
TORCHRUN_WRAPPER = '#!/bin/sh\nexec "{python}" -m torch.distributed.run "$@"\n'


def env_python_of(
    python: str, packages: Sequence[str], index_urls: Sequence[str], envs_dir: Path
) -> tuple[Path, bool]:
    """(the python the layered environment for these packages has, whether it is built)."""
    target = envs_dir / env_key(python, packages, index_urls)
    return target / "bin" / "python", (target / ".kf-jupyter-ready").exists()


def _run_logged(argv: list[str], log: IO[bytes], echo: IO[bytes] | None, **kw: object) -> int:
    """Run `argv` with its output in `log` and, line by line as it comes, in `echo` too
    (credentials masked there: the job's install.log)."""
    if echo is None:
        return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, **kw).returncode  # type: ignore[call-overload]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)  # type: ignore[call-overload]
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        log.flush()
        echo.write(mask_secrets(line.decode(errors="replace")).encode())
        echo.flush()
    return int(proc.wait())


def layered_env(
    python: str,
    packages: Sequence[str],
    index_urls: Sequence[str],
    envs_dir: Path,
    echo: IO[bytes] | None = None,
) -> Path:
    """The python of the layered environment for these packages, built on first use; pip's
    output also goes to `echo` as it comes, when given.

    Raises PackageInstallError (with the end of pip's log, credentials masked) if pip fails.
    """
    envs_dir.mkdir(parents=True, exist_ok=True)
    envs_dir.chmod(0o700)  # pip's logs may name the index; only the owner reads the store
    key = env_key(python, packages, index_urls)
    target = envs_dir / key
    env_python = target / "bin" / "python"
    ready = target / ".kf-jupyter-ready"
    if ready.exists():
        return env_python
    with _locked(envs_dir / f"{key}.lock"):
        if ready.exists():
            return env_python
        if target.exists():
            shutil.rmtree(target)
        log_path = envs_dir / f"{key}.pip.log"
        with os.fdopen(
            os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb"
        ) as log:
            venv = _run_logged(
                [python, "-m", "venv", "--system-site-packages", "--without-pip", str(target)],
                log,
                echo,
                umask=0o077,  # the store is owner-only (docs/local-backend.md)
            )
            # Index URLs (maybe with credentials) go to pip through its environment, never its
            # argv: every local user can read a process's command line.
            pip_env = {**os.environ, **_pip_index_env(index_urls), "PIP_REQUIRE_VIRTUALENV": "0"}
            pip = None
            if venv == 0:
                _link_base_site(python, env_python, target)
                pip = _run_logged(
                    [
                        python,
                        "-m",
                        "pip",
                        "--python",
                        str(env_python),
                        "install",
                        "--disable-pip-version-check",
                        "--no-input",
                        "--no-warn-script-location",
                        *packages,
                    ],
                    log,
                    echo,
                    env=pip_env,
                    umask=0o077,
                )
        if venv != 0 or pip is None or pip != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
            shutil.rmtree(target, ignore_errors=True)
            raise PackageInstallError(
                mask_secrets(
                    f"Installing {', '.join(packages)} for the job failed (pip's log: "
                    f"{log_path}). Check the package names and versions and that the index "
                    f"is reachable, then run again. The end of pip's log:\n{tail}"
                )
            )
        torchrun = target / "bin" / "torchrun"
        if not torchrun.exists():
            torchrun.write_text(TORCHRUN_WRAPPER.format(python=env_python))
            torchrun.chmod(0o700)
        _owner_only(target)  # venv copies its activate scripts 0644 whatever the umask
        ready.write_text(json.dumps({"packages": sorted(packages)}))
        ready.chmod(0o600)
    return env_python


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kf_jupyter.backends.local.envs ENVS_DIR PYTHON ERROR_FILE PACKAGE...`: build
    the layered environment (the index URLs come from the `KF_JUPYTER_PIP_INDEX_<i>`
    variables, never the command line), pip's output on stdout; on failure the error's
    paragraph goes to ERROR_FILE and the exit code is 1. A job's supervisor runs it as the
    job's first phase."""
    from ...program import INDEX_ENV

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4:
        sys.stderr.write("usage: envs.py ENVS_DIR PYTHON ERROR_FILE PACKAGE...\n")
        return 2
    envs_dir, python, error_file, packages = Path(args[0]), args[1], args[2], args[3:]
    index_urls = []
    while INDEX_ENV.format(len(index_urls)) in os.environ:
        index_urls.append(os.environ[INDEX_ENV.format(len(index_urls))])
    try:
        layered_env(python, packages, index_urls, envs_dir, echo=sys.stdout.buffer)
    except PackageInstallError as exc:
        fd = os.open(error_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
