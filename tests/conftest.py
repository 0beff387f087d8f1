"""Shared pytest configuration: the Kubernetes test harness plugin."""

pytest_plugins = ["tests.k8s_cluster.plugin"]
