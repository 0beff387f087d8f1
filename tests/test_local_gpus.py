"""GPUs on the local backend, given as a cluster gives them (issue 24).

There is no GPU here: a STAND-IN `nvidia-smi` (tests/standins/nvidia_smi.py, via the
`standin_smi` fixture) first on PATH reports N devices. Everything else is real: jobs are real
subprocesses (plain functions that print the environment they got), the allocator is the real
store-wide file lock, and crashes are real SIGKILLs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from kf_jupyter import JAXTrainer, RuntimeConfig, TorchTrainer, TrainerClient
from kf_jupyter.backends.local import gpus as gpu
from kf_jupyter.backends.local import supervisor as sv
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.backends.local.warm.pool import stop_all
from kf_jupyter.build import job_shape
from kf_jupyter.errors import ValidationError
from kf_jupyter.policies.resources import auto_procs_per_node, gpus_per_node, quantity_value
from kf_jupyter.runtimes import Runtime
from kf_jupyter.types import COMPLETE, CREATED, FAILED, RUNNING, SUSPENDED

from .gpu_standin import StandinSMI, install, uuid_of
from .test_local_support import assert_no_orphans, job_processes, wait_until
from .test_warm import _wait_ready

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def standin_smi(tmp_path: Path, monkeypatch: Any) -> StandinSMI:
    """The stand-in nvidia-smi first on PATH, reporting 4 devices (`set_devices` changes it)."""
    smi = install(tmp_path / "standin-bin", 4)
    monkeypatch.setenv("PATH", f"{smi.folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return smi


@pytest.fixture
def cold(tmp_path: Path, standin_smi: StandinSMI) -> TrainerClient:
    """A local client (cold starts: plain functions need no framework) with the stand-in."""
    c = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state", warm=False))
    yield c
    for job in c.list_jobs():
        c.delete_job(job.name)


def report(gate: str = "", hold: float = 0.0) -> str:
    """Each rank prints the environment that decides its devices (and when), then waits for
    `gate` or `hold` seconds, and says when it is done."""
    import json
    import os
    import time

    keys = (
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "NCCL_SOCKET_IFNAME",
        "NCCL_IB_DISABLE",
        "LOCAL_RANK",
        "RANK",
        "GROUP_RANK",
        "WORLD_SIZE",
        "JAX_PROCESS_ID",
        "KF_JUPYTER_NODE_RANK",
    )
    seen = {k: os.environ.get(k) for k in keys}
    print("GPUENV " + json.dumps({**seen, "t": time.time()}), flush=True)
    while gate and not os.path.exists(gate):
        time.sleep(0.05)
    time.sleep(hold)
    print(f"GPUDONE {time.time()!r}", flush=True)
    return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")


def fail_after(gate: str) -> None:
    """Wait for `gate`, then fail."""
    import os
    import time

    while not os.path.exists(gate):
        time.sleep(0.05)
    raise RuntimeError("boom")


def envs(client: TrainerClient, name: str) -> list[dict[str, Any]]:
    """Every GPUENV line of the job's logs, parsed (with `done`: when that rank finished)."""
    out: list[dict[str, Any]] = []
    for rec in client.backend.iter_log_records(name):
        if "GPUENV " in rec.line:
            out.append(json.loads(rec.line.split("GPUENV ", 1)[1]))
        elif "GPUDONE " in rec.line and out:
            out[-1]["done"] = float(rec.line.split("GPUDONE ", 1)[1])
    return out


def jax(
    gate: Path | None = None, nodes: int = 1, gpus: int | None = 1, hold: float = 0.0
) -> JAXTrainer:
    """A plain-function job (JAX policy: one python3 process per node, no JAX set-up)."""
    return JAXTrainer(
        func=report,
        func_args={"gate": str(gate) if gate else "", "hold": hold},
        num_nodes=nodes,
        initialize_distributed=False,
        resources_per_node={"gpu": gpus} if gpus is not None else None,
    )


