"""Kubernetes backend vs the Kubeflow SDK 0.5.0, side by side on one real kube-apiserver.

1. list_jobs with N TrainJobs (default 500) and 2 pods each: median wall time of ours and of the
   SDK's, and the requests each sends (target: ours >= 10x faster).
2. wait_for_job_status on a job the benchmark completes (by patching its status) after S seconds
   (default 60): requests sent by ours and, at the same time, by the SDK's (target: ours <= 3).

Run: .venv/bin/python bench/bench_k8s.py [--jobs 500] [--wait-seconds 60] [--repeat 5]
Needs the test harness's API server (tests/k8s_cluster: kube-apiserver v1.20.2 + etcd).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.k8s_cluster import crds
from tests.k8s_cluster.apiserver import ApiServer

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
NS = "bench"


class Counter:
    """Counts HTTP requests sent through an ApiClient's REST client."""

    def __init__(self, api_client: Any) -> None:
        self.n = 0
        self._lock = threading.Lock()
        rest = api_client.rest_client
        original = rest.request

        def request(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.n += 1
            return original(*args, **kwargs)

        rest.request = request


def trainjob(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"kf-jupyter.io/created-by": "kf-jupyter"}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "suspend": True,
            "trainer": {"numNodes": 2, "command": ["true"]},
        },
    }


def pod(job: str, index: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{job}-node-0-{index}",
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": job,
                "jobset.sigs.k8s.io/replicatedjob-name": "node",
                "jobset.sigs.k8s.io/job-index": "0",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
        },
        "spec": {"containers": [{"name": "node", "image": "none"}], "nodeName": "nowhere"},
    }


def populate(api: Any, n: int) -> float:
    from kubernetes import client

    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    t0 = time.monotonic()

    def one(i: int) -> None:
        name = f"job-{i:04d}"
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "trainjobs", trainjob(name))
        for k in range(2):
            core.create_namespaced_pod(NS, pod(name, k))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(n)))
    return time.monotonic() - t0


def timed(fn: Any, repeat: int) -> tuple[float, list[float], Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=500)
    ap.add_argument("--wait-seconds", type=float, default=60.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sdk-repeat", type=int, default=3)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("kubeflow").setLevel(logging.ERROR)  # its missing-ConfigMap warning

    from kubernetes import client

    from kf_jupyter.backends.kubernetes.backend import KubernetesBackend
    from kf_jupyter.backends.kubernetes.config import KubernetesBackendConfig

    server = ApiServer("bench").start()
    try:
        api = server.api_client()
        crds.install(api)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
        print(f"kube-apiserver v1.20.2 up in {server.start_seconds:.1f} s at {server.url}")
        secs = populate(api, args.jobs)
        print(f"created {args.jobs} TrainJobs and {2 * args.jobs} pods in {secs:.1f} s")

        from kubeflow.trainer import KubernetesBackendConfig as SDKConfig
        from kubeflow.trainer import TrainerClient as SDKClient

        cfg = KubernetesBackendConfig(namespace=NS, config_file=server.kubeconfig_path)
        ours = KubernetesBackend(cfg)
        sdk = SDKClient(SDKConfig(namespace=NS, config_file=server.kubeconfig_path))
        ours_count = Counter(ours.api_client)
        sdk_count = Counter(sdk.backend.custom_api.api_client)

        # --- list_jobs, side by side (alternating, so both see the same server state) ---
        ours.list_jobs()  # warm: connection pool and runtime cache, as in a session
        sdk.list_jobs()
        ours_t, sdk_t = [], []
        ours_req = sdk_req = 0
        for i in range(max(args.repeat, args.sdk_repeat)):
            if i < args.repeat:
                before = ours_count.n
                t, _, jobs = timed(ours.list_jobs, 1)
                ours_t.append(t)
                ours_req = ours_count.n - before
                assert len(jobs) == args.jobs and all(len(j.steps) == 2 for j in jobs)
            if i < args.sdk_repeat:
                before = sdk_count.n
                t, _, sjobs = timed(sdk.list_jobs, 1)
                sdk_t.append(t)
                sdk_req = sdk_count.n - before
                assert len(sjobs) == args.jobs
        mo, ms = statistics.median(ours_t), statistics.median(sdk_t)
        print(f"\nlist_jobs with {args.jobs} TrainJobs / {2 * args.jobs} pods:")
        print(f"  kf-jupyter       median {mo * 1000:8.1f} ms  ({ours_req} requests per call)")
        print(f"  kubeflow SDK 0.5 median {ms * 1000:8.1f} ms  ({sdk_req} requests per call)")
        print(f"  speed-up: {ms / mo:.1f}x  (target >= 10x)")

        # --- wait_for_job_status over a job that completes after N seconds ---
        name = "waited"
        custom = client.CustomObjectsApi(api)
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, "trainjobs", trainjob(name))

        def complete_later() -> None:
            time.sleep(args.wait_seconds)
            cond = {
                "type": "Complete",
                "status": "True",
                "reason": "AllJobsCompleted",
                "message": "completed by the benchmark",
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, NS, "trainjobs", name, {"status": {"conditions": [cond]}}
            )

        timeout = args.wait_seconds + 60
        results: dict[str, Any] = {}

        def sdk_wait() -> None:
            before = sdk_count.n
            t0 = time.monotonic()
            job = sdk.wait_for_job_status(name, timeout=int(timeout))
            results["sdk"] = (sdk_count.n - before, time.monotonic() - t0, job.status)

        before = ours_count.n
        patcher = threading.Thread(target=complete_later)
        sdk_thread = threading.Thread(target=sdk_wait)
        patcher.start()
        sdk_thread.start()
        t0 = time.monotonic()
        job = ours.wait_for_job_status(name, timeout=timeout)
        ours_wait = (ours_count.n - before, time.monotonic() - t0, job.status)
        patcher.join()
        sdk_thread.join()
        print(f"\nwait_for_job_status on a job that completes after {args.wait_seconds:g} s:")
        n, secs, status = ours_wait
        print(f"  kf-jupyter       {n:4d} requests, returned {status} after {secs:.1f} s")
        n2, secs2, status2 = results["sdk"]
        print(f"  kubeflow SDK 0.5 {n2:4d} requests, returned {status2} after {secs2:.1f} s")
        print("  target: kf-jupyter <= 3 requests")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
