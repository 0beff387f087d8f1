"""Nothing lost: 4 ranks × 100,000 lines, each on disk and yielded exactly once, in order per rank."""

from __future__ import annotations

import pytest

from kf_jupyter import JAXTrainer

from .test_local_support import assert_no_orphans, client_fixture  # noqa: F401

N = 100_000


def many_lines(n):
    import os
    import sys

    rank = os.environ["JAX_PROCESS_ID"]
    write = sys.stdout.write
    for i in range(n):
        write(f"r{rank} {i:06d} " + "x" * (i % 50) + "\n")
    sys.stdout.flush()


def check_rank(lines: list[str], rank: int) -> None:
    body = [ln for ln in lines if not ln.startswith("##kf-jupyter:")]
    assert len(body) == N
    for i, line in enumerate(body):
        assert line == f"r{rank} {i:06d} " + "x" * (i % 50), (rank, i, line)


@pytest.mark.slow
def test_four_ranks_100k_lines_followed_exactly_once(client):
    trainer = JAXTrainer(
        func=many_lines, func_args={"n": N}, num_nodes=4, initialize_distributed=False
    )
    name = client.train(trainer)
    per_rank: dict[str, list[str]] = {}
    for rec in client.backend.iter_log_records(name, follow=True):
        per_rank.setdefault(rec.source, []).append(rec.line)
    assert client.get_job(name).status == "Complete"
    for r in range(4):
        check_rank(per_rank[f"rank-{r}"], r)
    # Every line is on disk, and follow=False reads the same.
    jd = client.backend.jobs_dir / name
    for r in range(4):
        disk = (jd / "logs" / f"rank-{r}.log").read_text().splitlines()
        assert disk == per_rank[f"rank-{r}"]
    again = list(client.get_job_logs(name, step="rank-2"))
    check_rank(again, 2)
    assert_no_orphans(name)