def held(client: TrainerClient) -> dict[str, str]:
    """{uuid: job} the allocator holds now (stale entries reclaimed first)."""
    state = str(client.backend.state_dir)
    return {u: e["job"] for u, e in gpu.allocations(state, sv.same_process).items()}


def status_of(client: TrainerClient, name: str) -> str:
    return client.get_job(name).status


# ----------------------------------------------------------------------------- the rule


def test_gpu_count_and_auto_follow_the_trainer_rule() -> None:
    # Any resource whose name contains "gpu", rounded up (Quantity.Value()).
    assert gpus_per_node({"nvidia.com/gpu": "2"}) == 2
    assert gpus_per_node({"amd.com/gpu": "1"}) == 1
    assert gpus_per_node({"example.com/GPU-a100": "1.5"}) == 2
    assert gpus_per_node({"cpu": "4", "nvidia.com/mig-1g.5gb": "1"}) == 0
    assert quantity_value("500m") == 1 and quantity_value("2Ki") == 2048
    # auto: the GPU count, else max(1, cpu), a missing cpu counting 0; no resources: 1 too
    # (torch.go:127-135 derefs a missing resourcesPerNode to an empty one: issue 19 item 3).
    assert auto_procs_per_node({"nvidia.com/gpu": "4", "cpu": "16"}) == 4
    assert auto_procs_per_node({"cpu": "2500m"}) == 3
    assert auto_procs_per_node({"memory": "4Gi"}) == 1
    assert auto_procs_per_node({}) == 1
    rt = Runtime(name="torch-distributed", framework="torch", ml_policy="torch")
    shape = job_shape(TorchTrainer(num_nodes=2, resources_per_node={"gpu": 3}), rt, "j")
    assert (shape.num_proc_per_node, shape.gpus_per_node) == (3, 3)
    shape = job_shape(TorchTrainer(resources_per_node={"amd.com/gpu": 2}), rt, "j")
    assert (shape.num_proc_per_node, shape.gpus_per_node) == (2, 2)


# ----------------------------------------------------------------------------- the plan


def test_every_node_gets_its_own_devices_by_uuid(cold: TrainerClient) -> None:
    name = cold.train(jax(nodes=2, gpus=2))
    job = cold.wait_for_job_status(name, timeout=120)
    got = {e["JAX_PROCESS_ID"]: e for e in envs(cold, name)}
    assert got["0"]["CUDA_VISIBLE_DEVICES"] == f"{uuid_of(0)},{uuid_of(1)}"
    assert got["1"]["CUDA_VISIBLE_DEVICES"] == f"{uuid_of(2)},{uuid_of(3)}"
    assert got["1"]["NVIDIA_VISIBLE_DEVICES"] == f"{uuid_of(2)},{uuid_of(3)}"
    assert got["0"]["NCCL_SOCKET_IFNAME"] == "lo" and got["0"]["NCCL_IB_DISABLE"] == "1"
    assert {k: [d["index"] for d in v] for k, v in job.gpus.items()} == {
        "node-0": [0, 1],
        "node-1": [2, 3],
    }
    assert cold.get_job_result(name) == f"{uuid_of(0)},{uuid_of(1)}"
    assigned = [e for e in cold.get_job_events(name) if e.reason == "GPUsAssigned"]
    assert assigned and "node-0: GPU 0, 1 · node-1: GPU 2, 3" in assigned[0].message
    assert held(cold) == {}  # released on completion

    from kf_jupyter.magics.render import JOB_HEADERS, job_rows

    row = job_rows([cold.get_job(name)])[0]
    assert row[JOB_HEADERS.index("gpus")] == "node-0: GPU 0, 1 · node-1: GPU 2, 3"


