"""Kubeflow SDK code runs on kf-jupyter by changing only the import (issue 11).

Snippets are written as Kubeflow's docs and examples write them, against `kf_jupyter.sdk`.
Where the real SDK (`kubeflow` 0.5.0) is installed, signatures and option output are compared
with it. Local jobs here use the xgboost-distributed runtime (one plain Python process per node,
no framework import) so they take a second; the torch DDP snippet is the slow test.
"""

from __future__ import annotations

import dataclasses
import inspect
from datetime import datetime
from typing import Any

import pytest

import kf_jupyter.sdk as sdk
from kf_jupyter import JAXTrainer, MPITrainer, TorchTrainer, XGBoostTrainer
from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig as KFKubeConfig
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.errors import JobNotFoundError, OptionError, ValidationError
from kf_jupyter.runtimes import Runtime as KFRuntime
from kf_jupyter.sdk import (
    CustomTrainer,
    CustomTrainerContainer,
    LocalProcessBackendConfig,
    TrainerClient,
)
from kf_jupyter.sdk.configs import backend_config
from kf_jupyter.sdk.options import (
    Labels,
    Name,
    RuntimePatch,
    TrainerCommand,
    from_sdk_option,
    patch_to_dict,
)
from kf_jupyter.sdk.trainers import RuntimeFrameworkTrainer, to_trainer


@pytest.fixture
def client(tmp_path, monkeypatch) -> TrainerClient:
    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    c = TrainerClient()
    yield c
    for job in c.list_jobs():
        c.delete_job(job.name)


def real_sdk() -> Any:
    return pytest.importorskip("kubeflow.trainer", reason="the Kubeflow SDK is not installed")


def greet(greeting: str = "hello", times: int = 1) -> None:
    import os

    for _ in range(times):
        print(
            f"{greeting} from node {os.environ['DMLC_TASK_ID']} of {os.environ['DMLC_NUM_WORKER']}"
        )
    print(f"FOO={os.environ.get('FOO')}")


def fail_on_node_one() -> None:
    import os

    if os.environ["DMLC_TASK_ID"] == "1":
        raise RuntimeError("boom on node one")


# -- the import surface and the signatures ------------------------------------------------------


def test_names_mirror_kubeflow_trainer() -> None:
    kf = real_sdk()
    wanted = {
        "TrainerClient",
        "CustomTrainer",
        "CustomTrainerContainer",
        "Runtime",
        "RuntimeKind",
        "RuntimeTrainer",
        "TrainerType",
        "Event",
        "Initializer",
        "HuggingFaceDatasetInitializer",
        "HuggingFaceModelInitializer",
        "S3DatasetInitializer",
        "S3ModelInitializer",
        "KubernetesBackendConfig",
        "LocalProcessBackendConfig",
        "ContainerBackendConfig",
        "DATASET_PATH",
        "MODEL_PATH",
    }
    assert wanted <= set(kf.__all__) and wanted <= set(sdk.__all__)
    assert sdk.DATASET_PATH == kf.DATASET_PATH and sdk.MODEL_PATH == kf.MODEL_PATH
    from kubeflow.trainer import options as theirs

    import kf_jupyter.sdk.options as ours

    assert set(theirs.__all__) <= set(ours.__all__)


