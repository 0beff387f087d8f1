"""Issue 19, items 3-7 and 11: what a local run starts is what a real Trainer v2.3 cluster starts.

numProcPerNode `auto` (torch.go:121-135), the MPI world of the default runtimes (mpi.go:116-139,
316-345), rank 0's progress on MPI (trainjobstatus.go:88-96), the hostfile passed explicitly,
one XGBoost worker per GPU (xgboost.go:100-113), and a runner that works as a restricted pod's
non-root user with no writable $HOME, /tmp or working directory.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from kf_jupyter import JAXTrainer, MPITrainer, RuntimeConfig, TorchTrainer, XGBoostTrainer
from kf_jupyter.backends.local.runtimes import builtin
from kf_jupyter.build import build_launch_plan, build_trainjob, job_shape
from kf_jupyter.policies import auto_procs, get_policy, gpus_per_node
from kf_jupyter.runtimes import Runtime

from .gpu_standin import install, uuid_of
from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401
from .test_pip_prelude import index  # noqa: F401

RTS = {r.name: r for r in builtin()}


def noop() -> None:
    pass


# -- the rule, in the core ------------------------------------------------------------------


def test_auto_is_one_per_node_without_gpu_or_cpu_request_and_never_the_local_cpu_count() -> None:
    plan = build_launch_plan(
        build_trainjob(TorchTrainer(func=noop, num_nodes=2), RTS["torch-distributed"], name="j"),
        TorchTrainer(func=noop, num_nodes=2),
        RTS["torch-distributed"],
        port=1234,
        job_dir="/x",
    )
    # before: "auto", which torchrun turns into one process per local CPU
    assert [p.env["PET_NPROC_PER_NODE"] for p in plan.processes] == ["1", "1"]
    world = plan.to_dict()["world"]
    assert world["world_size"] == 2 and world["processes_per_node"] == 1
    assert "no GPU and no CPU request" in world["why"]


@pytest.mark.parametrize(
    ("resources", "count", "env"),
    [
        ({"cpu": "2500m"}, 3, "3"),  # rounded up, as resource.Quantity.Value()
        ({"requests": {"cpu": "500m"}, "limits": {"cpu": "4"}}, 1, "1"),  # the request wins
        ({"limits": {"cpu": "2"}}, 2, "2"),  # no request: the limit
        ({"nvidia.com/gpu": "2", "cpu": "8"}, 2, "auto"),  # GPUs: one per GPU, env stays auto
        ({"amd.com/gpu": "4"}, 4, "auto"),  # any name containing "gpu"
        ({"requests": {"example.com/GPU-big": "1"}}, 1, "auto"),
        ({}, 1, "1"),
    ],
)
def test_auto_rule(resources, count, env) -> None:
    procs = auto_procs(resources)
    assert (procs.count, procs.env) == (count, env)


def test_gpu_count_reads_requests_then_limits_of_any_vendor() -> None:
    assert gpus_per_node({"requests": {"cpu": "1"}, "limits": {"amd.com/gpu": "2"}}) == 2
    assert gpus_per_node({"nvidia.com/mig-1g.5gb": "1"}) == 0  # no "gpu" in the name


def test_runtime_template_resources_are_used_when_the_job_sets_none() -> None:
    rt = Runtime.from_manifest(
        {
            "metadata": {"name": "rt"},
            "spec": {
                "mlPolicy": {"torch": {}},
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {
                                        "template": {
                                            "spec": {
                                                "containers": [
                                                    {
                                                        "name": "node",
                                                        "resources": {"requests": {"cpu": "3"}},
                                                    }
                                                ]
                                            }
                                        }
                                    }
                                },
                            }
                        ]
                    }
                },
            },
        }
    )
    assert job_shape(TorchTrainer(func=noop), rt, "j").procs == 3
    assert job_shape(TorchTrainer(func=noop, resources_per_node={"cpu": 1}), rt, "j").procs == 1


# -- MPI: the world of the default runtimes --------------------------------------------------


@pytest.mark.parametrize(("nodes", "hosts"), [(1, 2), (2, 2), (3, 3), (4, 4)])
def test_mpi_world_on_default_runtimes(nodes, hosts) -> None:
    shape = job_shape(MPITrainer(func=noop, num_nodes=nodes), RTS["deepspeed-distributed"], "j")
    assert (shape.hosts, shape.world_size) == (hosts, hosts)
    lines = get_policy("mpi").cluster_hostfile(shape).splitlines()
    # max(numNodes-1, 1) node pods, then the launcher (the runtime lists node first): rank 0
    # is on node-0.
    assert lines[0] == "j-node-0-0.j slots=1" and lines[-1] == "j-launcher-0-0.j slots=1"
    assert len(lines) == hosts


def test_mpi_slots_follow_gpus_when_the_runtime_says_one() -> None:
    trainer = MPITrainer(func=noop, num_nodes=2, resources_per_node={"gpu": 4})
    shape = job_shape(trainer, RTS["deepspeed-distributed"], "j")
    assert (shape.procs, shape.world_size) == (4, 8)
    explicit = MPITrainer(
        func=noop, num_nodes=2, num_proc_per_node=2, resources_per_node={"gpu": 4}
    )
    assert job_shape(explicit, RTS["deepspeed-distributed"], "j").procs == 2


def test_mpi_command_names_the_hostfile() -> None:
    job = build_trainjob(MPITrainer(func=noop), RTS["deepspeed-distributed"], name="j")
    script = job["spec"]["trainer"]["command"][2]
    assert 'mpirun --hostfile "${KF_JUPYTER_MPI_HOSTFILE:-/etc/mpi/hostfile}"' in script


# -- XGBoost: one worker per GPU ---------------------------------------------------------------


def test_xgboost_starts_one_worker_per_gpu() -> None:
    trainer = XGBoostTrainer(func=noop, num_nodes=2, resources_per_node={"gpu": 2})
    job = build_trainjob(trainer, RTS["xgboost-distributed"], name="j")
    assert "KF_JUPYTER_WORKERS_PER_NODE=2 exec python3" in job["spec"]["trainer"]["command"][2]
    env = get_policy("xgboost").cluster_env(job_shape(trainer, RTS["xgboost-distributed"], "j"), 1)
    assert env["DMLC_NUM_WORKER"] == "4"


# -- real runs -------------------------------------------------------------------------------


def world_size() -> int:
    import torch.distributed as dist

    dist.init_process_group("gloo")
    size = dist.get_world_size()
    print(f"WORLD={size}", flush=True)
    dist.destroy_process_group()
    return size


@pytest.mark.slow
def test_sdk_custom_trainer_two_nodes_is_a_world_of_two_locally(tmp_path, monkeypatch) -> None:
    from kf_jupyter.sdk import CustomTrainer, TrainerClient

    monkeypatch.setenv("KF_JUPYTER_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    client = TrainerClient()
    name = client.train(trainer=CustomTrainer(func=world_size, num_nodes=2))
    client.wait_for_job_status(name, timeout=240)
    logs = "\n".join(client.get_job_logs(name))  # step node-0: one rank, as on a cluster
    # before: PET_NPROC_PER_NODE=auto, one rank per local CPU (a world of 4 on 2 cores)
    assert logs.count("WORLD=2") == 1 and "WORLD=4" not in logs, logs
    client.delete_job(name)


def mpi_size() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_size()


@pytest.mark.slow
def test_mpi_one_node_on_deepspeed_runs_the_launcher_as_a_second_host(client) -> None:
    name = client.train(MPITrainer(func=mpi_size, num_nodes=1))
    client.wait_for_job_status(name, timeout=240)
    assert client.get_job_result(name) == 2  # before: 1 (num_nodes x slots)
    assert_no_orphans(name)


def xgb_world() -> dict:
    import os

    from xgboost import collective

    return {
        "world": collective.get_world_size(),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


@pytest.mark.slow
def test_xgboost_two_gpus_per_node_runs_four_workers(client, tmp_path, monkeypatch) -> None:
    # The stand-in nvidia-smi (tests/gpu_standin.py) gives 4 devices; XGBoost runs on the CPU:
    # the GPUs only shape the job, as the controller counts them.
    smi = install(tmp_path / "standin-bin", 4)
    monkeypatch.setenv("PATH", f"{smi.folder}{os.pathsep}{os.environ.get('PATH', '')}")
    trainer = XGBoostTrainer(func=xgb_world, num_nodes=2, resources_per_node={"gpu": 2})
    name = client.train(trainer)
    # before: two workers for a tracker told to wait for four, until the timeout
    client.wait_for_job_status(name, timeout=240)
    # worker 0 of node 0 sees only the first of its node's two devices
    assert client.get_job_result(name) == {"world": 4, "visible": uuid_of(0)}
    logs = {p.name for p in (client.backend.jobs_dir / name / "logs").iterdir()}
    assert {f"rank-{r}.log" for r in range(4)} <= logs
    assert_no_orphans(name)


def mpi_report() -> None:
    from kf_jupyter import report

    report(step=3, progress=0.5, loss=0.25)


class _StatusServer(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        self.posts: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts.append(
                    {"auth": self.headers.get("Authorization"), "body": json.loads(body)}
                )
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.mark.slow
def test_mpi_rank_zero_progress_reaches_the_status_server_through_the_launcher(tmp_path) -> None:
    """As on a cluster: the launcher has KUBEFLOW_TRAINER_* and the token, the ranks (on node
    pods) do not. A stand-in `mpirun` first on PATH removes them from the ranks' environment."""
    job = build_trainjob(MPITrainer(func=mpi_report), RTS["deepspeed-distributed"], name="j")
    script = job["spec"]["trainer"]["command"][2]
    real = shutil.which("mpirun")
    assert real
    shim = tmp_path / "bin" / "mpirun"
    shim.parent.mkdir()
    shim.write_text(
        "#!/bin/bash\n# TEST STAND-IN: ranks run in node pods, without the launcher's env\n"
        'args=(); while [ $# -gt 0 ] && [ "$1" != bash ]; do args+=("$1"); shift; done\n'
        f'exec {real} "${{args[@]}}" env -u KUBEFLOW_TRAINER_SERVER_URL '
        '-u KUBEFLOW_TRAINER_SERVER_TOKEN -u KUBEFLOW_TRAINER_SERVER_CA_CERT "$@"\n'
    )
    shim.chmod(0o755)
    (tmp_path / "token").write_text("tok-1\n")
    (tmp_path / "hostfile").write_text("127.0.0.1 slots=2\n")
    server = _StatusServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {
            **os.environ,
            "PATH": f"{shim.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}",
            "TMPDIR": str(tmp_path),
            "KF_JUPYTER_MPI_HOSTFILE": str(tmp_path / "hostfile"),
            "KUBEFLOW_TRAINER_SERVER_URL": f"http://127.0.0.1:{server.server_address[1]}/s",
            "KUBEFLOW_TRAINER_SERVER_TOKEN": str(tmp_path / "token"),
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            "OMPI_MCA_hwloc_base_binding_policy": "none",
        }
        for k in (
            "KF_JUPYTER_RANK_LOG_DIR",
            "KF_JUPYTER_WORKDIR",
            "OMPI_MCA_orte_default_hostfile",
        ):
            env.pop(k, None)
        if os.geteuid() == 0:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        proc = subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=180
        )
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("##kf-jupyter:report ") == 2  # both ranks' lines pass through
    # before: no post at all (rank 0 has no URL; the launcher only ran mpirun)
    assert [p["auth"] for p in server.posts] == ["Bearer tok-1"]
    status = server.posts[0]["body"]["trainerStatus"]
    assert status["progressPercentage"] == 50
    assert {"name": "loss", "value": "0.25"} in status["metrics"]