def test_a_job_without_gpus_sees_none_and_user_env_and_nccl_override(
    cold: TrainerClient,
) -> None:
    plain = cold.train(jax(gpus=None))
    mine = cold.train(
        jax(gpus=1),
        runtime_config=RuntimeConfig(env={"NCCL_SOCKET_IFNAME": "eth7"}),
    )
    cold.wait_for_job_status(plain, timeout=120)
    cold.wait_for_job_status(mine, timeout=120)
    assert envs(cold, plain)[0]["CUDA_VISIBLE_DEVICES"] == ""  # a pod without GPUs sees none
    assert envs(cold, plain)[0]["NCCL_SOCKET_IFNAME"] is None
    assert envs(cold, mine)[0]["NCCL_SOCKET_IFNAME"] == "eth7"  # the user's value wins


@pytest.mark.slow
def test_torch_ranks_map_local_rank_to_their_nodes_devices_warm(
    tmp_path: Path,
    monkeypatch: Any,
    standin_smi: StandinSMI,
) -> None:
    # The pool prestart_pool starts must be the job's: it failed (the job started cold, "the
    # warm pool is not ready") while prestart_pool left out the job's TORCH_DIST_INIT_BARRIER=1.
    monkeypatch.delenv("TORCH_DIST_INIT_BARRIER", raising=False)
    client = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state"))
    try:
        _wait_ready(client, "torch")
        name = client.train(
            TorchTrainer(func=report, num_nodes=2, resources_per_node={"gpu": 2}),
        )
        job = client.wait_for_job_status(name, timeout=300)
        ranks = sorted(envs(client, name), key=lambda e: int(e["RANK"]))
        assert [(e["RANK"], e["GROUP_RANK"], e["LOCAL_RANK"]) for e in ranks] == [
            ("0", "0", "0"),
            ("1", "0", "1"),
            ("2", "1", "0"),
            ("3", "1", "1"),
        ]  # numProcPerNode auto = 2 GPUs per node
        assert {e["WORLD_SIZE"] for e in ranks} == {"4"}
        node0 = f"{uuid_of(0)},{uuid_of(1)}"
        node1 = f"{uuid_of(2)},{uuid_of(3)}"
        assert [e["CUDA_VISIBLE_DEVICES"] for e in ranks] == [node0, node0, node1, node1]
        assert job.warm is True, client.get_job_events(name)
        # The pool that forked them never loaded the CUDA driver.
        pools = [json.loads(p.read_text()) for p in (tmp_path / "state" / "warm").glob("*.json")]
        pids = [p["pid"] for p in pools if p.get("pid")]
        assert pids
        for pid in pids:
            maps = Path(f"/proc/{pid}/maps").read_text()
            assert "libcuda.so" not in maps and "libnvidia-ml" not in maps
    finally:
        for j in client.list_jobs():
            client.delete_job(j.name)
        stop_all(tmp_path / "state")


