"""Put the STAND-IN `nvidia-smi` (tests/standins/nvidia_smi.py) first on PATH, reporting N GPUs.

There is no GPU on the machines these tests run on; the stand-in answers the queries the local
backend makes, so discovery, the allocator and every rank's environment are tested with real jobs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "standins" / "nvidia_smi.py"


def uuid_of(i: int) -> str:
    """The stand-in's UUID of device `i` (shaped like a real one)."""
    return f"GPU-{i:08x}-5ta1-4d1n-9a0e-{i:012x}"


class StandinSMI:
    """The stand-in's folder: change the devices it reports, read the calls it got."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def set_devices(self, n: int, name: str = "Stand-in GPU", fail: bool = False) -> None:
        """Report `n` devices (or fail as without a driver)."""
        devices = [
            {"index": i, "uuid": uuid_of(i), "name": name, "memory_mib": 81920} for i in range(n)
        ]
        (self.folder / "nvidia-smi.json").write_text(json.dumps({"devices": devices, "fail": fail}))

    def calls(self) -> list[str]:
        """The argument lines it was called with."""
        path = self.folder / "calls.log"
        return path.read_text().splitlines() if path.exists() else []


def install(folder: Path, n: int) -> StandinSMI:
    """Write the stand-in into `folder` as an executable `nvidia-smi` reporting `n` devices."""
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "nvidia-smi"
    exe.write_text(f"#!{sys.executable}\n" + SOURCE.read_text())
    exe.chmod(0o755)
    smi = StandinSMI(folder)
    smi.set_devices(n)
    return smi
