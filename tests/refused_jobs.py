"""Jobs that will not start, as the Kubernetes tests make them and check what a user sees.

`create_raw_trainjob` submits a TrainJob the way kubectl (or an older kf-jupyter) does, past
our own checks; `assert_the_reason_shows_everywhere` checks that a waiting job's reason is the
same wherever a user looks.
"""

from __future__ import annotations

from typing import Any

import pytest

from kf_jupyter.constants import GROUP, VERSION


def create_raw_trainjob(api_client: Any, namespace: str, name: str) -> dict[str, Any]:
    """Create a two-node torch-distributed TrainJob `name` running `true` straight through the
    API (no kf-jupyter check on the way); returns the object the API server created."""
    from kubernetes import client

    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "command": ["true"]},
        },
    }
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "trainjobs", job
    )


def assert_the_reason_shows_everywhere(backend: Any, job: Any, *also_in_header: str) -> None:
    """`job.reason` (why a job waits) is the reason `backend.list_jobs()` gives and %kf_jobs'
    row shows, it stands in the widget monitor's header (with each of `also_in_header`), and in
    the job JSON the lab's job panel reads. Without ipywidgets the test is skipped at the
    monitor."""
    from kf_jupyter.magics.render import job_rows

    [listed] = backend.list_jobs()
    assert listed.reason == job.reason
    assert job.reason in " ".join(job_rows([listed])[0])
    pytest.importorskip("ipywidgets")
    from kf_jupyter.widgets.monitor import JobMonitor

    class Client:  # the monitor reads the job through get_job, as with the real client
        backend_name = "kubernetes"

        def get_job(self, job_name: str) -> Any:
            return backend.get_job(job_name)

    monitor = JobMonitor(Client(), job.name, records=[], poll_status=False)
    monitor._apply_job(job)
    for text in (job.reason, *also_in_header):
        assert text in monitor._header_html(), text
    assert job.to_dict()["reason"] == job.reason  # the lab's job panel