def restricted_job(greeting: str = "hi") -> str:
    import os
    import tempfile

    import kfj_demo_a

    with tempfile.NamedTemporaryFile() as fh:  # Python finds a temporary directory
        fh.write(b"x")
    return f"{greeting} {kfj_demo_a.VALUE} {os.getuid()}"


@pytest.mark.slow
def test_runner_and_install_work_as_non_root_with_read_only_home_tmp_and_cwd(index) -> None:  # noqa: F811
    from .test_pip_prelude import _externally_managed_system_python

    python = _externally_managed_system_python() or shutil.which("python3")
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the command as nobody")
    rc = RuntimeConfig(packages_to_install=["kfj-demo-a"], pip_index_urls=[f"{index}/simple"])
    trainer = JAXTrainer(func=restricted_job, initialize_distributed=False)
    job = build_trainjob(trainer, RTS["jax-distributed"], rc, name="j")
    script = job["spec"]["trainer"]["command"][2]
    ro = Path(tempfile.mkdtemp(prefix="kfj-ro-", dir="/tmp"))  # root's: nobody cannot write it
    ro.chmod(stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    shm_before = set(Path("/dev/shm").glob("kf-jupyter.*"))
    try:
        env = {
            "PATH": f"{Path(str(python)).parent}:/usr/bin:/bin",
            "HOME": "/nonexistent",  # restricted images' unwritable $HOME
            "TMPDIR": str(ro),  # stands in for a read-only root filesystem's /tmp
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_NO_CACHE_DIR": "1",
            **{e["name"]: e["value"] for e in job["spec"]["trainer"]["env"]},
        }
        proc = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", "-c", script],
            env=env,
            cwd=ro,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        shutil.rmtree(ro, ignore_errors=True)
        # the work directory the command made in /dev/shm (the only writable place left)
        for made in set(Path("/dev/shm").glob("kf-jupyter.*")) - shm_before:
            shutil.rmtree(made, ignore_errors=True)
    # before: "mktemp: failed to create directory via template" and exit 1
    assert proc.returncode == 0, proc.stderr
    assert "hi 42 65534" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_no_writable_directory_is_one_paragraph_naming_the_setting(tmp_path) -> None:
    """Everything read-only, /dev/shm too (a private mount namespace): one clear paragraph."""
    if os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("needs root, setpriv and unshare")
    probe = subprocess.run(
        ["unshare", "-m", "mount", "-t", "tmpfs", "-o", "ro", "tmpfs", "/dev/shm"],
        capture_output=True,
    )
    if probe.returncode != 0:
        pytest.skip("cannot make a private mount namespace here")
    job = build_trainjob(
        JAXTrainer(func=noop, initialize_distributed=False), RTS["jax-distributed"]
    )
    script = job["spec"]["trainer"]["command"][2]
    ro = Path(tempfile.mkdtemp(prefix="kfj-ro-", dir="/tmp"))
    ro.chmod(0o755)  # root's: nobody cannot write it
    try:
        inner = (
            "mount -t tmpfs -o ro tmpfs /dev/shm && exec setpriv --reuid=65534 --regid=65534 "
            '--clear-groups bash -c "$0"'
        )
        proc = subprocess.run(
            ["unshare", "-m", "bash", "-c", inner, script],
            env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "TMPDIR": str(ro)},
            cwd=ro,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(ro, ignore_errors=True)
    assert proc.returncode == 1
    # before: "mktemp: failed to create directory via template ...: Permission denied"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kf-jupyter: this container has no writable")
    assert "readOnlyRootFilesystem" in lines[0] and "emptyDir" in lines[0]


def _room(trainer_cls: type, runtime: str, tmp_path: Path) -> int:
    """The largest script (bytes) whose command still fits, found by bisection."""
    from kf_jupyter.errors import ValidationError

    def fits(n: int) -> bool:
        path = tmp_path / "big.py"
        # a quote per line: the command quotes the source, MPI must not quote it twice
        path.write_text("".join(f"x = 'it is {i:06d}'\n" for i in range(n // 20)))
        try:
            build_trainjob(trainer_cls(script=str(path)), RTS[runtime], name="j")
        except ValidationError:
            return False
        return True

    lo, hi = 0, 140_000
    while hi - lo > 400:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def test_mpi_command_leaves_the_script_as_much_room_as_torch(tmp_path) -> None:
    """Issue 19 (f): the MPI command carried the runner twice (and the rank script quoted a
    second time), leaving about 67 KB for the source where torch leaves about 100 KB."""
    torch_room = _room(TorchTrainer, "torch-distributed", tmp_path)
    mpi_room = _room(MPITrainer, "deepspeed-distributed", tmp_path)
    assert torch_room > 65_000
    assert mpi_room >= torch_room - 2_000, (mpi_room, torch_room)
