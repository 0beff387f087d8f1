"""TEST STAND-IN for the `tune` CLI of the torchtune trainer image (`ghcr.io/kubeflow/trainer/
torchtune-trainer`), which cannot run here: it needs the pre-trained model and dataset the
initializers download, and GPUs. The harness puts it on the PATH of every pod as `tune`.

It checks the command line the Trainer builds for a `tune run` TrainJob (torch.go:175-200 at
v2.3.0: `tune run [--rdzv_endpoint=HOST:PORT] <recipe> --config <config> <runtime overrides>
<user overrides>`), refuses what `tune run` refuses (an unknown recipe, no `--config`, an override
that is not `key=value`), then prints a few training-log lines of torchtune's shape (one per step,
`epochs` x `max_steps_per_epoch` steps, 3 per epoch when unset) and exits 0. It trains nothing.
"""

from __future__ import annotations

import os
import sys

RECIPES = (
    "full_finetune_single_device",
    "full_finetune_distributed",
    "lora_finetune_single_device",
    "lora_finetune_distributed",
)


def main(argv: list[str]) -> int:
    """`tune run ...` as described above; 1 with torchtune's kind of message on bad input."""
    if argv[:1] != ["run"]:
        print(f"tune: stand-in knows only 'tune run', got {argv[:1]}", file=sys.stderr)
        return 2
    rest = argv[1:]
    rdzv = next((a.split("=", 1)[1] for a in rest if a.startswith("--rdzv_endpoint=")), None)
    rest = [a for a in rest if not a.startswith("--rdzv_endpoint=")]
    if not rest or rest[0] not in RECIPES:
        print(f"tune run: error: invalid recipe {rest[:1]}; known: {', '.join(RECIPES)}")
        return 1
    recipe, rest = rest[0], rest[1:]
    if rest[:1] != ["--config"] or len(rest) < 2:
        print("tune run: error: the following arguments are required: --config")
        return 1
    config, overrides = rest[1], rest[2:]
    values: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            print(f"tune run: error: override {item!r} is not key=value")
            return 1
        values[key] = value
    print(f"stand-in torchtune: recipe {recipe}, config {config}", flush=True)
    if rdzv:
        print(f"stand-in torchtune: rendezvous at {rdzv}", flush=True)
    for key in sorted(values):
        print(f"stand-in torchtune: {key}={values[key]}", flush=True)
    epochs = int(values.get("epochs", "1"))
    steps = int(values.get("max_steps_per_epoch", "3"))
    loss = 2.5
    for epoch in range(1, epochs + 1):
        for step in range(1, steps + 1):
            loss *= 0.9
            print(f"{epoch}|{step}|Loss: {loss:.4f}", flush=True)
    out = values.get("output_dir", "/workspace/output")
    print(f"stand-in torchtune: done, {epochs * steps} steps; checkpoint to {out}", flush=True)
    return 0


def install(directory: str) -> str:
    """Write the `tune` wrapper into `directory`; return the directory (for the PATH)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tune")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(f'#!/bin/sh\nexec "{sys.executable}" "{os.path.abspath(__file__)}" "$@"\n')
    os.chmod(path, 0o755)
    return directory


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