def _params(fn: Any) -> list[tuple[str, Any]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize(
    "method",
    [
        "list_runtimes",
        "get_runtime",
        "get_runtime_packages",
        "train",
        "list_jobs",
        "get_job",
        "get_job_logs",
        "get_job_events",
        "wait_for_job_status",
        "delete_job",
    ],
)
def test_client_methods_have_the_sdks_signatures(method: str) -> None:
    kf = real_sdk()
    ours = _params(getattr(TrainerClient, method))
    theirs = _params(getattr(kf.TrainerClient, method))
    if method == "wait_for_job_status":  # a frozenset default instead of a shared mutable set
        ours = [(n, set(d) if n == "status" else d) for n, d in ours]
    assert ours == theirs


@pytest.mark.parametrize(
    "name", ["CustomTrainer", "CustomTrainerContainer", "Step", "Event", "Runtime"]
)
def test_types_have_the_sdks_fields(name: str) -> None:
    kf = real_sdk()
    from kubeflow.trainer.types import types as kt

    theirs = [(f.name, f.default) for f in dataclasses.fields(getattr(kt, name)) if f.init]
    ours = [(f.name, f.default) for f in dataclasses.fields(getattr(sdk, name)) if f.init]
    assert ours[: len(theirs)] == theirs
    assert kf.TrainerClient  # the real SDK is the reference


def test_trainjob_has_every_field_sdk_code_reads() -> None:
    real_sdk()
    from kubeflow.trainer.types import types as kt

    theirs = [f.name for f in dataclasses.fields(kt.TrainJob)]
    ours = [f.name for f in dataclasses.fields(sdk.TrainJob)]
    assert ours[: len(theirs)] == theirs
    rt_theirs = [f.name for f in dataclasses.fields(kt.RuntimeTrainer) if f.init]
    rt_ours = [f.name for f in dataclasses.fields(sdk.RuntimeTrainer) if f.init]
    assert rt_ours == rt_theirs


def test_pip_index_urls_default_follows_the_sdks_variable(monkeypatch) -> None:
    monkeypatch.delenv("DEFAULT_PIP_INDEX_URLS", raising=False)
    assert CustomTrainer(func=greet).pip_index_urls == []  # pip's own configuration
    monkeypatch.setenv("DEFAULT_PIP_INDEX_URLS", "https://a.example/simple,https://b.example/s")
    assert CustomTrainer(func=greet).pip_index_urls == [
        "https://a.example/simple",
        "https://b.example/s",
    ]


# -- backend configs -------------------------------------------------------------------------------


def test_backend_configs_map_to_kf_jupyters(tmp_path) -> None:
    assert isinstance(backend_config(None), LocalBackendConfig)  # default: the local backend
    assert isinstance(backend_config(LocalProcessBackendConfig()), LocalBackendConfig)
    assert isinstance(backend_config(sdk.ContainerBackendConfig()), LocalBackendConfig)
    k = backend_config(sdk.KubernetesBackendConfig(namespace="team-a", config_file="/x"))
    assert isinstance(k, KFKubeConfig) and (k.namespace, k.config_file) == ("team-a", "/x")
    kf = real_sdk()
    theirs = backend_config(kf.KubernetesBackendConfig(namespace="ns", context="ctx"))
    assert isinstance(theirs, KFKubeConfig) and (theirs.namespace, theirs.context) == ("ns", "ctx")
    assert isinstance(backend_config(kf.LocalProcessBackendConfig()), LocalBackendConfig)
    with pytest.raises(ValidationError, match="backend_config must be"):
        backend_config("local")


def test_default_client_is_local(client) -> None:
    assert client.backend_name == "local"
    assert TrainerClient(LocalProcessBackendConfig(cleanup_venv=False)).backend_name == "local"


# -- runtimes and the trainer mapping ----------------------------------------------------------


def test_runtimes_read_like_the_sdks(client) -> None:
    runtimes = {r.name: r for r in client.list_runtimes()}
    torch = runtimes["torch-distributed"]
    assert torch.kind == sdk.RuntimeKind.CLUSTER_TRAINING_RUNTIME
    assert torch.trainer.framework == "torch" and torch.trainer.num_nodes == 1
    assert torch.trainer.trainer_type == sdk.TrainerType.CUSTOM_TRAINER
    assert runtimes["deepspeed-distributed"].trainer.command[0] == "mpirun"
    tune = runtimes["torchtune-llama3.2-1b"]
    assert tune.trainer.trainer_type == sdk.TrainerType.BUILTIN_TRAINER
    assert client.get_runtime("jax-distributed").trainer.framework == "jax"


@pytest.mark.parametrize(
    ("runtime", "cls"),
    [
        ("torch-distributed", TorchTrainer),
        ("deepspeed-distributed", MPITrainer),
        ("mlx-distributed", MPITrainer),
        ("jax-distributed", JAXTrainer),
        ("xgboost-distributed", XGBoostTrainer),
    ],
)
def test_custom_trainer_maps_by_the_runtimes_framework(client, runtime, cls) -> None:
    rt = client.client.get_runtime(runtime)
    ours = to_trainer(
        CustomTrainer(
            func=greet, func_args={"times": 2}, num_nodes=2, resources_per_node={"cpu": 2}
        ),
        rt,
        "local",
    )
    assert type(ours) is cls and rt.fits(ours)
    assert (ours.func, ours.func_args, ours.num_nodes) == (greet, {"times": 2}, 2)
    assert ours.resources() == {"cpu": "2"}
    if cls is XGBoostTrainer:
        assert ours.setup_collective is False  # SDK code starts its own tracker


def test_runtime_without_a_known_policy_runs_one_process_per_node() -> None:
    rt = KFRuntime(name="my-runtime", framework="sklearn", ml_policy="plain")
    ours = to_trainer(CustomTrainer(func=greet, num_nodes=3), rt, "kubernetes")
    assert isinstance(ours, RuntimeFrameworkTrainer) and rt.fits(ours)
    assert ours.framework == "sklearn" and ours.policy == "plain"


def test_torch_processes_per_node_come_from_cpu_resources(client) -> None:
    from kf_jupyter.build import job_shape

    rt = client.client.get_runtime("torch-distributed")
    ours = to_trainer(CustomTrainer(func=greet, num_nodes=2, resources_per_node={"cpu": 2}), rt, "")
    shape = job_shape(ours, rt, "x")
    assert (shape.num_nodes, shape.num_proc_per_node) == (2, 2)  # as the Trainer derives it


def test_container_trainer_is_refused_locally_with_one_paragraph(client) -> None:
    with pytest.raises(ValidationError) as err:
        client.train(runtime="torch-distributed", trainer=CustomTrainerContainer(image="busybox"))
    msg = str(err.value)
    assert "\n" not in msg and "'busybox'" in msg
    assert "CustomTrainer(func=...)" in msg and "KubernetesBackendConfig" in msg
    assert client.list_jobs() == []


def test_bad_inputs_are_clear_errors(client) -> None:
    with pytest.raises(ValidationError, match="BuiltinTrainer"):
        client.train(runtime="torch-distributed", trainer=object())
    with pytest.raises(ValidationError, match="torchtune"):
        client.train(runtime="torchtune-llama3.2-1b", trainer=CustomTrainer(func=greet))
    with pytest.raises(ValidationError, match="trainer=None"):
        client.train(runtime="torch-distributed")
    init = sdk.Initializer(dataset=sdk.HuggingFaceDatasetInitializer(storage_uri="hf://a/b"))
    with pytest.raises(ValidationError, match="initializer"):
        client.train(runtime="xgboost-distributed", initializer=init, trainer=CustomTrainer(greet))
    with pytest.raises(ValidationError, match="options must be a list"):
        client.train(runtime="xgboost-distributed", trainer=CustomTrainer(greet), options=Name("x"))
    assert client.list_jobs() == []


def test_wait_arguments_are_validated_like_the_sdk(client) -> None:
    for kwargs in (
        {"timeout": 5, "polling_interval": 5},
        {"timeout": 0},
        {"polling_interval": -1},
        {"status": {"Done"}},
    ):
        with pytest.raises(ValueError):
            client.wait_for_job_status("any", **kwargs)


# -- options ---------------------------------------------------------------------------------------


def _typed_patch(ns: Any, sidecar: bool = True) -> Any:
    """A typed runtime patch; `sidecar`: with env for a `sidecar` container (only a runtime that
    has one accepts that on a cluster, so the API server test leaves it out)."""
    side = [ns.ContainerPatch(name="sidecar", env=[{"name": "A", "value": "1"}])]
    return ns.TrainingRuntimeSpecPatch(
        template=ns.JobSetTemplatePatch(
            metadata={"labels": {"team": "a"}},
            spec=ns.JobSetSpecPatch(
                replicated_jobs=[
                    ns.ReplicatedJobPatch(
                        name="node",
                        template=ns.JobTemplatePatch(
                            spec=ns.JobSpecPatch(
                                template=ns.PodTemplatePatch(
                                    spec=ns.PodSpecPatch(
                                        node_selector={"disk": "ssd"},
                                        containers=side if sidecar else None,
                                    )
                                )
                            )
                        ),
                    )
                ]
            ),
        )
    )


def test_runtime_patch_tree_is_written_as_the_sdk_writes_it() -> None:
    import kf_jupyter.sdk.options as ours

    ours_patch = RuntimePatch(_typed_patch(ours))
    job: dict[str, Any] = {}
    ours_patch(job, None, "kubernetes")
    entry = job["spec"]["runtimePatches"][0]
    assert entry["manager"] == "trainer.kubeflow.org/kubeflow-sdk"
    node = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert node["template"]["spec"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}
    real_sdk()
    from kubeflow.trainer import options as theirs
    from kubeflow.trainer.options.kubernetes import _patch_to_dict

    sdk_tree = _typed_patch(theirs)
    assert entry["trainingRuntimeSpec"] == _patch_to_dict(sdk_tree)
    assert patch_to_dict(sdk_tree) == _patch_to_dict(sdk_tree)


def test_the_sdks_own_option_objects_are_converted() -> None:
    real_sdk()
    from kubeflow.trainer import options as theirs

    assert from_sdk_option(theirs.Name("my-job")) == Name("my-job")
    assert from_sdk_option(theirs.Labels({"a": "b"})) == Labels({"a": "b"})
    assert from_sdk_option(theirs.TrainerCommand(["echo"])) == TrainerCommand(["echo"])
    patch = from_sdk_option(theirs.RuntimePatch(_typed_patch(theirs)))
    assert isinstance(patch, RuntimePatch)
    custom = object()
    assert from_sdk_option(custom) is custom  # any callable option of the user's stays as is
    with pytest.raises(OptionError, match="no kf-jupyter equivalent"):
        from_sdk_option(theirs.PodSpecPatch())


# -- a real local job, SDK style -------------------------------------------------------------


def test_sdk_snippet_runs_locally_and_reads_back(client) -> None:
    runtime = next(r for r in client.list_runtimes() if r.name == "xgboost-distributed")
    job_id = client.train(
        runtime=runtime,
        trainer=CustomTrainer(
            func=greet,
            func_args={"greeting": "hi", "times": 2},
            num_nodes=2,
            env={"FOO": "bar"},
        ),
        options=[Name("sdk-local-1"), Labels({"team": "vision"})],
    )
    assert job_id == "sdk-local-1"
    seen: list[str] = []
    job = client.wait_for_job_status(
        job_id, status={"Complete"}, timeout=120, callbacks=[lambda j: seen.append(j.status)]
    )
    assert job.status == "Complete" and seen[-1] == "Complete"
    assert isinstance(job, sdk.TrainJob)
    job = client.get_job(job_id)
    assert (job.name, job.num_nodes, job.runtime.name) == ("sdk-local-1", 2, "xgboost-distributed")
    assert isinstance(job.creation_timestamp, datetime)
    assert [(s.name, s.status) for s in job.steps] == [
        ("node-0", "Succeeded"),
        ("node-1", "Succeeded"),
    ]
    assert all(s.pod_name and s.device == "cpu" for s in job.steps)
    # get_job_logs: node-0 by default, as in the SDK; other steps by name; follow ends with it
    assert list(client.get_job_logs(job_id)) == ["hi from node 0 of 2"] * 2 + ["FOO=bar"]
    assert next(iter(client.get_job_logs(job_id, step="node-1"))) == "hi from node 1 of 2"
    assert list(client.get_job_logs(job_id, follow=True)) == list(client.get_job_logs(job_id))
    with pytest.raises(ValidationError, match="node-0, node-1"):
        list(client.get_job_logs(job_id, step="node-7"))
    events = client.get_job_events(job_id)
    assert events[0].involved_object_kind == "TrainJob" and events[0].reason == "Created"
    assert any(e.involved_object_kind == "Process" for e in events)
    assert all(isinstance(e.event_time, datetime) for e in events)
    assert [j.name for j in client.list_jobs()] == [job_id]
    assert client.list_jobs(runtime=client.get_runtime("torch-distributed")) == []
    assert [j.name for j in client.list_jobs(runtime=runtime)] == [job_id]
    client.delete_job(job_id)
    with pytest.raises(JobNotFoundError):
        client.get_job(job_id)


def test_failure_raises_a_runtime_error_as_the_sdk_does(client) -> None:
    name = client.train(
        runtime="xgboost-distributed", trainer=CustomTrainer(func=fail_on_node_one, num_nodes=2)
    )
    with pytest.raises(RuntimeError, match="failed"):
        client.wait_for_job_status(name, timeout=120)
    job = client.wait_for_job_status(name, status={"Failed"}, timeout=120)
    assert job.status == "Failed"
    statuses = {s.name: s.status for s in client.get_job(name).steps}
    assert statuses["node-1"] == "Failed"
    assert any("boom on node one" in ln for ln in client.get_job_logs(name, step="node-1"))


def test_sdk_runtime_object_and_a_command_without_trainer(client) -> None:
    kf = real_sdk()
    theirs = kf.Runtime(
        name="xgboost-distributed",
        trainer=kf.RuntimeTrainer(
            trainer_type=kf.TrainerType.CUSTOM_TRAINER, framework="xgboost", image="x"
        ),
        kind=kf.RuntimeKind.CLUSTER_TRAINING_RUNTIME,
    )
    from kubeflow.trainer import options as sdk_options

    name = client.train(
        runtime=theirs,
        options=[sdk_options.TrainerCommand(["bash", "-c", "echo from a command"])],
    )
    client.wait_for_job_status(name, timeout=120)
    assert list(client.get_job_logs(name)) == ["from a command"]


def test_the_sdks_own_custom_trainer_object_runs(client) -> None:
    kf = real_sdk()
    name = client.train(
        runtime="xgboost-distributed",
        trainer=kf.CustomTrainer(func=greet, func_args={"greeting": "yo"}, num_nodes=1),
    )
    client.wait_for_job_status(name, timeout=120)
    assert next(iter(client.get_job_logs(name))) == "yo from node 0 of 1"


# -- the torch DDP snippet of Kubeflow's getting-started guide, for real -------------------------


def train_pytorch() -> None:
    import os

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    # [1] Configure CPU/GPU device and distributed backend.
    # Kubeflow Trainer will automatically configure the distributed environment.
    device, backend = ("cuda", "nccl") if torch.cuda.is_available() else ("cpu", "gloo")
    dist.init_process_group(backend=backend)
    local_rank = int(os.getenv("LOCAL_RANK", 0))
    print(
        f"Distributed Training with WORLD_SIZE: {dist.get_world_size()}, "
        f"RANK: {dist.get_rank()}, LOCAL_RANK: {local_rank}."
    )

    # [2] Define the model and wrap it with DistributedDataParallel.
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    # [3] A dataset sharded across the ranks with DistributedSampler.
    x = torch.randn(256, 8)
    y = x.sum(dim=1, keepdim=True)
    loader = DataLoader(
        TensorDataset(x, y), batch_size=16, sampler=DistributedSampler(TensorDataset(x, y))
    )

    # [4] Train the model.
    for epoch in range(2):
        for batch, (inputs, labels) in enumerate(loader):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(inputs.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            if batch % 4 == 0 and dist.get_rank() == 0:
                print(f"Train Epoch: {epoch} [{batch * len(inputs)}]\tLoss: {loss.item():.6f}")

    # Wait for the training to complete and destroy the PyTorch distributed process group.
    dist.barrier()
    if dist.get_rank() == 0:
        print("Training is finished")
    dist.destroy_process_group()


def run_getting_started(client: TrainerClient) -> tuple[str, list[str]]:
    """The getting-started guide's cells, unchanged but for the import."""
    for runtime in client.list_runtimes():
        if runtime.name == "torch-distributed":
            torch_runtime = runtime

    job_id = client.train(
        trainer=CustomTrainer(
            func=train_pytorch,
            num_nodes=2,
            resources_per_node={"cpu": 2},
        ),
        runtime=torch_runtime,
    )
    client.wait_for_job_status(job_id, status={"Running", "Complete"}, timeout=600)
    lines = list(client.get_job_logs(job_id, follow=True))
    client.wait_for_job_status(job_id, timeout=600, polling_interval=1)
    return job_id, lines


def check_getting_started(client: TrainerClient, job_id: str, lines: list[str]) -> None:
    text = "\n".join(lines)
    assert "Distributed Training with WORLD_SIZE: 4, RANK: 0, LOCAL_RANK: 0." in text, text
    assert "RANK: 1, LOCAL_RANK: 1." in text  # node-0 runs ranks 0 and 1
    assert "RANK: 2," not in text  # ranks 2 and 3 are node-1's
    assert "Train Epoch: 1" in text and lines[-1] == "Training is finished"
    assert not [ln for ln in lines if ln.startswith("##kf-jupyter:")]
    node1 = "\n".join(client.get_job_logs(job_id, step="node-1"))
    assert "RANK: 2, LOCAL_RANK: 0." in node1 and "RANK: 3, LOCAL_RANK: 1." in node1
    job = client.get_job(job_id)
    assert job.status == "Complete" and job.num_nodes == 2
    assert job.runtime.name == "torch-distributed" and job.runtime.trainer.framework == "torch"
    assert isinstance(job.creation_timestamp, datetime)
    for c in job.steps:
        print(f"Step: {c.name}, Status: {c.status}, Devices: {c.device} x {c.device_count}\n")
    assert [(s.name, s.status, s.device, s.device_count) for s in job.steps] == [
        ("node-0", "Succeeded", "cpu", "2"),
        ("node-1", "Succeeded", "cpu", "2"),
    ]


@pytest.mark.slow
def test_getting_started_torch_ddp_runs_locally_for_real(client) -> None:
    job_id, lines = run_getting_started(client)
    check_getting_started(client, job_id, lines)


# -- SDK code for the other frameworks does its own set-up, as the SDK sets nothing up --------


def train_xgboost(rounds: int = 5) -> None:
    import os

    import numpy as np
    import xgboost as xgb
    from xgboost import collective
    from xgboost.tracker import RabitTracker

    rank = int(os.environ["DMLC_TASK_ID"])
    world = int(os.environ["DMLC_NUM_WORKER"])
    host, port = os.environ["DMLC_TRACKER_URI"], int(os.environ["DMLC_TRACKER_PORT"])
    tracker = None
    if rank == 0:  # rank 0 starts the tracker, as Kubeflow's XGBoost example does
        tracker = RabitTracker(host_ip=host, n_workers=world, port=port)
        tracker.start()
    with collective.CommunicatorContext(
        dmlc_tracker_uri=host, dmlc_tracker_port=port, dmlc_task_id=str(rank)
    ):
        rng = np.random.default_rng(rank)
        x = rng.normal(size=(200, 4))
        dtrain = xgb.DMatrix(x, (x[:, 0] > 0).astype(int))
        booster = xgb.train({"objective": "binary:logistic", "tree_method": "hist"}, dtrain, rounds)
        print(
            f"worker {collective.get_rank()} of {collective.get_world_size()}: "
            f"{booster.num_boosted_rounds()} rounds"
        )
    if tracker is not None:
        tracker.wait_for()


def train_jax() -> None:
    import os

    import jax

    jax.distributed.initialize(
        coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
        num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
        process_id=int(os.environ["JAX_PROCESS_ID"]),
    )
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    total = multihost_utils.process_allgather(jnp.array([jax.process_index()])).sum()
    print(f"process {jax.process_index()} of {jax.process_count()}: sum {int(total)}")


@pytest.mark.slow
def test_xgboost_code_with_its_own_tracker_runs_locally(client) -> None:
    job = client.train(
        runtime=client.get_runtime("xgboost-distributed"),
        trainer=CustomTrainer(func=train_xgboost, func_args={"rounds": 3}, num_nodes=2),
    )
    assert client.wait_for_job_status(job, timeout=300).status == "Complete"
    assert "worker 0 of 2: 3 rounds" in list(client.get_job_logs(job))
    assert "worker 1 of 2: 3 rounds" in list(client.get_job_logs(job, step="node-1"))


@pytest.mark.slow
def test_jax_code_that_initializes_itself_runs_locally(client) -> None:
    job = client.train(
        runtime="jax-distributed", trainer=CustomTrainer(func=train_jax, num_nodes=2)
    )
    assert client.wait_for_job_status(job, timeout=300).status == "Complete"
    assert "process 0 of 2: sum 1" in list(client.get_job_logs(job))
    assert "process 1 of 2: sum 1" in list(client.get_job_logs(job, step="node-1"))


def mpi_hello() -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    total = comm.allreduce(comm.Get_rank(), op=MPI.SUM)
    print(f"rank {comm.Get_rank()} of {comm.Get_size()}: sum {total}")


def check_mpi_job(client: TrainerClient, job: str) -> None:
    done = client.wait_for_job_status(job, timeout=300)
    assert done.status == "Complete"
    # the SDK names the launcher node-0; it prints every rank, as mpirun forwards them
    assert sorted(client.get_job_logs(job)) == ["rank 0 of 2: sum 1", "rank 1 of 2: sum 1"]
    assert client.get_job(job).steps[0].name == "node-0"


@pytest.mark.slow
def test_mpi_snippet_runs_locally(client) -> None:
    job = client.train(
        runtime=client.get_runtime("deepspeed-distributed"),
        trainer=CustomTrainer(func=mpi_hello, num_nodes=2),
    )
    check_mpi_job(client, job)
    assert [s.name for s in client.get_job(job).steps] == ["node-0"]  # one local mpirun


# -- the same snippets against the real API server (tests/k8s_cluster) -------------------------


@pytest.fixture
def k8s_client(k8s_admin_kubeconfig: str, k8s_namespace: str, k8s_standin: Any) -> TrainerClient:
    return TrainerClient(
        backend_config=sdk.KubernetesBackendConfig(
            namespace=k8s_namespace, config_file=k8s_admin_kubeconfig
        )
    )


@pytest.mark.slow
def test_getting_started_torch_ddp_on_the_api_server(k8s_client, k8s_cluster) -> None:
    from kubernetes import client as k8s

    job_id, lines = run_getting_started(k8s_client)
    check_getting_started(k8s_client, job_id, lines)
    obj = k8s.CustomObjectsApi(k8s_cluster.api_client()).get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", k8s_client.backend.namespace, "trainjobs", job_id
    )
    trainer = obj["spec"]["trainer"]
    assert trainer["numNodes"] == 2 and "numProcPerNode" not in trainer  # the controller's job
    assert trainer["resourcesPerNode"]["requests"] == {"cpu": "2"}
    job = k8s_client.get_job(job_id)
    assert all(s.pod_name.startswith(f"{job_id}-node-0-") for s in job.steps)
    assert any(e.involved_object_kind == "Pod" for e in k8s_client.get_job_events(job_id))
    k8s_client.delete_job(job_id)


@pytest.mark.slow
def test_container_trainer_options_and_sdk_objects_on_the_api_server(
    k8s_client, k8s_cluster
) -> None:
    from kubernetes import client as k8s

    import kf_jupyter.sdk.options as opts

    name = k8s_client.train(
        runtime=k8s_client.get_runtime("torch-distributed"),
        trainer=CustomTrainerContainer(image="busybox:1.36", num_nodes=1, env={"GREETING": "hi"}),
        options=[
            Name("sdk-container-1"),
            Labels({"team": "vision"}),
            opts.Annotations({"note": "sdk"}),
            TrainerCommand(["bash", "-c", 'echo "$GREETING from the container trainer"']),
            opts.ActiveDeadlineSeconds(600),
            RuntimePatch(_typed_patch(opts, sidecar=False)),
        ],
    )
    assert name == "sdk-container-1"
    job = k8s_client.wait_for_job_status(name, timeout=300, polling_interval=1)
    assert job.status == "Complete" and [s.name for s in job.steps] == ["node-0"]
    assert list(k8s_client.get_job_logs(name)) == ["hi from the container trainer"]
    obj = k8s.CustomObjectsApi(k8s_cluster.api_client()).get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", k8s_client.backend.namespace, "trainjobs", name
    )
    assert obj["metadata"]["labels"]["team"] == "vision"
    assert obj["metadata"]["annotations"]["note"] == "sdk"
    assert obj["spec"]["activeDeadlineSeconds"] == 600
    assert obj["spec"]["trainer"]["image"] == "busybox:1.36"
    patch = obj["spec"]["runtimePatches"][0]
    assert patch["manager"] == "trainer.kubeflow.org/kubeflow-sdk"
    # the real SDK reads the job kf_jupyter.sdk created
    kf = real_sdk()
    theirs = kf.TrainerClient(
        kf.KubernetesBackendConfig(
            namespace=k8s_client.backend.namespace,
            config_file=k8s_client.backend.config.config_file,
        )
    )
    assert theirs.get_job(name).status == "Complete"
    k8s_client.delete_job(name)


