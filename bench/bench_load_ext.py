"""How long `%load_ext kf_jupyter` takes (target ≤ 150 ms), and what it imports.

Each sample is a fresh Python process: it starts IPython's InteractiveShell, then times
`%load_ext kf_jupyter` alone. Prints every sample, the median, and the heavy modules loaded.

    .venv/bin/python bench/bench_load_ext.py [samples]
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
before = set(sys.modules)
t0 = time.perf_counter()
shell.run_line_magic("load_ext", "kf_jupyter")
ms = (time.perf_counter() - t0) * 1000
heavy = ("kubernetes", "torch", "jax", "ipywidgets", "yaml", "xgboost", "numpy", "mpi4py")
loaded = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in heavy)
assert "torchtrain" in shell.magics_manager.magics["cell"]
print(json.dumps({"ms": ms, "heavy": sorted({m.split(".")[0] for m in loaded}),
                  "modules": len(set(sys.modules) - before)}))
"""


def main() -> None:
    """Run the samples and print the figures."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    samples = []
    for _ in range(n):
        out = subprocess.run(
            [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True
        ).stdout
        samples.append(json.loads(out.strip().splitlines()[-1]))
    times = [s["ms"] for s in samples]
    print("load_ext samples (ms):", ", ".join(f"{t:.1f}" for t in times))
    print(f"median {statistics.median(times):.1f} ms  (target <= 150 ms)")
    print(f"modules imported by %load_ext: {samples[-1]['modules']}")
    print("heavy modules imported:", samples[-1]["heavy"] or "none")
    ok = statistics.median(times) <= 150 and not samples[-1]["heavy"]
    print("RESULT:", "PASS" if ok else "FAIL")


if __name__ == "__main__":
    main()
