"""The detached process that runs one local sweep (`kf_jupyter.sweeps.local` starts it).

It reads the sweep's folder (record, template, backend config), runs the `SweepEngine` with
kf-jupyter's local `TrainerClient` and the machine's CPU budget, and exits when the sweep ends.
SIGTERM (or the folder's `cancel` file) cancels the sweep.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
from pathlib import Path


def main(folder: str) -> None:
    """Run the sweep in `folder` to its end."""
    from ..backends.local import supervisor as sv
    from ..client import TrainerClient
    from . import engine as eng
    from .local import FileStore, cpu_budget, decode_template

    os.umask(0o077)
    d = Path(folder)
    store = FileStore(d)
    signal.signal(signal.SIGTERM, lambda *_: store.cancelled.set())
    record = sv.read_json(str(d / "sweep.json"))
    record["driver_pid"] = os.getpid()
    record["driver_create_time"] = sv.process_identity(os.getpid())
    try:
        template = decode_template((d / "template.pkl").read_bytes())
        with open(d / "config.pkl", "rb") as fh:
            config = pickle.load(fh)
    finally:
        for f in ("template.pkl",):
            with contextlib.suppress(OSError):
                (d / f).unlink()
    spec = eng.SweepSpec.from_dict(record["spec"])
    client = TrainerClient(config)
    engine = eng.SweepEngine(client, spec, template, store, record=record, cpu_budget=cpu_budget())
    try:
        engine.run()
    except BaseException as exc:  # say it in the record, then let it show in driver.log
        with contextlib.suppress(Exception):
            engine.record.update(
                status=eng.FAILED,
                reason="DriverFailed",
                message=f"The sweep's driver failed: {type(exc).__name__}: {exc}",
                finished=eng.now_iso(),
            )
            store.save(engine.record)
        raise


if __name__ == "__main__":
    main(sys.argv[1])
