"""Re-running real training code (issue 34): the quickstart notebook's training cell as
committed, and a 1x2 DDP function with a real optimizer step, against ipyparallel's persistent
engines running the same function and against plain torchrun (not a test).

The quickstart cell is read from notebooks/01-quickstart.ipynb (the `%%torchtrain` cell, its
magic line's -n/-p shape) and turned into a function as the magic does
(`magics.cell.build_cell_function`). Per payload, interleaved rounds of

  ipyparallel   the function on as many persistent engines as the job has ranks (torch and
                whatever the function imported stay imported; no isolation between runs)
  ours warm     TrainerClient.train() of TorchTrainer(nodes x procs) with the function, then
                wait_for_job_status (a re-run: the pool is ready and has learned what the
                first run imported, e.g. torch._dynamo)
  torchrun      plain `torchrun --nproc-per-node=N` of a script that runs the function (cold)

It also prints the first warm run (before the pool had learned anything), what the pool
learned, and its memory (PSS with what it keeps forked ahead) before and after.

    .venv/bin/python bench/bench_real.py [--rounds 5] [--payload quickstart|ddp_sgd|all]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
NOTEBOOK = ROOT / "notebooks" / "01-quickstart.ipynb"


def ddp_sgd():
    """A 1x2 DDP step with a real optimizer (the first SGD(...) imports torch._dynamo)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        loss = model(torch.ones(16, 8)).pow(2).mean()
        loss.backward()
        opt.step()
    out = round(float(loss), 4)
    del model, opt
    dist.destroy_process_group()
    return out


def quickstart_cell(folder: Path) -> tuple[Any, int, int, str]:
    """The quickstart's training cell as committed: (function, nodes, procs, its source)."""
    from kf_jupyter.magics.cell import build_cell_function

    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        text = "".join(cell.get("source") or [])
        if cell.get("cell_type") == "code" and text.startswith("%%torchtrain"):
            break
    else:
        raise SystemExit(f"no %%torchtrain cell in {NOTEBOOK}")
    magic, _, body = text.partition("\n")
    words = shlex.split(magic)
    nodes = int(words[words.index("-n") + 1])
    procs = int(words[words.index("-p") + 1])
    fn = build_cell_function(body)
    path = folder / "kf_bench_quickstart.py"
    path.write_text(fn.source + "\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("kf_bench_quickstart", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, fn.name), nodes, procs, fn.source


def on_engine(source, name, rank, world, port):
    """Run the function `name` of `source` as rank `rank` of `world` on a persistent engine,
    with one thread per rank as torchrun (and our nodes) give several ranks on one machine
    (OMP_NUM_THREADS=1)."""
    import os

    import torch

    torch.set_num_threads(1)
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
    )  # fmt: skip
    scope = {"__name__": "kf_bench_engine"}
    exec(compile(source, "<bench function>", "exec"), scope)
    return scope[name]()


TORCHRUN_SCRIPT = """\
import sys
scope = {"__name__": "kf_bench_torchrun"}
exec(compile(open(sys.argv[1]).read(), sys.argv[1], "exec"), scope)
scope[sys.argv[2]]()
"""


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _pss(client: Any) -> str:
    from kf_jupyter.backends.local.warm import pool as warm_pool

    out = []
    for p in warm_pool.list_pools(client.backend.state_dir):
        if p.get("alive"):
            out.append(f"{warm_pool.pool_bytes(p) / 2**20:.0f} MiB")
    return ", ".join(out) or "-"


def _learned(client: Any) -> list[str]:
    from kf_jupyter.backends.local.warm import pool as warm_pool

    for p in warm_pool.list_pools(client.backend.state_dir):
        meta = warm_pool._read_meta(Path(p["meta_path"])) or {}
        if p.get("alive") and p["state"] == "ready":
            return list(meta.get("learned") or [])
    return []


def _wait_learned(client: Any, name: str, timeout: float = 300) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if name in _learned(client):
            return True
        time.sleep(0.1)
    return False


