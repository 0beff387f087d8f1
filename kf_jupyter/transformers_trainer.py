"""`TransformersTrainer`: fine-tune a Hugging Face Transformers model from a configuration.

A Tier-2 trainer (see `kf_jupyter.tier2`) on the torch runtime: every rank runs Transformers'
`Trainer` under torchrun. The configuration (a dict, or the YAML/JSON body of
`%%transformerstrain`):

    model:          a name or folder (from_pretrained), or {"config": {"model_type": "gpt2",
                    "n_layer": 2, ...}} to build a fresh model from a configuration (no download)
    task:           "causal-lm" (default) or "sequence-classification" (with num_labels)
    tokenizer:      a name or folder (default: the model's name); needed for text datasets
    dataset:        {"synthetic": {"num_samples": 64, "seq_len": 16}} (random tokens),
                    {"path": "train.jsonl", "text_column": "text", "label_column": "label"}
                    (a .jsonl/.json/.csv file, relative to the job's working folder), or
                    {"hub": "imdb", "split": "train"} (the `datasets` package); "limit": N rows
    training_args:  Transformers' TrainingArguments as a dict (output_dir defaults to
                    "transformers-output", next to the notebook on the local backend)
    lora:           optional peft LoraConfig as a dict, e.g. {"r": 8, "target_modules": ["c_attn"]}
    max_length, seed, save (default true: the model is saved to output_dir)

Progress (loss, learning rate, epoch, percentage, ETA) reaches the job's trainerStatus through
Transformers' own KubeflowTrainerCallback on both backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any, ClassVar

from .errors import ValidationError
from .tier2 import ConfigTrainer, embed_call
from .trainers import TorchTrainer

TASKS = ("causal-lm", "sequence-classification")
KEYS = (
    "model",
    "task",
    "num_labels",
    "tokenizer",
    "dataset",
    "training_args",
    "lora",
    "max_length",
    "seed",
    "save",
)
DATASET_KINDS = ("synthetic", "path", "hub")


def _bad(what: str) -> ValidationError:
    return ValidationError(
        f'TransformersTrainer configuration: {what} See docs/notebook.md, "Configuration-driven '
        'trainers", for every key.'
    )


@dataclass(kw_only=True)
class TransformersTrainer(ConfigTrainer, TorchTrainer):
    """Fine-tune a Transformers model from `config` (see the module docstring), on torch."""

    program_name: ClassVar[str] = "transformers_train.py"

    def validate_config(self) -> None:
        """Every key known, a model, exactly one dataset source, dicts where dicts go."""
        cfg = self.config or {}
        unknown = sorted(set(cfg) - set(KEYS))
        if unknown:
            raise _bad(f"unknown key(s) {', '.join(unknown)}; the keys are {', '.join(KEYS)}.")
        model = cfg.get("model")
        if isinstance(model, dict):
            inner = model.get("config")
            if (
                set(model) != {"config"}
                or not isinstance(inner, dict)
                or not isinstance(inner.get("model_type"), str)
            ):
                raise _bad(
                    "model as a dict must be {'config': {'model_type': 'gpt2', ...}} (the "
                    "settings of a fresh model, built without a download)."
                )
        elif not isinstance(model, str) or not model.strip():
            raise _bad(
                "'model' is required: a Hugging Face model name or folder, or {'config': "
                "{'model_type': ..., ...}} for a fresh model built from a configuration."
            )
        task = cfg.get("task", "causal-lm")
        if task not in TASKS:
            raise _bad(f"task {task!r} is not one of {', '.join(TASKS)}.")
        ds = cfg.get("dataset")
        kinds = [k for k in DATASET_KINDS if isinstance(ds, dict) and k in ds]
        if len(kinds) != 1:
            raise _bad(
                "'dataset' needs exactly one source: {'synthetic': {'num_samples': 64, "
                "'seq_len': 16}}, {'path': 'train.jsonl', 'text_column': 'text'} or {'hub': "
                "'name', 'split': 'train'}."
            )
        for key in ("training_args", "lora"):
            if cfg.get(key) is not None and not isinstance(cfg[key], dict):
                raise _bad(f"'{key}' must be a dict of settings, got {type(cfg[key]).__name__}.")
        if kinds != ["synthetic"] and not cfg.get("tokenizer") and not isinstance(model, str):
            raise _bad(
                "a text dataset needs a tokenizer: set 'tokenizer' (a name or folder), or give "
                "the model by name."
            )

    def program(self) -> str:
        """The Transformers program (kf_jupyter/programs/transformers_main.py) with the config."""
        source = resources.files("kf_jupyter.programs").joinpath("transformers_main.py")
        return embed_call(source.read_text(encoding="utf-8"), "main", self.config_json())

    @property
    def packages(self) -> list[str]:
        """What the program imports beyond torch (peft only with LoRA)."""
        out = ["transformers", "accelerate"]
        if (self.config or {}).get("lora"):
            out.append("peft")
        return out


def parse_config_text(text: str) -> dict[str, Any]:
    """A magic cell's body (YAML or JSON) as a configuration dict."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(
            f"The cell body is not valid YAML or JSON ({exc}). Write the configuration as YAML, "
            "for example:\nmodel: {config: {model_type: gpt2, n_layer: 2}}\ndataset: {synthetic: "
            "{num_samples: 32}}"
        ) from None
    if not isinstance(value, dict):
        raise ValidationError(
            "The cell body must be a YAML (or JSON) mapping of settings (model, dataset, "
            f"training_args, ...), got {type(value).__name__}."
        )
    return value


__all__ = ["TransformersTrainer", "parse_config_text"]
