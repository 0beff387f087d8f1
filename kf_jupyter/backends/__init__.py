"""Backends: one protocol (base.Backend), a local subprocess backend and a Kubernetes backend."""
