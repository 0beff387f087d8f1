"""Sweeps on the local backend: a detached driver process per sweep, its record on disk.

`<state>/sweeps/<name>/` (owner-only, like a job folder):

- `sweep.json`: the sweep's record (`engine.new_record`): spec, status, every trial's
  parameters, status, metrics and curve, events, the driver's pid. Written atomically by the
  driver under `.lock`; read by any process (a restarted kernel, another notebook, the server).
- `template.pkl`: the trial template (trainer, runtime, RuntimeConfig, options) as the kernel
  built it, the function as its source; the driver reads it and deletes it (it may hold
  `RuntimeConfig.env` values).
- `cancel`: present once someone asked to cancel; the driver is also sent SIGTERM.
- `driver.log`: the driver's own output (empty unless it crashed).

The driver (`python -m kf_jupyter.sweeps.driver`, in its own session, like a job's supervisor)
runs the `SweepEngine` with the kernel's environment, working directory and backend config, so
each trial is the job `train()` would have started from the kernel (warm, in the same state
directory). The kernel can go: the sweep goes on, and any process lists, follows, cancels and
deletes it from the folder. If the driver itself is killed, the next read says `Failed` /
`DriverLost` (no trial starts any more; running trials go on until deleted).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pickle
import random
import re
import shutil
import signal
import string
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.local import supervisor as sv
from ..backends.local.config import LocalBackendConfig
from ..errors import JobNotFoundError, ValidationError
from . import engine as eng

REASON_DRIVER_LOST = "DriverLost"
SWEEPS = "sweeps"


def new_name() -> str:
    """A sweep name as the SDK makes one: a letter and 11 hex digits."""
    return random.choice(string.ascii_lowercase) + uuid.uuid4().hex[:11]


#: A sweep's name: an RFC 1035 label (its trials are the jobs `<sweep>-trial-<n>`, its record
#: a folder or a ConfigMap, its label value the name), at most 63 characters.
SWEEP_NAME_MAX = 63
_SWEEP_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def validate_sweep_name(name: Any, num_trials: int = 0) -> str:
    """`name` if it can name a sweep (of `num_trials` trials, each `<name>-trial-<n>` a job
    name of at most 63 characters), else a one-paragraph `ValidationError` with the rule (a
    5,000-character name never reaches the file system)."""
    longest = len(f"-trial-{num_trials}") if num_trials else 0
    ok = isinstance(name, str) and _SWEEP_NAME.fullmatch(name) is not None
    if ok and len(name) + longest <= SWEEP_NAME_MAX:
        return name
    shown = (
        repr(name)
        if len(repr(name)) <= 80
        else f"{repr(name)[:60]}... ({len(str(name))} characters)"
    )
    room = f"at most {SWEEP_NAME_MAX} characters"
    if num_trials:
        room += f" ({SWEEP_NAME_MAX - longest} for {num_trials} trials: each trial's job is "
        room += f"<sweep>-trial-<n>, at most {SWEEP_NAME_MAX} characters)"
    raise ValidationError(
        f"{shown} is not a sweep name: a sweep's name is an RFC 1035 label (lowercase letters, "
        f"digits and '-', starting with a letter, not ending with '-') of {room}. "
        "optimize() names each sweep (a letter and 11 hex digits); OptimizerClient().list_jobs() "
        "lists the sweeps and their names."
    )


def cpu_budget() -> int:
    """The CPUs this process may use (its affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def driver_command(module: str, folder: Path) -> list[str]:
    """The command that starts a sweep's driver (`module`'s `main(folder)`): `python -I`, so
    neither the working directory (a notebook's folder holding a `copy.py` or `json.py`) nor
    `PYTHON*` variables nor the user's site directory change what it imports; kf-jupyter's own
    folder is put after the standard library and site-packages (where it is found first when
    installed), so the driver imports the kf-jupyter the kernel runs."""
    package_root = str(Path(__file__).resolve().parents[2])
    code = (
        "import sys; sys.path.append(sys.argv.pop(1)); "
        f"from {module} import main; main(sys.argv[1])"
    )
    return [sys.executable, "-I", "-c", code, package_root, str(folder)]


# -- the template, as the driver gets it -------------------------------------------------------


@dataclass
class _Source:
    """A function travelling as its source (the job ships the source anyway)."""

    source: str
    name: str
    argv0: str = ""


def _stub(src: _Source) -> Any:
    ns: dict[str, Any] = {}
    code = f"def {src.name}(*args, **kwargs):\n    raise RuntimeError('runs only in a job')\n"
    exec(compile(code, f"<kf-jupyter sweep: {src.name}>", "exec"), ns)
    fn = ns[src.name]
    fn.__kf_source__ = src.source
    if src.argv0:
        fn.__kf_argv0__ = src.argv0
    return fn


def encode_template(template: eng.TrialTemplate) -> bytes:
    """The template as bytes for the driver (the function as its source)."""
    from ..program import function_source

    trainer = copy.copy(template.trainer)
    func = getattr(trainer, "func", None)
    if func is not None:
        fs = function_source(func)
        trainer.func = _Source(fs.source, fs.name, getattr(func, "__kf_argv0__", "") or "")
    t = eng.TrialTemplate(trainer, template.runtime, template.runtime_config, template.options)
    try:
        return pickle.dumps(t)
    except Exception as exc:
        raise ValidationError(
            f"The sweep's trial template cannot be handed to the sweep's driver process ({exc}). "
            "Use kf-jupyter's or the Kubeflow SDK's options and plain values (strings, numbers, "
            "lists, dicts) in the trainer, RuntimeConfig and options."
        ) from None


def decode_template(data: bytes) -> eng.TrialTemplate:
    """The inverse of `encode_template` (the function becomes a stub carrying its source)."""
    t: eng.TrialTemplate = pickle.loads(data)
    if isinstance(getattr(t.trainer, "func", None), _Source):
        t.trainer.func = _stub(t.trainer.func)
    return t


def read_handover(folder: Path, remove: tuple[str, ...]) -> tuple[eng.TrialTemplate, Any]:
    """What a sweep's driver is handed in its folder: the trial template (`template.pkl`) and
    the backend config (`config.pkl`, our own owner-only file). The files named in `remove`
    are deleted once read, whether reading worked or not (a config may carry a token)."""
    try:
        template = decode_template((folder / "template.pkl").read_bytes())
        with open(folder / "config.pkl", "rb") as fh:
            config = pickle.load(fh)
    finally:
        for f in remove:
            with contextlib.suppress(OSError):
                (folder / f).unlink()
    return template, config


# -- the record on disk ------------------------------------------------------------------------


class FileStore:
    """`engine.SweepStore` on a sweep folder.

    A finished trial's curves (`history`, up to `metrics.MAX_POINTS` values per metric) are
    written once, to `curves/<index>.json`, and leave the record (the trial keeps
    `"curves": true`): `sweep.json` holds only each trial's parameters, status and summaries,
    so a save of a 1,000-trial sweep writes well under a megabyte whatever its curves, and the
    driver does not keep every trial's curve in memory."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cancelled = threading.Event()

    @property
    def path(self) -> Path:
        return self.folder / "sweep.json"

    def _move_curves(self, record: dict[str, Any]) -> None:
        for trial in record.get("trials") or []:
            history = trial.get("history")
            if not history:
                continue
            write_curves(self.folder, trial["index"], history)
            trial["history"] = {}
            trial["curves"] = True

    def save(self, record: dict[str, Any]) -> None:
        """Write the record (keeping the driver's pid a reader may have added); a finished
        trial's curves go to their own file first (see the class docstring)."""
        self._move_curves(record)
        with sv.job_lock(str(self.folder)):
            if record.get("driver_pid") is None or record.get("driver_create_time") is None:
                with contextlib.suppress(OSError, ValueError):
                    disk = sv.read_json(str(self.path))
                    for key in ("driver_pid", "driver_create_time"):
                        if record.get(key) is None and disk.get(key) is not None:
                            record[key] = disk[key]
            write_json(self.path, record)

    def cancel_requested(self) -> bool:
        """A SIGTERM, or the `cancel` file."""
        return self.cancelled.is_set() or (self.folder / "cancel").exists()


CURVES = "curves"


def write_json(path: Path, data: Any) -> None:
    """Write compact JSON to `path` atomically (a temporary file, then a rename); owner-only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        text = json.dumps(data, separators=(",", ":"))
        with os.fdopen(sv.private_open(str(tmp)), "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_curves(folder: Path, index: int, history: dict[str, Any]) -> None:
    """Write trial `index`'s curves to `<folder>/curves/<index>.json` (owner-only, atomic)."""
    d = folder / CURVES
    d.mkdir(mode=sv.PRIVATE_DIR, exist_ok=True)
    write_json(d / f"{int(index)}.json", history)


def read_curves(folder: Path, record: dict[str, Any]) -> dict[str, Any]:
    """`record` with each trial's curves (`history`) read back from `curves/` (a trial whose
    file is unreadable keeps `{}`)."""
    for trial in record.get("trials") or []:
        if trial.get("curves") and not trial.get("history"):
            with contextlib.suppress(OSError, ValueError):
                trial["history"] = sv.read_json(
                    str(folder / CURVES / f"{int(trial['index'])}.json")
                )
    return record


class LocalSweeps:
    """Start, read, cancel and delete local sweeps (any process, same state directory)."""

    def __init__(self, config: LocalBackendConfig | None = None) -> None:
        self.config = config or LocalBackendConfig()

    @property
    def root(self) -> Path:
        """`<state>/sweeps`."""
        return self.config.resolved_state_dir / SWEEPS

    def folder(self, name: str) -> Path:
        """The folder of sweep `name` (a clear error if there is none)."""
        d = self.root / validate_sweep_name(name)
        if not (d / "sweep.json").is_file():
            raise JobNotFoundError(
                f"No sweep named {name!r} in {self.root}. OptimizerClient().list_jobs() lists "
                "the sweeps."
            )
        return d

    def _client(self) -> Any:
        from ..client import TrainerClient

        return TrainerClient(self.config)

    # -- start ----------------------------------------------------------------------------------

    def start(self, spec: eng.SweepSpec, template: eng.TrialTemplate) -> str:
        """Check the template, write the sweep's folder, start its driver; return the name."""
        validate_sweep_name(spec.name, spec.num_trials)
        record = eng.new_record(spec, "local")
        first = record["trials"][0]
        client = self._client()
        trainer, runtime, rc, opts = template.for_trial(spec.name, 1, first["parameters"])
        client.dry_run(trainer, runtime=runtime, runtime_config=rc, options=opts)  # bad input
        cfg = copy.copy(self.config)
        cfg.cwd = str(Path(self.config.cwd or os.getcwd()).resolve())
        cfg.state_dir = str(self.config.resolved_state_dir)
        data = encode_template(template)
        d = self.root / spec.name
        self.root.mkdir(mode=sv.PRIVATE_DIR, parents=True, exist_ok=True)
        try:
            d.mkdir(mode=sv.PRIVATE_DIR)
        except FileExistsError:
            raise ValidationError(f"A sweep named {spec.name!r} already exists.") from None
        try:
            with os.fdopen(sv.private_open(str(d / "template.pkl")), "wb") as fh:
                fh.write(data)
            with os.fdopen(sv.private_open(str(d / "config.pkl")), "wb") as fh:
                pickle.dump(cfg, fh)
            record["cwd"] = cfg.cwd
            FileStore(d).save(record)
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
            with os.fdopen(sv.private_open(str(d / "driver.log"), flags), "ab") as out:
                proc = subprocess.Popen(
                    driver_command("kf_jupyter.sweeps.driver", d),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=cfg.cwd,
                    start_new_session=True,
                    close_fds=True,
                )
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            raise
        threading.Thread(target=proc.wait, name="kf-jupyter-sweep-reaper", daemon=True).start()
        ident = sv.process_identity(proc.pid)

        def note(rec: dict[str, Any]) -> None:
            rec.setdefault("driver_pid", proc.pid)
            rec.setdefault("driver_create_time", ident)

        self._update(d, note)
        return spec.name

    @staticmethod
    def _update(d: Path, change: Any) -> dict[str, Any]:
        with sv.job_lock(str(d)):
            rec = sv.read_json(str(d / "sweep.json"))
            change(rec)
            sv.atomic_write_json(str(d / "sweep.json"), rec)
        return rec

    # -- read -----------------------------------------------------------------------------------

    @staticmethod
    def _driver_alive(rec: dict[str, Any]) -> bool:
        pid = rec.get("driver_pid")
        if not pid:
            return True  # being started
        return sv.same_process(int(pid), rec.get("driver_create_time"))

    def read(self, name: str, curves: bool = False) -> dict[str, Any]:
        """The sweep's record (a driver gone without a word is said: `Failed`/`DriverLost`);
        with `curves`, each finished trial's curves under `history` (read from their files)."""
        rec = self._read(name)
        return read_curves(self.folder(name), rec) if curves else rec

    def _read(self, name: str) -> dict[str, Any]:
        d = self.folder(name)
        rec = sv.read_json(str(d / "sweep.json"))
        if rec.get("status") in eng.SWEEP_TERMINAL or self._driver_alive(rec):
            return rec
        time.sleep(0.1)
        rec = sv.read_json(str(d / "sweep.json"))
        if rec.get("status") in eng.SWEEP_TERMINAL or self._driver_alive(rec):
            return rec
        message = (
            "The sweep's driver process is gone (killed, or the machine restarted): no more "
            "trials start. Trials already running go on; delete the sweep to stop them."
        )

        def lost(r: dict[str, Any]) -> None:
            if r.get("status") not in eng.SWEEP_TERMINAL:
                r.update(status=eng.FAILED, reason=REASON_DRIVER_LOST, message=message)
                r["finished"] = eng.now_iso()

        return self._update(d, lost)

    def list(self) -> list[dict[str, Any]]:
        """Every sweep's record, oldest first."""
        out = []
        if not self.root.is_dir():
            return out
        for d in sorted(self.root.iterdir()):
            if (d / "sweep.json").is_file():
                with contextlib.suppress(OSError, ValueError, JobNotFoundError):
                    out.append(self.read(d.name))
        out.sort(key=lambda r: r.get("created") or "")
        return out

    # -- cancel, delete ---------------------------------------------------------------------------

    def cancel(self, name: str, timeout: float = 60.0) -> dict[str, Any]:
        """Stop the sweep: no new trial starts, running trials are cancelled (their jobs and
        logs are kept), finished ones kept; `Failed` / `Cancelled`. Returns the record."""
        d = self.folder(name)
        rec = self.read(name)
        if rec.get("status") in eng.SWEEP_TERMINAL:
            return rec
        with contextlib.suppress(OSError):
            os.close(sv.private_open(str(d / "cancel")))
        pid = rec.get("driver_pid")
        if pid and self._driver_alive(rec):
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                rec = self.read(name)
                if rec.get("status") in eng.SWEEP_TERMINAL:
                    return rec
                time.sleep(0.1)
        # No driver (never started, or lost): cancel its running trials here.
        client = self._client()
        for t in eng.trials_of(rec, [eng.TRIAL_RUNNING]):
            with contextlib.suppress(Exception):
                client.backend.cancel_job(t["name"])

        def cancelled(r: dict[str, Any]) -> None:
            for t in r["trials"]:
                if t["status"] in (eng.TRIAL_RUNNING, eng.PENDING):
                    t.update(status=eng.CANCELLED, reason=eng.CANCELLED, finished=eng.now_iso())
            if r.get("status") not in eng.SWEEP_TERMINAL or r.get("reason") == REASON_DRIVER_LOST:
                r.update(status=eng.FAILED, reason=eng.REASON_CANCELLED)
                r.update(message="The sweep was cancelled.", finished=eng.now_iso())

        return self._update(d, cancelled)

    def delete(self, name: str) -> None:
        """Cancel the sweep if it runs, delete its trials' jobs and its folder."""
        d = self.folder(name)
        rec = self.cancel(name)
        client = self._client()
        for t in rec["trials"]:
            if t["status"] != eng.PENDING and t.get("submitted"):
                with contextlib.suppress(JobNotFoundError):
                    client.delete_job(t["name"])
        shutil.rmtree(d, ignore_errors=True)