@pytest.mark.slow
def _runtime_with_initializers(k8s_cluster: Any, namespace: str) -> str:
    """torch-distributed plus dataset and model initializer steps, as a TrainingRuntime."""
    import copy

    from kubernetes import client as k8s

    from tests.k8s_cluster.crds import load_runtimes

    rt = copy.deepcopy(
        next(r for r in load_runtimes() if r["metadata"]["name"] == "torch-distributed")
    )
    rt["kind"] = "TrainingRuntime"
    rt["metadata"] = {"name": "torch-with-inits", "labels": rt["metadata"].get("labels", {})}
    jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
    for step in ("model-initializer", "dataset-initializer"):
        jobs.insert(0, {"name": step, "template": {"spec": {"template": {"spec": {
            "containers": [{"name": step, "image": f"ghcr.io/kubeflow/trainer/{step}",
                            "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}],
            "volumes": [{"name": "initializer", "emptyDir": {}}]}}}}})  # fmt: skip
    k8s.CustomObjectsApi(k8s_cluster.api_client()).create_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainingruntimes", rt
    )
    return "torch-with-inits"


def test_initializer_is_written_on_a_cluster(k8s_client, k8s_cluster) -> None:
    from kubernetes import client as k8s

    init = sdk.Initializer(
        dataset=sdk.HuggingFaceDatasetInitializer(storage_uri="hf://org/data"),
        model=sdk.HuggingFaceModelInitializer(storage_uri="hf://org/model"),
    )
    # a runtime with both initializer steps: a cluster refuses initializers on one without
    name = k8s_client.train(
        runtime=_runtime_with_initializers(k8s_cluster, k8s_client.backend.namespace),
        initializer=init,
        trainer=CustomTrainerContainer(image="busybox:1.36"),
        options=[TrainerCommand(["bash", "-c", "echo ok"])],
    )
    obj = k8s.CustomObjectsApi(k8s_cluster.api_client()).get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", k8s_client.backend.namespace, "trainjobs", name
    )
    assert obj["spec"]["initializer"]["dataset"] == {"storageUri": "hf://org/data"}
    model = obj["spec"]["initializer"]["model"]
    assert model["storageUri"] == "hf://org/model"
    assert {"name": "IGNORE_PATTERNS", "value": "*.msgpack,*.h5,*.bin,*.pt,*.pth"} in model["env"]
    k8s_client.delete_job(name)


