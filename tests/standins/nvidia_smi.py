"""A STAND-IN for `nvidia-smi` (this machine has no GPU): it answers the one query form kf-jupyter
uses, `--query-gpu=FIELDS --format=csv,noheader,nounits`, for the devices listed in the JSON file
next to it (`nvidia-smi.json`, written by tests/gpu_standin.py). It never touches a driver.

Fields: index, uuid, name, memory.total, memory.used, utilization.gpu. `{"fail": true}` in the
file makes it fail as nvidia-smi does without a loaded driver (exit code 9).
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    with open(os.path.join(HERE, "nvidia-smi.json"), encoding="utf-8") as fh:
        conf = json.load(fh)
    with open(os.path.join(HERE, "calls.log"), "a", encoding="utf-8") as fh:
        fh.write(" ".join(argv) + "\n")
    if conf.get("fail"):
        print(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running."
        )
        return 9
    fields = None
    for arg in argv:
        if arg.startswith("--query-gpu="):
            fields = arg.split("=", 1)[1].split(",")
    if fields is None or "--format=csv,noheader,nounits" not in argv:
        sys.stderr.write(
            "stand-in nvidia-smi: only --query-gpu=... --format=csv,noheader,nounits\n"
        )
        return 2
    for dev in conf["devices"]:
        i = dev["index"]
        values = {
            "index": str(i),
            "uuid": dev["uuid"],
            "name": dev.get("name", "Stand-in GPU"),
            "memory.total": str(dev.get("memory_mib", 81920)),
            "memory.used": str(100 * (i + 1)),
            "utilization.gpu": str(10 * i + 7),
        }
        print(", ".join(values[f] for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
