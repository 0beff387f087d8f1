"""TEST STAND-IN: a rank sees the Python packages of its pod's image, not the test venv's extras.

The stand-in runs every rank with this machine's test venv, which has packages the runtime's
image lacks: the default torch runtimes' image (``pytorch/pytorch:<version>-cuda...-runtime``:
conda's Python with torch and its dependencies) has no ``transformers``, ``accelerate`` or
``peft``. So for a pod whose image is a ``pytorch/pytorch`` one, a ``sitecustomize`` on the
rank's ``PYTHONPATH`` hides those modules (``ModuleNotFoundError``, as on a cluster) unless the
pod installed them: a ``python3 -m pip install NAME...`` run inside the pod (the job's package
install) records the names it was asked for, and pip itself finds them satisfied from the venv.
Other images are not restricted (the harness runs no job that needs what they lack).
"""

from __future__ import annotations

from pathlib import Path

#: top-level modules the image lacks that the test venv has, by image repository
IMAGE_LACKS: dict[str, tuple[str, ...]] = {
    "pytorch/pytorch": ("transformers", "accelerate", "peft"),
}

_SITECUSTOMIZE = '''\
"""Stand-in (tests/k8s_cluster/image_packages.py): the pod image's packages only."""
import os
import re
import sys


def _kfj_standin_image_lacks():
    lacks = set(filter(None, os.environ.get("STANDIN_IMAGE_LACKS", "").split(",")))
    record = os.environ.get("STANDIN_POD_INSTALLED", "")
    if not lacks or not record:
        return
    argv = list(getattr(sys, "orig_argv", []) or [])
    if "-m" in argv:
        i = argv.index("-m")
        if argv[i + 1 : i + 3] == ["pip", "install"]:
            with open(record, "a", encoding="utf-8") as f:
                for arg in argv[i + 3 :]:
                    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", arg)
                    if m and not arg.startswith("-"):
                        f.write(re.sub(r"[-.]+", "_", m.group(0)).lower() + "\\n")
            return
    try:
        with open(record, encoding="utf-8") as f:
            installed = set(f.read().split())
    except OSError:
        installed = set()
    hidden = lacks - installed
    if not hidden:
        return
    import importlib.abc

    finders = list(sys.meta_path)

    class ImageLacks(importlib.abc.MetaPathFinder):
        """The interpreter's finders, blind to what the image lacks: an import of it fails
        and importlib.util.find_spec returns None, as where it is not installed."""

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in hidden:
                return None
            for finder in finders:
                find = getattr(finder, "find_spec", None)
                spec = find(name, path, target) if find is not None else None
                if spec is not None:
                    return spec
            return None

        def find_distributions(self, context=None):
            import importlib.metadata

            context = context or importlib.metadata.DistributionFinder.Context()
            name = getattr(context, "name", None)
            if name and re.sub(r"[-.]+", "_", name).lower() in hidden:
                return
            for finder in finders:
                find = getattr(finder, "find_distributions", None)
                for dist in find(context) if find is not None else ():
                    if name or re.sub(r"[-.]+", "_", dist.name or "").lower() not in hidden:
                        yield dist

        def invalidate_caches(self):
            for finder in finders:
                if hasattr(finder, "invalidate_caches"):
                    finder.invalidate_caches()

    sys.meta_path[:] = [ImageLacks()]


_kfj_standin_image_lacks()
'''


def lacks(image: str) -> tuple[str, ...]:
    """The modules an image lacks (empty: not restricted)."""
    repo = image.split("@", 1)[0].rsplit(":", 1)[0]
    return IMAGE_LACKS.get(repo, ())


def env(image: str, site_dir: Path, pod_dir: Path, pythonpath: str) -> dict[str, str]:
    """The env that restricts a rank of a pod with `image` (empty when not restricted)."""
    hidden = lacks(image)
    if not hidden:
        return {}
    site_dir.mkdir(parents=True, exist_ok=True)
    path = site_dir / "sitecustomize.py"
    if not path.exists():
        path.write_text(_SITECUSTOMIZE)
    return {
        "PYTHONPATH": f"{site_dir}:{pythonpath}" if pythonpath else str(site_dir),
        "STANDIN_IMAGE_LACKS": ",".join(hidden),
        "STANDIN_POD_INSTALLED": str(pod_dir / "pip-installed"),
    }