def test_the_pool_refuses_to_fork_once_cuda_is_loaded(tmp_path: Path) -> None:
    """The guard the pool runs before every fork: a STAND-IN `libcuda.so.1` (a copy of libm,
    named so) loaded into the process makes it decline, and the job starts cold."""
    import ctypes.util

    libm = ctypes.util.find_library("m")
    assert libm
    candidates = [Path(d) / libm for d in ("/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64")]
    source = next((p for p in candidates if p.exists()), None)
    if source is None:
        pytest.skip("no libm to copy")
    fake = tmp_path / "libcuda.so.1"
    fake.write_bytes(source.read_bytes())
    zygote = REPO / "kf_jupyter" / "backends" / "local" / "warm" / "zygote.py"
    code = (
        "import ctypes, importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('z', {str(zygote)!r})\n"
        "z = importlib.util.module_from_spec(spec); spec.loader.exec_module(z)\n"
        "print('before', z.cuda_initialised())\n"
        f"ctypes.CDLL({str(fake)!r})\n"
        "print('after', z.cuda_initialised())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out[0] == "before None"
    assert out[1].startswith("after the CUDA driver (libcuda) is loaded")


# ----------------------------------------------------------------------------- refusals


def test_more_than_exist_is_refused_with_a_clear_error(
    cold: TrainerClient,
    standin_smi: StandinSMI,
) -> None:
    with pytest.raises(ValidationError) as err:
        cold.train(jax(nodes=2, gpus=3))
    text = str(err.value)
    assert "asks for 3 GPUs on each of its 2 nodes (6 in all)" in text
    assert "this machine has only 4" in text and "GPU 3 (Stand-in GPU" in text
    assert cold.list_jobs() == []  # nothing was created
    standin_smi.set_devices(0, fail=True)
    with pytest.raises(ValidationError, match=r"could not be listed.*NVIDIA driver"):
        cold.train(jax(gpus=1))


def test_no_nvidia_smi_means_no_gpu_job(tmp_path: Path, monkeypatch: Any) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}{os.path.dirname(sys.executable)}")
    client = TrainerClient(LocalBackendConfig(state_dir=tmp_path / "state", warm=False))
    with pytest.raises(ValidationError, match=r"has no NVIDIA GPU \(nvidia-smi is not on PATH"):
        client.train(jax(gpus=1))
    plan = client.backend.dry_run(jax(gpus=None))
    assert "gpus" not in plan  # nothing to say on a machine without GPUs


