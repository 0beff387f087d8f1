"""A real Kubernetes API server, the Trainer CRDs and a small controller/kubelet stand-in for tests.

Use as a pytest plugin (``tests/conftest.py``: ``pytest_plugins = ["tests.k8s_cluster.plugin"]``).
"""

from __future__ import annotations


class HarnessUnavailable(RuntimeError):
    """Something the harness needs (binary, etcd, manifests) is not on this machine."""
