"""Fine-tune a Hugging Face Transformers model from a configuration (`TransformersTrainer`).

This file is the program every rank runs (under torchrun, which sets the distributed
environment that Transformers' `Trainer` reads); `main(config)` is called with the trainer's
configuration. It imports nothing from kf_jupyter. Progress is printed at each log as
`##kf-jupyter:report` lines (its own callback), which the monitor and the client read from the
log on any cluster; it also reaches the TrainJob's trainerStatus through Transformers' own
Kubeflow callback, which Transformers registers when the Trainer's status variables are set (a
cluster with the TrainJobStatus gate, which v2.3.0 has off by default, and every local job).
"""

import csv
import json
import os
import shutil
import tempfile

REPORT_PREFIX = "##kf-jupyter:report "


def _report_callback(transformers):
    """A callback that prints progress and the logged metrics as `##kf-jupyter:report` lines
    (world process zero, at each log): the monitor and the client read them from the log, so
    progress shows on a cluster without the TrainJobStatus gate too (no status variables, so
    Transformers' own Kubeflow callback is not added there)."""

    class KFJupyterReport(transformers.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero:
                return
            metrics = {}
            for key, value in (logs or {}).items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    metrics[key] = float(value)
            progress = state.global_step / state.max_steps if state.max_steps else None
            record = {"step": state.global_step, "progress": progress, "metrics": metrics}
            print(REPORT_PREFIX + json.dumps(record), flush=True)

    return KFJupyterReport()


def _model(cfg, task):
    import transformers

    auto = {
        "causal-lm": transformers.AutoModelForCausalLM,
        "sequence-classification": transformers.AutoModelForSequenceClassification,
    }[task]
    spec = cfg["model"]
    extra = {}
    if task == "sequence-classification":
        extra["num_labels"] = int(cfg.get("num_labels", 2))
    if isinstance(spec, str):
        return auto.from_pretrained(spec, **extra)
    params = dict(spec["config"])
    model_type = params.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **params, **extra)
    return auto.from_config(config)


def _tokenizer(cfg):
    name = cfg.get("tokenizer") or (cfg["model"] if isinstance(cfg["model"], str) else None)
    if not name:
        return None
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(name)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _synthetic(spec, vocab_size, task):
    """Random token sequences; for classification the label is a rule the model can learn."""
    import torch

    gen = torch.Generator().manual_seed(int(spec.get("seed", 0)))
    n, length = int(spec.get("num_samples", 64)), int(spec.get("seq_len", 16))
    rows = []
    for _ in range(n):
        ids = torch.randint(0, vocab_size, (length,), generator=gen)
        row = {"input_ids": ids, "attention_mask": torch.ones(length, dtype=torch.long)}
        if task == "causal-lm":
            row["labels"] = ids.clone()
        else:
            row["labels"] = torch.tensor(int(ids[0] < vocab_size // 2))
        rows.append(row)
    return rows


def _records(spec):
    path = spec["path"]
    if path.endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    with open(path, encoding="utf-8") as fh:
        if path.endswith(".jsonl"):
            return [json.loads(line) for line in fh if line.strip()]
        return json.load(fh)


def _text_rows(records, spec, tok, task, max_length):
    import torch

    text_col = spec.get("text_column", "text")
    label_col = spec.get("label_column", "label")
    rows = []
    for rec in records:
        enc = tok(
            str(rec[text_col]),
            truncation=True,
            max_length=max_length,
            padding="max_length",
            return_tensors="pt",
        )
        row = {k: v[0] for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        if task == "causal-lm":
            labels = row["input_ids"].clone()
            labels[row["attention_mask"] == 0] = -100
            row["labels"] = labels
        else:
            row["labels"] = torch.tensor(int(rec[label_col]))
        rows.append(row)
    return rows


def _dataset(cfg, model, tok, task):
    spec = cfg["dataset"]
    max_length = int(cfg.get("max_length", 64))
    if "synthetic" in spec:
        return _synthetic(spec["synthetic"] or {}, model.config.vocab_size, task)
    if tok is None:
        raise SystemExit(
            "TransformersTrainer: a text dataset needs a tokenizer: set 'tokenizer' (a name or "
            "a folder) in the configuration, or give the model by name."
        )
    if "path" in spec:
        records = _records(spec)
    else:
        import datasets

        records = datasets.load_dataset(spec["hub"], split=spec.get("split", "train"))
    limit = spec.get("limit")
    if limit:
        records = [records[i] for i in range(min(int(limit), len(records)))]
    return _text_rows(records, spec, tok, task, max_length)


def _lora(model, lora, task):
    import peft

    kind = {"causal-lm": "CAUSAL_LM", "sequence-classification": "SEQ_CLS"}[task]
    settings = dict(lora)
    settings.setdefault("task_type", kind)
    return peft.get_peft_model(model, peft.LoraConfig(**settings))


def main(cfg):
    """Build the model, the data and the Trainer from `cfg`; train; save from rank 0."""
    import torch
    import transformers

    task = cfg.get("task", "causal-lm")
    torch.manual_seed(int(cfg.get("seed", 0)))
    model = _model(cfg, task)
    tok = _tokenizer(cfg)
    if cfg.get("lora"):
        model = _lora(model, cfg["lora"], task)
    train = _dataset(cfg, model, tok, task)
    args = dict(cfg.get("training_args") or {})
    scratch = None
    if "output_dir" not in args and not cfg.get("save", True):
        # Nothing to keep: Transformers still wants a folder; one that goes away at the end.
        scratch = tempfile.mkdtemp(prefix="transformers-")
        args["output_dir"] = scratch
    args.setdefault("output_dir", "transformers-output")
    args.setdefault("report_to", "none")
    if not torch.cuda.is_available():
        args.setdefault("use_cpu", True)
    trainer = transformers.Trainer(
        model=model,
        args=transformers.TrainingArguments(**args),
        train_dataset=train,
        callbacks=[_report_callback(transformers)],
    )
    try:
        result = trainer.train()
        if cfg.get("save", True):
            trainer.save_model()  # the main process writes, into output_dir
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    if trainer.is_world_process_zero():
        print("train metrics: " + json.dumps(result.metrics, sort_keys=True), flush=True)
        if cfg.get("save", True):
            print(f"model saved to {os.path.abspath(args['output_dir'])}", flush=True)
    return result.metrics
