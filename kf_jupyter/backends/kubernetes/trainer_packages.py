"""The packages a trainer's own program needs on the cluster (issue 35 B).

`TransformersTrainer` runs kf-jupyter's Transformers program, which imports `transformers`,
`accelerate` and, with LoRA, `peft`; the default torch runtime's image has none of them. The
job installs them with the rest of `RuntimeConfig.packages_to_install`, before the program runs.
Pure (no I/O).

Decision: they are always added (unless the user's list already names the project): the client
cannot see what the runtime's image holds, and pip installs nothing and needs no index for a
bare requirement that the image already satisfies ("Requirement already satisfied"), so an image
that has them costs only pip's start.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ...config import RuntimeConfig

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _project(requirement: str) -> str:
    """The normalized project name of a requirement (PEP 503)."""
    m = _NAME.match(requirement)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else requirement.strip().lower()


def trainer_packages(trainer: Any) -> list[str]:
    """What the trainer's program imports beyond the runtime's framework (none for most)."""
    packages = getattr(type(trainer), "packages", None)
    if not isinstance(packages, property):
        return []
    return [str(p) for p in (trainer.packages or [])]


def with_trainer_packages(trainer: Any, rc: RuntimeConfig | None) -> RuntimeConfig | None:
    """`rc` with the trainer's own packages appended (those the user's list does not name)."""
    extra = trainer_packages(trainer)
    have = {_project(p) for p in (rc.packages if rc else [])}
    add = [p for p in extra if _project(p) not in have]
    if not add:
        return rc
    base = rc if rc is not None else RuntimeConfig()
    return dataclasses.replace(base, packages_to_install=[*base.packages, *add])
