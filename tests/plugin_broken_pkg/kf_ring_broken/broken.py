"""A plugin whose module fails to import (a dependency that is not installed)."""

import kf_ring_missing_dependency  # noqa: F401

plugin = None
