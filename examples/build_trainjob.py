"""Build the TrainJob a cluster would get for a small PyTorch function, and print it as YAML.

Runs without a cluster: it uses the default Kubeflow Trainer runtime `torch-distributed` as data.
"""

from __future__ import annotations

import yaml

from kf_jupyter import Runtime, RuntimeConfig, TorchTrainer, build_trainjob
from kf_jupyter.options import Labels, Name


def train(lr: float = 0.01, epochs: int = 2) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1) * dist.get_rank()
    dist.all_reduce(t)
    return float(t)


def _str_block(dumper: yaml.Dumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


if __name__ == "__main__":
    runtime = Runtime(name="torch-distributed", framework="torch", ml_policy="torch")
    trainer = TorchTrainer(func=train, func_args={"lr": 0.05}, num_nodes=2, num_proc_per_node=2)
    job = build_trainjob(
        trainer,
        runtime,
        RuntimeConfig(env={"OMP_NUM_THREADS": "1"}),
        options=[Name("mnist-ddp"), Labels({"team": "ml"})],
    )
    yaml.add_representer(str, _str_block)
    print(yaml.dump(job, sort_keys=False, width=100))
