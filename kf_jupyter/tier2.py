"""Configuration-driven (Tier-2) trainers: a configuration in, the program the runtime runs out.

The specialized-trainers proposal (kubeflow/sdk#308) has Tier-1 trainers, one per framework
(`TorchTrainer`, `MPITrainer`, `JAXTrainer`, `XGBoostTrainer`), that run *your* code, and leaves
room for Tier-2 trainers that run *a configuration* (Hugging Face, DeepSpeed, Unsloth,
TorchTune) on a Tier-1 runtime. `ConfigTrainer` is that extension point:

    @dataclass(kw_only=True)
    class MyTrainer(ConfigTrainer, TorchTrainer):   # the Tier-1 trainer it maps onto
        program_name: ClassVar[str] = "my_trainer.py"

        def validate_config(self) -> None: ...       # one clear paragraph per mistake
        def program(self) -> str: ...                # a self-contained Python program

A Tier-2 trainer *is* its Tier-1 trainer (a subclass), holding `config` instead of `func`: its
`program()` becomes the trainer's `script` when it is created, so runtime discovery (the
framework label), the framework policy (torchrun, the `PET_*` environment), options, the
workspace, `RuntimeConfig` and both backends see a Tier-1 trainer with a script and work
unchanged. The program must not import kf_jupyter (a cluster image need not have it); the
configuration travels inside it as JSON. No I/O here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import ValidationError
from .script import Script
from .trainers import BaseTrainer


@dataclass(kw_only=True)
class ConfigTrainer(BaseTrainer):
    """Base of configuration-driven trainers; combine it with the Tier-1 trainer it maps onto.

    `config`: a dict of JSON values (what the trainer's documentation describes). Subclasses
    set `program_name` (the program's `sys.argv[0]`) and implement `validate_config()` and
    `program()`. `tier1` names the Tier-1 trainer, `framework` its framework label.
    """

    program_name: ClassVar[str] = "tier2_program.py"

    config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if type(self).program is ConfigTrainer.program:
            raise TypeError(f"{type(self).__name__} must implement program().")
        if self.tier1() is None:
            raise TypeError(
                f"{type(self).__name__} must also derive from the Tier-1 trainer it maps onto "
                "(TorchTrainer, MPITrainer, JAXTrainer or XGBoostTrainer)."
            )
        name = type(self).__name__
        if self.func is not None or self.script is not None:
            raise ValidationError(
                f"{name} runs its configuration, not your code: give config=..., not func= or "
                f"script=. To run your own training code, use {self.tier1().__name__}."
            )
        if not isinstance(self.config, dict):
            raise ValidationError(
                f"{name} takes config=, a dict (for example the YAML/JSON body of its magic), "
                f"got {type(self.config).__name__}."
            )
        try:
            json.dumps(self.config, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"{name}'s config must hold plain values (numbers, strings, lists, dicts) so it "
                f"can travel to the job as JSON: {exc}."
            ) from None
        self.validate_config()
        self.script = Script(self.program(), self.program_name)
        super().__post_init__()

    @classmethod
    def tier1(cls) -> type[BaseTrainer] | None:
        """The Tier-1 trainer this one maps onto (the first one in its bases)."""
        from .trainers import TRAINER_CLASSES

        tier1 = set(TRAINER_CLASSES.values())
        return next((c for c in cls.__mro__ if c in tier1), None)

    def validate_config(self) -> None:
        """Check `self.config`; raise ValidationError (one paragraph, what to do) if wrong."""

    def program(self) -> str:
        """The self-contained Python program every rank runs as `__main__`."""
        raise NotImplementedError

    def config_json(self) -> str:
        """The configuration as the JSON text the program embeds."""
        return json.dumps(self.config, sort_keys=True)


def embed_call(module_source: str, entry: str, config_json: str) -> str:
    """A program: `module_source`, then `entry(<config>)` when run as `__main__`."""
    return (
        f"{module_source.rstrip()}\n\n\nif __name__ == '__main__':\n"
        f"    import json as _json\n\n"
        f"    {entry}(_json.loads({config_json!r}))\n"
    )


__all__ = ["ConfigTrainer", "embed_call"]