def test_dry_run_shows_the_device_plan(cold: TrainerClient, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    first = cold.train(jax(gate, gpus=1))
    wait_until(lambda: held(cold) == {uuid_of(0): first}, what="the first job's device")
    plan = cold.backend.dry_run(jax(nodes=2, gpus=1))["gpus"]
    assert plan["free"] == 3 and plan["per_node"] == 1
    assert plan["plan"]["node-0"]["CUDA_VISIBLE_DEVICES"] == uuid_of(1)
    assert plan["plan"]["node-1"]["CUDA_VISIBLE_DEVICES"] == uuid_of(2)
    assert plan["nccl_defaults"] == {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}
    busy = cold.backend.dry_run(jax(nodes=2, gpus=2))["gpus"]
    assert busy["plan"] is None
    assert busy["note"] == f"waiting for 4 GPUs, 3 free (the others are held by job {first})"
    gate.write_text("")
    cold.wait_for_job_status(first, timeout=120)


# ----------------------------------------------------------------------------- waiting, release


SUBMIT = """
import sys
from kf_jupyter import JAXTrainer, TrainerClient
from kf_jupyter.backends.local.config import LocalBackendConfig
from tests.test_local_gpus import jax
c = TrainerClient(LocalBackendConfig(state_dir=sys.argv[1], warm=False))
print(c.train(jax(gpus=int(sys.argv[2]))))
"""


def submit_elsewhere(client: TrainerClient, gpus: int) -> str:
    """Submit a job from another process (another kernel): only the state folder is shared."""
    out = subprocess.run(
        [sys.executable, "-c", SUBMIT, str(client.backend.state_dir), str(gpus)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_a_job_waits_for_devices_another_kernels_job_holds(
    cold: TrainerClient,
    standin_smi: StandinSMI,
    tmp_path: Path,
) -> None:
    standin_smi.set_devices(2)
    gate = tmp_path / "gate"
    first = cold.train(jax(gate, gpus=2))
    wait_until(lambda: status_of(cold, first) == RUNNING, what="first running")
    second = submit_elsewhere(cold, 1)
    wait_until(
        lambda: cold.get_job(second).reason == "WaitingForGPUs", what="the second job waiting"
    )
    job = cold.get_job(second)
    assert job.status == CREATED and job.gpus == {}
    assert job.message == f"waiting for 1 GPU, 0 free (the others are held by job {first})"
    # The supervisor writes the status, then appends the event: wait for it rather than race it.
    wait_until(
        lambda: any(e.reason == "WaitingForGPUs" for e in cold.get_job_events(second)),
        what="the WaitingForGPUs event",
    )
    time.sleep(1.0)  # it keeps waiting while they are held
    assert status_of(cold, second) == CREATED and envs(cold, second) == []
    gate.write_text("")
    done = cold.wait_for_job_status(second, timeout=120)
    assert done.reason == "AllJobsCompleted"
    assert envs(cold, second)[0]["CUDA_VISIBLE_DEVICES"] == uuid_of(0)
    assert held(cold) == {}


def test_devices_are_released_on_failure_cancel_delete_and_suspend(
    cold: TrainerClient,
    standin_smi: StandinSMI,
    tmp_path: Path,
) -> None:
    standin_smi.set_devices(1)
    only = {uuid_of(0)}

    # failure
    gate = tmp_path / "g1"
    failing = JAXTrainer(
        func=fail_after,
        func_args={"gate": str(gate)},
        initialize_distributed=False,
        resources_per_node={"gpu": 1},
    )
    a = cold.train(failing)
    wait_until(lambda: set(held(cold)) == only, what="a holds the device")
    gate.write_text("")
    wait_until(lambda: status_of(cold, a) == FAILED, what="a failed")
    assert held(cold) == {}

    # cancel, while another job waits: the waiting one gets the device
    b = cold.train(jax(tmp_path / "g2", gpus=1))
    wait_until(lambda: held(cold) == {uuid_of(0): b}, what="b holds the device")
    c = cold.train(jax(tmp_path / "g3", gpus=1))
    wait_until(lambda: cold.get_job(c).reason == "WaitingForGPUs", what="c waits")
    cold.backend.cancel_job(b)
    wait_until(lambda: held(cold) == {uuid_of(0): c}, what="c got it after b's cancel")

    # suspend gives it back; a resumed job waits for it again
    cold.suspend_job(c)
    assert status_of(cold, c) == SUSPENDED and held(cold) == {}
    assert cold.get_job(c).gpus == {}
    d = cold.train(jax(tmp_path / "g4", gpus=1))
    wait_until(lambda: held(cold) == {uuid_of(0): d}, what="d took it")
    cold.resume_job(c)
    job = cold.get_job(c)
    assert job.status == CREATED and job.reason == "WaitingForGPUs"

    # delete
    cold.delete_job(d)
    wait_until(lambda: held(cold) == {uuid_of(0): c}, what="c got it after d's delete")
    wait_until(lambda: status_of(cold, c) == RUNNING, what="c running again")
    (tmp_path / "g3").write_text("")
    assert cold.wait_for_job_status(c, timeout=120).status == COMPLETE
    assert held(cold) == {}

    # a job cancelled while it waits never takes anything
    e = cold.train(jax(tmp_path / "g5", gpus=1))
    wait_until(lambda: held(cold) == {uuid_of(0): e}, what="e holds it")
    f = cold.train(jax(tmp_path / "g6", gpus=1))
    wait_until(lambda: cold.get_job(f).reason == "WaitingForGPUs", what="f waits")
    cold.backend.cancel_job(f)
    assert cold.get_job(f).reason == "Cancelled" and held(cold) == {uuid_of(0): e}
    cold.delete_job(e)
    assert held(cold) == {}


def test_a_crashed_supervisors_devices_come_back_once_its_ranks_are_gone(
    cold: TrainerClient,
    standin_smi: StandinSMI,
    tmp_path: Path,
) -> None:
    standin_smi.set_devices(2)
    a = cold.train(jax(tmp_path / "never", nodes=2, gpus=1))
    wait_until(lambda: len(envs(cold, a)) == 2, what="a's ranks running")
    st = json.loads((cold.backend.jobs_dir / a / "status.json").read_text())
    os.kill(int(st["supervisor_pid"]), signal.SIGKILL)
    wait_until(lambda: status_of(cold, a) == FAILED, what="a lost")
    assert cold.get_job(a).reason == "SupervisorLost"
    # Its ranks still run on the devices: nobody else may have them yet.
    b = cold.train(jax(gpus=2))
    wait_until(lambda: cold.get_job(b).reason == "WaitingForGPUs", what="b waits")
    assert f"held by job {a}" in cold.get_job(b).message
    # The ranks die too (a crash of everything): the next allocation reclaims the devices.
    for p in job_processes(a):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    assert_no_orphans(a)
    job = cold.wait_for_job_status(b, timeout=120)
    assert {d["index"] for d in job.gpus["node-0"]} == {0, 1}
    assert held(cold) == {}


def daemon_then_wait(pid_file: str, gate: str) -> str:
    """Double-fork a daemon (fork, setsid, fork) that sleeps 10 minutes, write its pid, then
    wait for `gate` (the rank runs on)."""
    import os
    import time

    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pid_file + ".tmp", "w") as fh:
                fh.write(str(os.getpid()))
            os.replace(pid_file + ".tmp", pid_file)
            time.sleep(600)
        os._exit(0)
    while not os.path.exists(gate):
        time.sleep(0.05)
    return "done"


@pytest.mark.reliability(
    scenario="a cold GPU job's rank double-forks a daemon, then its supervisor is SIGKILLed: the "
    "device stays the job's, delete_job stops the daemon, the next job gets the device",
    area="local",
)
def test_a_daemon_of_a_cold_job_goes_with_it_after_its_supervisor_is_killed(
    cold: TrainerClient,
    standin_smi: StandinSMI,
    tmp_path: Path,
) -> None:
    """Failed before (issue 38): the daemon, re-parented to the supervisor (a subreaper) once
    its parent left, was never in the job's recorded processes; with the supervisor killed,
    delete_job left it running and the allocator gave its device to the next job."""
    standin_smi.set_devices(1)
    pid_file = tmp_path / "daemon.pid"
    a = cold.train(
        JAXTrainer(
            func=daemon_then_wait,
            func_args={"pid_file": str(pid_file), "gate": str(tmp_path / "never")},
            initialize_distributed=False,
            resources_per_node={"gpu": 1},
        )
    )
    wait_until(pid_file.exists, what="the daemon's pid")
    daemon = int(pid_file.read_text())
    try:
        time.sleep(2 * sv.SNAPSHOT_SECONDS + 0.5)  # the supervisor records its processes
        st = json.loads((cold.backend.jobs_dir / a / "status.json").read_text())
        os.kill(int(st["supervisor_pid"]), signal.SIGKILL)
        wait_until(lambda: cold.get_job(a).reason == "SupervisorLost", what="a lost")
        # While the daemon runs the device stays the job's, as long as its rank's.
        assert held(cold) == {uuid_of(0): a}
        cold.delete_job(a)
        end = time.monotonic() + 10
        while time.monotonic() < end and _running(daemon):
            time.sleep(0.05)
        assert not _running(daemon), "delete_job left the job's daemon running"
        b = cold.train(jax(gpus=1))
        assert cold.wait_for_job_status(b, timeout=120).status == COMPLETE
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(daemon).kill()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_the_allocator_never_gives_a_device_twice_under_concurrent_jobs(
    cold: TrainerClient,
    standin_smi: StandinSMI,
    tmp_path: Path,
) -> None:
    """Six 1-GPU jobs submitted at once from three processes (kernels) on 3 devices: no two
    jobs' ranks ever ran on one device at the same time, and every job completes. A job holds
    its device until all six are submitted (a gate file), so some must wait however slowly
    a loaded machine submits them."""
    standin_smi.set_devices(3)
    gate = tmp_path / "all-submitted"
    job = f"jax(gate=__import__('pathlib').Path({str(gate)!r}), gpus=1, hold=0.5)"
    code = SUBMIT.replace("jax(gpus=int(sys.argv[2]))", job)
    code = code.replace("print(c.train(", f"print(c.train({job}));print(c.train(")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(cold.backend.state_dir), "1"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(3)
    ]
    names = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        names += out.split()
    assert len(names) == 6
    gate.touch()
    for n in names:
        assert cold.wait_for_job_status(n, timeout=240).status == COMPLETE
    runs = [(n, *envs(cold, n)) for n in names]
    spans = [(e["CUDA_VISIBLE_DEVICES"], e["t"], e["done"], n) for n, e in runs]
    assert {s[0] for s in spans} <= {uuid_of(i) for i in range(3)}
    for i, (dev, t0, t1, n) in enumerate(spans):
        for dev2, u0, u1, m in spans[i + 1 :]:
            assert dev != dev2 or t1 <= u0 or u1 <= t0, (n, m, dev)
    waited = [n for n in names if any(e.reason == "WaitingForGPUs" for e in cold.get_job_events(n))]
    assert len(waited) >= 3  # 6 jobs on 3 devices, held until all were submitted: 3 waited
    assert held(cold) == {}


def test_the_monitor_shows_each_nodes_devices_with_usage(
    cold: TrainerClient,
    standin_smi: StandinSMI,
    tmp_path: Path,
) -> None:
    from kf_jupyter.widgets.monitor import JobMonitor

    gate = tmp_path / "gate"
    name = cold.train(jax(gate, nodes=2, gpus=1))
    wait_until(lambda: status_of(cold, name) == RUNNING, what="running")
    usage = cold.backend.gpu_usage(name)
    assert usage[uuid_of(1)] == {
        "node": "node-1",
        "index": 1,
        "utilization": 17.0,  # what the stand-in reports for device 1
        "memory_used_mib": 200.0,
        "memory_total_mib": 81920.0,
    }
    monitor = JobMonitor(cold, name, poll_status=True, records=[])
    monitor._poll()
    shown = monitor.gpus.value
    assert "<b>node-0</b>: <span" in shown and "GPU 0 7% · 100 MiB / 80.0 GiB" in shown
    assert "<b>node-1</b>" in shown and "GPU 1 17% · 200 MiB / 80.0 GiB" in shown
    assert monitor.gpus.layout.display == ""
    gate.write_text("")
    cold.wait_for_job_status(name, timeout=120)
    monitor._poll()
    assert "GPU 0</span>" in monitor.gpus.value and "%" not in monitor.gpus.value  # no usage
    assert cold.backend.gpu_usage(name) == {}
    monitor.close()


def test_mig_slices_are_refused_locally(cold: TrainerClient) -> None:
    with pytest.raises(ValidationError, match=r"MIG slices \(nvidia.com/mig-1g.5gb\)"):
        cold.train(
            JAXTrainer(
                func=report, initialize_distributed=False, resources_per_node={"mig-1g.5gb": 1}
            )
        )
    assert cold.list_jobs() == []


def test_the_dry_run_magic_prints_the_device_plan(
    tmp_path: Path, monkeypatch: Any, capsys: Any, standin_smi: StandinSMI
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from kf_jupyter.magics.core import KubeflowMagics

    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "magic-state"))
    sh = InteractiveShell.instance()
    sh.register_magics(KubeflowMagics(shell=sh))
    result = sh.run_cell("%%torchtrain -n 2 --resources gpu=2 --dry-run\nprint(1)\n")
    out = capsys.readouterr().out
    assert result.success, out
    assert "numProcPerNode" not in out  # the manifest leaves auto to the Trainer
    assert "# local GPUs: 2 per node; 4 of 4 free now" in out
    assert "#   node-1: GPU 2 (Stand-in GPU, GPU-00000002), GPU 3 (" in out
    assert f"#     CUDA_VISIBLE_DEVICES={uuid_of(2)},{uuid_of(3)}" in out
    assert "NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1" in out
    result = sh.run_cell("%%torchtrain -n 1 --resources gpu=5 --dry-run\nprint(1)\n")
    err = capsys.readouterr()
    assert "asks for 5 GPUs, but this machine has only 4" in err.out + err.err
    assert "Traceback" not in err.out + err.err