def test_importing_the_sdk_layer_stays_light() -> None:
    import subprocess
    import sys

    code = (
        "import sys, kf_jupyter.sdk, kf_jupyter.sdk.options\n"
        "heavy = [m for m in ('kubernetes', 'kubeflow', 'ipywidgets', 'torch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_mpi_snippet_on_the_api_server_names_steps_as_the_sdk(k8s_client) -> None:
    job = k8s_client.train(
        runtime="deepspeed-distributed", trainer=CustomTrainer(func=mpi_hello, num_nodes=2)
    )
    check_mpi_job(k8s_client, job)
    steps = k8s_client.get_job(job).steps
    # runLauncherAsNode: the launcher is the first of the 2 nodes, one node pod more
    assert [s.name for s in steps] == ["node-0", "node-1"]
    assert "-launcher-0-0" in steps[0].pod_name and "-node-0-0" in steps[1].pod_name
    assert list(k8s_client.get_job_logs(job, step="node-1")) == []  # a worker runs sshd only
    k8s_client.delete_job(job)


def test_helpers_match_the_sdks(capsys) -> None:
    from kf_jupyter import parse_report

    assert sdk.update_trainjob_status(progress_percent=40, metrics={"loss": 0.5, "note": "x"})
    record = parse_report(capsys.readouterr().out.strip())
    assert record == {"step": None, "progress": 0.4, "metrics": {"loss": 0.5}}
    kf = real_sdk()
    for args in ((1, "2x2"), (2, "2x4"), (1, "2x2x4"), (3, "4x4", 8), (1, "1x1")):
        assert sdk.get_tpu_num_nodes(*args) == kf.get_tpu_num_nodes(*args)
    for bad in ((0, "2x2"), (1, "2"), (1, "2x3", 4)):
        with pytest.raises(ValueError):
            sdk.get_tpu_num_nodes(*bad)


def plain_hello() -> None:
    import os

    print(f"plain node {os.environ.get('JOB_COMPLETION_INDEX', '?')} says hello")


@pytest.mark.slow
def test_runtime_without_a_known_policy_on_the_api_server(k8s_client, k8s_cluster) -> None:
    from kubernetes import client as k8s

    custom = k8s.CustomObjectsApi(k8s_cluster.api_client())
    base = custom.get_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", "torch-distributed"
    )
    spec = dict(base["spec"], mlPolicy={"numNodes": 1})  # plain ML: no framework policy
    custom.create_namespaced_custom_object(
        "trainer.kubeflow.org",
        "v1alpha1",
        k8s_client.backend.namespace,
        "trainingruntimes",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainingRuntime",
            "metadata": {
                "name": "sklearn-plain",
                "labels": {"trainer.kubeflow.org/framework": "sklearn"},
            },
            "spec": spec,
        },
    )
    rt = k8s_client.get_runtime("sklearn-plain")
    assert rt.kind == sdk.RuntimeKind.TRAINING_RUNTIME and rt.trainer.framework == "sklearn"
    job = k8s_client.train(runtime=rt, trainer=CustomTrainer(func=plain_hello, num_nodes=2))
    assert k8s_client.wait_for_job_status(job, timeout=300).status == "Complete"
    assert any("says hello" in ln for ln in k8s_client.get_job_logs(job))
    assert any("says hello" in ln for ln in k8s_client.get_job_logs(job, step="node-1"))
    assert k8s_client.get_job(job).runtime.name == "sklearn-plain"
    k8s_client.delete_job(job)
