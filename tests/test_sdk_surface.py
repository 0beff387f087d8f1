"""Every public module path and name of `kubeflow.trainer` 0.5.0 exists under `kf_jupyter.sdk`.

The test walks the installed SDK's module tree (every module but its tests), collects each
module's public names (no leading underscore; classes and functions of the SDK, and
UPPER_CASE constants) and checks that `kf_jupyter.sdk.<same path>` has each, with the same
signature: the same parameter names in the same order, the same defaults, every positional
parameter of the SDK's positional here too (kf-jupyter may add parameters after them, with
defaults). Constants of the API (names, labels, paths, commands) have the same values.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import pkgutil
import subprocess
import sys
import types as pytypes
from typing import Any

import pytest

kt = pytest.importorskip("kubeflow.trainer", reason="the Kubeflow SDK is not installed")
ko = pytest.importorskip("kubeflow.optimizer", reason="the Kubeflow SDK is not installed")

SDK = "kubeflow.trainer"
OURS = "kf_jupyter.sdk"
#: The SDK's optimizer (issue 25) is mirrored under kf_jupyter.sdk.optimizer.
OPT = "kubeflow.optimizer"
OURS_OPT = "kf_jupyter.sdk.optimizer"

#: Constants whose value is a shell template of the SDK's own local venv runner, which
#: kf-jupyter does not use (its own equivalents, same placeholders); or a path of the SDK's
#: package. Only presence and type are compared for these.
OWN_VALUES = {
    "kubeflow.trainer.backends.localprocess.constants": {
        "DEPENDENCIES_SCRIPT",
        "LOCAL_EXEC_ENTRYPOINT",
        "LOCAL_EXEC_JOB_CLEANUP_SCRIPT",
        "LOCAL_EXEC_JOB_TEMPLATE",
    },
    "kubeflow.trainer.backends.container.runtime_loader": {"TRAINING_RUNTIMES_DIR"},
}


def sdk_modules(pkg: pytypes.ModuleType = kt, SDK: str = SDK) -> list[str]:
    names = [SDK]
    root = pkg.__path__[0]
    for info in pkgutil.walk_packages(pkg.__path__, SDK + "."):
        names.append(info.name)
    # folders without __init__.py (namespace packages: backends.container) are not walked
    import pathlib

    for path in pathlib.Path(root).rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        names.append(".".join([SDK, *parts]) if parts else SDK)
        for i in range(1, len(parts)):
            names.append(".".join([SDK, *parts[:i]]))
    return sorted(
        {
            n
            for n in names
            if not n.endswith("_test")
            and ".test" not in n
            and not any(p.startswith("_") for p in n.split("."))
        }
    )


MODULES = sdk_modules() + sdk_modules(ko, OPT)


def public_names(mod: pytypes.ModuleType) -> dict[str, Any]:
    out = {}
    for key, value in vars(mod).items():
        if key.startswith("_") or isinstance(value, pytypes.ModuleType):
            continue
        if inspect.isclass(value) or inspect.isfunction(value):
            if (getattr(value, "__module__", "") or "").startswith("kubeflow"):
                out[key] = value
        elif key.isupper():
            out[key] = value
    return out


def ours_path(name: str) -> str:
    if name == OPT or name.startswith(OPT + "."):
        return OURS_OPT + name[len(OPT) :]
    return OURS + name[len(SDK) :]


def test_the_walk_sees_the_whole_sdk() -> None:
    # the modules the issue names, including the namespace package backends.container
    for want in (
        "kubeflow.trainer.options.kubernetes",
        "kubeflow.trainer.options.localprocess",
        "kubeflow.trainer.backends.localprocess.backend",
        "kubeflow.trainer.backends.container.backend",
        "kubeflow.trainer.backends.container.adapters.docker",
        "kubeflow.trainer.constants.constants",
        "kubeflow.trainer.types.types",
        "kubeflow.trainer.api.trainer_client",
    ):
        assert want in MODULES
    assert len(MODULES) >= 30


@pytest.mark.parametrize("module", MODULES)
def test_every_module_path_imports(module: str) -> None:
    importlib.import_module(ours_path(module))


def _params(obj: Any) -> list[inspect.Parameter]:
    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return []
    try:
        return list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return []


def _default(p: inspect.Parameter) -> Any:
    d = p.default
    if d is dataclasses.MISSING:
        return inspect.Parameter.empty
    if isinstance(d, set | frozenset):
        return ("set", frozenset(d))
    if isinstance(d, enum.Enum):  # the SDK's enum and ours: the same name and value
        return ("enum", type(d).__name__, d.name, d.value)
    if repr(d) == "<factory>" or (isinstance(d, list | dict) and not d):
        return "<factory or empty>"  # a default factory and a literal empty list mean the same
    return d


def signature_problems(theirs: Any, ours: Any) -> list[str]:
    tp, op = _params(theirs), _params(ours)
    problems = []
    names = [p.name for p in op]
    for i, p in enumerate(tp):
        if p.name not in names:
            problems.append(f"missing parameter {p.name!r}")
            continue
        q = op[names.index(p.name)]
        positional = (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        if p.kind in positional and (q.kind not in positional or names.index(p.name) != i):
            problems.append(f"parameter {p.name!r} is not positional at {i}")
        if p.kind == p.VAR_KEYWORD and q.kind != q.VAR_KEYWORD:
            problems.append(f"**{p.name} missing")
        if _default(p) != _default(q):
            problems.append(f"default of {p.name!r}: {p.default!r} vs {q.default!r}")
    for q in op:
        if q.name not in {p.name for p in tp} and q.default is inspect.Parameter.empty:
            if q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD):
                problems.append(f"extra required parameter {q.name!r}")
    return problems


def _members(cls: type) -> dict[str, Any]:
    out = {}
    for key, value in vars(cls).items():
        if key.startswith("_") or key in ("Config", "model_config"):
            continue
        if callable(value) or isinstance(value, property):
            out[key] = value
    return out


@pytest.mark.parametrize("module", MODULES)
def test_every_public_name_with_its_signature(module: str) -> None:
    theirs_mod = importlib.import_module(module)
    ours_mod = importlib.import_module(ours_path(module))
    problems = []
    for key, theirs in public_names(theirs_mod).items():
        if not hasattr(ours_mod, key):
            problems.append(f"{key}: missing")
            continue
        ours = getattr(ours_mod, key)
        if inspect.isclass(theirs) or inspect.isfunction(theirs):
            if inspect.isclass(theirs) != inspect.isclass(ours):
                problems.append(f"{key}: a class there, not here (or the reverse)")
                continue
            problems += [f"{key}: {p}" for p in signature_problems(theirs, ours)]
            if inspect.isclass(theirs):
                if issubclass(theirs, enum.Enum):
                    if {m.name: m.value for m in theirs} != {m.name: m.value for m in ours}:
                        problems.append(f"{key}: enum members differ")
                for name, member in _members(theirs).items():
                    mine = getattr(ours, name, None)
                    if mine is None:
                        problems.append(f"{key}.{name}: missing")
                    elif not isinstance(member, property):
                        problems += [f"{key}.{name}: {p}" for p in signature_problems(member, mine)]
                for base in theirs.__mro__[1:]:
                    if base.__module__.startswith("kubeflow") and not any(
                        b.__name__ == base.__name__ for b in ours.__mro__[1:]
                    ):
                        problems.append(f"{key}: not a {base.__name__}")
        else:
            mine = getattr(ours_mod, key)
            if key in OWN_VALUES.get(module, ()):
                if type(mine) is not type(theirs):
                    problems.append(f"{key}: a {type(mine).__name__}, not {type(theirs)}")
            elif hasattr(theirs, "pattern"):
                if getattr(mine, "pattern", None) != theirs.pattern:
                    problems.append(f"{key}: pattern {mine!r} != {theirs!r}")
            elif isinstance(theirs, dict) and all(inspect.isclass(v) for v in theirs.values()):
                # a registry of the SDK's classes (ALGORITHM_REGISTRY): ours, by the same names
                names = {k: getattr(v, "__name__", v) for k, v in dict(mine).items()}
                if names != {k: v.__name__ for k, v in theirs.items()}:
                    problems.append(f"{key}: {mine!r} != {theirs!r}")
            elif mine != theirs:
                problems.append(f"{key}: {mine!r} != {theirs!r}")
    assert not problems, f"{ours_path(module)}:\n" + "\n".join(problems)


def test_the_top_level_all_is_a_superset() -> None:
    import kf_jupyter.sdk as sdk

    assert set(kt.__all__) <= set(sdk.__all__)
    import kf_jupyter.sdk.optimizer as opt

    assert set(ko.__all__) <= set(opt.__all__)


def test_nothing_fails_at_import_in_a_fresh_interpreter() -> None:
    """Every module imports on its own, in any order, without the SDK or a cluster."""
    code = (
        "import importlib, sys\n"
        "sys.modules['kubeflow'] = None\n"  # the real SDK must not be needed
        f"for m in {[ours_path(m) for m in MODULES]!r}:\n"
        "    importlib.import_module(m)\n"
        "heavy = [m for m in ('kubernetes', 'torch', 'ipywidgets') if m in sys.modules]\n"
        "print('heavy:', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "heavy: []" in out.stdout
