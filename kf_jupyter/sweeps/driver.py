"""The detached process that runs one local sweep (`kf_jupyter.sweeps.local` starts it).

It reads the sweep's folder (record, template, backend config), runs the `SweepEngine` with
kf-jupyter's local `TrainerClient` and the machine's CPU budget, and exits when the sweep ends.
SIGTERM (or the folder's `cancel` file) cancels the sweep.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def main(folder: str) -> None:
    """Run the sweep in `folder` to its end."""
    from ..backends.local import supervisor as sv
    from ..client import TrainerClient
    from . import engine as eng
    from .local import FileStore, cpu_budget, read_handover

    os.umask(0o077)
    d = Path(folder)
    store = FileStore(d)
    signal.signal(signal.SIGTERM, lambda *_: store.cancelled.set())
    record = sv.read_json(str(d / "sweep.json"))
    record["driver_pid"] = os.getpid()
    record["driver_create_time"] = sv.process_identity(os.getpid())
    template, config = read_handover(d, remove=("template.pkl",))
    spec = eng.SweepSpec.from_dict(record["spec"])
    client = TrainerClient(config)
    engine = eng.SweepEngine(client, spec, template, store, record=record, cpu_budget=cpu_budget())
    eng.run_to_end(engine, store)


if __name__ == "__main__":
    main(sys.argv[1])
