"""Progress from log markers for the jobs route (clusters without trainerStatus): the parser, the
TTL cache, and that a failed log read is no progress, never an error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from kf_jupyter.server.progress import ProgressCache, status_from_lines
from kf_jupyter.server.state import KFJupyterServer
from kf_jupyter.types import TrainerStatus, TrainJob


def test_the_last_report_marker_gives_the_progress() -> None:
    lines = [
        '##kf-jupyter:report {"step": 1, "progress": 0.25, "metrics": {"loss": 1.5}}',
        "[node-0] some output",
        '[node-0] ##kf-jupyter:report {"step": 2, "progress": 1.7, "metrics": {"loss": 0.5}}',
        "##kf-jupyter:report {not json",
    ]
    status = status_from_lines(lines)
    assert status == TrainerStatus(progress_percentage=100, metrics={"loss": "0.5", "step": "2"})
    assert status_from_lines(["no markers here"]) is None


def test_the_cache_reads_a_job_once_per_ttl() -> None:
    cache, job = ProgressCache(), TrainJob("a", "Running", "kubernetes", namespace="ns")
    assert cache.claim([job], 100.0, 10.0) == [job]
    assert cache.claim([job], 101.0, 10.0) == []  # claimed: a concurrent request does not read
    cache.put(job, 101.0, TrainerStatus(progress_percentage=5))
    assert cache.claim([job], 110.0, 10.0) == []
    assert cache.claim([job], 111.0, 10.0) == [job]
    assert cache.get(job) == TrainerStatus(progress_percentage=5)  # kept until the new read


class _Failing:
    calls = 0

    def iter_log_records(self, *args: Any, **kwargs: Any) -> Iterator[str]:
        self.calls += 1
        raise ConnectionError("the kubelet is gone")


def test_a_failed_log_read_is_no_progress() -> None:
    kf, client = KFJupyterServer(), _Failing()
    jobs = [
        TrainJob("run", "Running", "kubernetes", namespace="ns"),
        TrainJob("done", "Complete", "kubernetes", namespace="ns"),
        TrainJob("has", "Running", "kubernetes", trainer_status=TrainerStatus(7)),
    ]
    try:
        for _ in range(2):
            asyncio.run(kf.fill_log_progress(client, jobs))  # type: ignore[arg-type]
    finally:
        kf.shutdown()
    assert [j.trainer_status for j in jobs] == [None, None, TrainerStatus(7)]
    assert client.calls == 1  # only the running job without trainerStatus, once per TTL