def bench(payload: str, rounds: int, rc: Any, tmp: Path) -> None:
    """One payload: warm-up, then interleaved rounds; prints its table."""
    from kf_jupyter import TorchTrainer, TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig
    from kf_jupyter.backends.local.ports import free_port
    from kf_jupyter.backends.local.warm import pool as warm_pool

    work = tmp / payload
    work.mkdir()
    if payload == "quickstart":
        fn, nodes, procs, source = quickstart_cell(work)
        name = fn.__name__
    else:
        fn, nodes, procs = ddp_sgd, 1, 2
        import inspect

        source, name = inspect.getsource(ddp_sgd), "ddp_sgd"
    world = nodes * procs
    src_file = work / "payload.py"
    src_file.write_text(source, encoding="utf-8")
    (work / "run.py").write_text(TORCHRUN_SCRIPT, encoding="utf-8")
    engines = [rc[i] for i in rc.ids[:world]]
    state = tmp / f"state-{payload}"
    client = TrainerClient(LocalBackendConfig(state_dir=str(state), cwd=str(work)))
    pool = client.backend.prestart_pool("torch")
    assert pool is not None
    while not pool.socket.exists():
        time.sleep(0.05)
    time.sleep(1.0)
    pss_before = _pss(client)

    colds: list[str] = []

    def run_ipp() -> float:
        port = free_port()
        t = time.perf_counter()
        res = [
            e.apply_async(on_engine, source, name, i, world, port) for i, e in enumerate(engines)
        ]
        for r in res:
            r.get(timeout=600)
        return time.perf_counter() - t

    def run_ours() -> tuple[float, bool]:
        t = time.perf_counter()
        job = client.train(TorchTrainer(func=fn, num_nodes=nodes, num_proc_per_node=procs))
        got = client.wait_for_job_status(job, timeout=600)
        took = time.perf_counter() - t
        if got.status != "Complete":
            raise SystemExit(f"{job}: {got.status}: {client.get_job_events(job)[-3:]}")
        if not got.warm:
            colds.extend(e.message for e in client.get_job_events(job) if e.reason == "ColdStart")
        client.delete_job(job)
        return took, bool(got.warm)

    def run_torchrun() -> float:
        torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
        cmd = [torchrun or "torchrun", "--standalone", f"--nproc-per-node={world}",
               str(work / "run.py"), str(src_file), name]  # fmt: skip
        t = time.perf_counter()
        subprocess.run(cmd, cwd=work, check=True, capture_output=True, timeout=600)
        return time.perf_counter() - t

    first, first_warm = run_ours()  # the pool has not learned what the function imports yet
    learned = _wait_learned(client, "torch._dynamo")
    pss_after = _pss(client)
    run_ipp()  # the engines import what the function imports, once
    run_ours()
    rows = []
    for i in range(rounds):
        order = [run_ipp, run_ours, run_torchrun]
        order = order[i % 3 :] + order[: i % 3]
        got = {f.__name__: f() for f in order}
        ours, warm = got["run_ours"]
        rows.append((got["run_ipp"], ours, got["run_torchrun"], warm, os.getloadavg()[0]))
    ipp = _median([r[0] for r in rows])
    ours = _median([r[1] for r in rows])
    tr = _median([r[2] for r in rows])
    r_ipp = sorted(r[1] / r[0] for r in rows)
    r_tr = sorted(r[1] / r[2] for r in rows)
    loads = [r[4] for r in rows]
    print(
        f"\n{payload}: {nodes}x{procs} ({world} ranks), {rounds} interleaved rounds, "
        f"{os.cpu_count()} cores, load {min(loads):.1f}-{max(loads):.1f}; medians"
    )
    print(f"  ipyparallel, {world} persistent engines     {ipp:7.3f} s")
    print(f"  ours, warm re-run (fresh processes)      {ours:7.3f} s   all warm: "
          f"{all(r[3] for r in rows)}")  # fmt: skip
    print(f"  plain torchrun (cold)                    {tr:7.3f} s")
    print(f"  ratio ours / ipyparallel                 {_median(r_ipp):7.2f} "
          f"[{r_ipp[0]:.2f}-{r_ipp[-1]:.2f}]   goal <= 2")  # fmt: skip
    print(f"  ratio ours / torchrun                    {_median(r_tr):7.2f} "
          f"[{r_tr[0]:.2f}-{r_tr[-1]:.2f}]")  # fmt: skip
    print(f"  first warm run, before the pool learned  {first:7.3f} s (warm: {first_warm})")
    print(f"  pool learned torch._dynamo: {learned}; learned {len(_learned(client))} modules")
    print(f"  pool memory (PSS, with its spares): {pss_before} before, {pss_after} after")
    for why in sorted(set(colds)):
        print(f"  a warm run started cold: {why}")
    warm_pool.stop_all(state)


def main() -> None:
    """Run the benchmark and print its tables."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--payload", choices=("quickstart", "ddp_sgd", "all"), default="all")
    args = ap.parse_args()
    import ipyparallel as ipp

    payloads = ["quickstart", "ddp_sgd"] if args.payload == "all" else [args.payload]
    tmp = Path(tempfile.mkdtemp(prefix="kf-bench-real-"))
    os.chdir(tmp)
    cluster = ipp.Cluster(n=4, log_level=40)
    rc = cluster.start_and_connect_sync()
    try:
        rc.wait_for_engines(4, timeout=300)
        for e in [rc[i] for i in rc.ids[:4]]:
            e.apply_sync(lambda: bool(__import__("torch.distributed")))
        for payload in payloads:
            bench(payload, args.rounds, rc, tmp)
    finally:
        stop = getattr(cluster, "stop_cluster_sync", None)
        if stop:
            stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
