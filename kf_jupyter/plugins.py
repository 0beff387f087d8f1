"""Plugins: trainers, framework policies, runtimes and options that other packages register.

A separately installed package registers one object in the entry-point group
`kf_jupyter.plugins` (its `pyproject.toml`)::

    [project.entry-points."kf_jupyter.plugins"]
    ring = "kf_ring.plugin:plugin"

The object is a `Plugin` (or a function without arguments that returns one). It declares

- `trainers`: cell-magic name -> trainer class (a `BaseTrainer` subclass); `%%<name>` and
  `%<name> file.py` then run it like `%%torchtrain`, and `TrainerClient.train` takes it;
- `policies`: framework policies (`Policy` subclasses' instances) by their `name`, used by both
  backends: a trainer class whose `policy` names one gets its command and each node's
  environment (on Kubernetes, where the Trainer does not know the policy, the job's command sets
  that environment per node from the pod's `JOB_COMPLETION_INDEX`);
- `runtimes`: ClusterTrainingRuntime manifests (dicts, as `kubectl apply` takes them): the local
  backend offers them next to the default install's; on a cluster an admin installs them
  (`python -m kf_jupyter.plugins --manifests | kubectl apply -f -`);
- `options`: name -> option (a class or callable making `option(job_spec, trainer, backend)`
  callables), for `get_option(name)` and `%kf_plugins`.

Entry points are read once, on first use (the first `%load_ext kf_jupyter`, runtime list or
unknown policy), and each plugin module is imported then: keep it light (declarations only;
import frameworks in the training program). A plugin that fails to import (raising anything short
of `KeyboardInterrupt`: `SystemExit` from argparse at import included), returns the wrong thing,
or uses a name kf-jupyter, IPython (any magic the shell already has) or an earlier plugin already
has is not loaded at all: one warning paragraph names it and its package and says what to do,
and everything else works without it. No I/O here beyond reading the installed packages'
entry-point metadata.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("kf_jupyter.plugins")

#: The entry-point group a plugin package registers its `Plugin` under.
ENTRY_POINT_GROUP = "kf_jupyter.plugins"

#: The cell magics kf-jupyter itself defines (a plugin may not take these names).
BUILTIN_MAGICS = frozenset(
    {"torchtrain", "mpitrain", "jaxtrain", "xgboosttrain", "transformerstrain"}
)

_MAGIC_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Plugin:
    """What a plugin package adds (see the module docstring). Every part is optional."""

    trainers: Mapping[str, type] = field(default_factory=dict)
    policies: Sequence[Any] = ()
    runtimes: Sequence[Mapping[str, Any]] = ()
    options: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    #: One line for `%kf_plugins`.
    description: str = ""


@dataclass(frozen=True)
class LoadedPlugin:
    """A plugin that loaded: its entry point, package and what it adds."""

    name: str
    package: str
    version: str
    value: str
    plugin: Plugin
    runtime_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class PluginProblem:
    """A plugin that did not load, and the paragraph saying why and what to do."""

    name: str
    package: str
    message: str


@dataclass
class Registry:
    """Everything the loaded plugins add, by name, and the plugins that did not load."""

    plugins: list[LoadedPlugin] = field(default_factory=list)
    problems: list[PluginProblem] = field(default_factory=list)
    trainers: dict[str, type] = field(default_factory=dict)  # magic name -> class
    policies: dict[str, Any] = field(default_factory=dict)
    runtimes: list[Any] = field(default_factory=list)  # runtimes.Runtime
    options: dict[str, Callable[..., Any]] = field(default_factory=dict)
    #: Which plugin added each magic, policy, runtime and option.
    owner: dict[str, str] = field(default_factory=dict)

    def trainer_classes(self) -> list[type]:
        """The plugins' trainer classes (each once)."""
        return list(dict.fromkeys(self.trainers.values()))


class _Refused(Exception):
    """A plugin breaks a rule; the message is the reason (completed by `_problem`)."""


def _problem(name: str, package: str, value: str, reason: str, fix: str) -> PluginProblem:
    where = f"package {package}" if package else "an unknown package"
    uninstall = f"pip uninstall {package}" if package else "uninstall its package"
    return PluginProblem(
        name,
        package,
        f"kf-jupyter plugin {name!r} ({where}, entry point {ENTRY_POINT_GROUP}: {name} = "
        f"{value}) was not loaded: {reason}. {fix} Or remove it ({uninstall}); everything else "
        "in kf-jupyter works without it.",
    )


def _entry_points() -> list[Any]:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _package(ep: Any) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "", ""
    return str(dist.metadata["Name"] or ""), str(dist.version or "")


def _builtin_names() -> tuple[set[str], set[str], set[str]]:
    """(policy names, local runtime names, option names) kf-jupyter itself has."""
    from . import options as builtin_options
    from .backends.local.runtimes import builtin_local_runtimes
    from .policies import POLICIES

    return (
        set(POLICIES),
        {r.name for r in builtin_local_runtimes()},
        set(builtin_options.__all__),
    )


def _who(reg: Registry, key: str, default: str) -> str:
    owner = reg.owner.get(key)
    return f"plugin {owner!r}" if owner else default


def shell_magic_names() -> frozenset[str]:
    """The magic names a plugin may not take: IPython's own (`time`, `writefile`, `run`,
    `load_ext`, ...: every `Magics` class IPython ships) and every magic the running IPython
    shell already has (the kernel's, its aliases, other extensions'), except kf-jupyter's own
    and its plugins' (registered from kf_jupyter). Empty where IPython is not imported (a plain
    script registers no magic, and is not made to import IPython here)."""
    import sys

    names: set[str] = set()
    if "IPython" not in sys.modules:
        return frozenset()
    try:
        from IPython.core import magics as ipython_magics
        from IPython.core.magic import Magics
    except ImportError:
        return frozenset()
    for attr in dir(ipython_magics):
        cls = getattr(ipython_magics, attr, None)
        if isinstance(cls, type) and issubclass(cls, Magics):
            table = getattr(cls, "magics", None) or {}
            for kind in ("line", "cell"):
                names.update(table.get(kind) or {})
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    shell = get_ipython() if callable(get_ipython) else None
    manager = getattr(shell, "magics_manager", None)
    for kind in ("line", "cell"):
        for magic, fn in (getattr(manager, "magics", None) or {}).get(kind, {}).items():
            if not str(getattr(fn, "__module__", "") or "").startswith("kf_jupyter"):
                names.add(magic)
    return frozenset(names)


def _check(name: str, plugin: Any, reg: Registry) -> tuple[dict[str, Any], list[Any]]:
    """Check one plugin against the built-ins and the plugins before it; its policies and runtimes."""
    from .policies.base import Policy
    from .runtimes import Runtime
    from .trainers import BaseTrainer

    if not isinstance(plugin, Plugin):
        raise _Refused(
            f"it names a {type(plugin).__name__}, not a kf_jupyter.plugins.Plugin (or a function "
            "returning one)"
        )
    policies_builtin, runtimes_builtin, options_builtin = _builtin_names()
    policies: dict[str, Any] = {}
    for p in plugin.policies:
        if not isinstance(p, Policy):
            raise _Refused(f"its policy {p!r} is not an instance of kf_jupyter.policies.Policy")
        if p.name in policies_builtin or p.name in reg.policies or p.name in policies:
            by = _who(reg, f"policy:{p.name}", "kf-jupyter itself")
            raise _Refused(f"its framework policy {p.name!r} has the name of one {by} has")
        for env in p.reserved_env:
            if not _ENV_NAME.match(env):
                raise _Refused(f"policy {p.name!r} reserves {env!r}, not an environment name")
        policies[p.name] = p
    known_policies = policies_builtin | set(reg.policies) | set(policies)
    shell_magics = shell_magic_names() if plugin.trainers else frozenset()
    for magic, cls in plugin.trainers.items():
        if not (isinstance(cls, type) and issubclass(cls, BaseTrainer)):
            raise _Refused(f"its trainer {magic!r} is not a kf_jupyter BaseTrainer subclass")
        if not _MAGIC_NAME.match(str(magic)):
            raise _Refused(
                f"its magic name {magic!r} is not a lowercase identifier (like 'ringtrain')"
            )
        if magic in BUILTIN_MAGICS or magic.startswith("kf_"):
            raise _Refused(f"its magic %%{magic} has the name of a kf-jupyter magic")
        if magic in shell_magics:
            raise _Refused(
                f"its magic %%{magic} has the name of a magic IPython (or the running shell) "
                f"already has, %{magic}, which it would silently replace"
            )
        if magic in reg.trainers:
            raise _Refused(
                f"its magic %%{magic} is already registered by plugin "
                f"{reg.owner.get('magic:' + magic)!r}"
            )
        if cls.policy not in known_policies:
            raise _Refused(
                f"its trainer {cls.__name__} uses policy {cls.policy!r}, which neither kf-jupyter "
                "nor the plugin defines"
            )
        if not cls.supported_frameworks:
            raise _Refused(f"its trainer {cls.__name__} declares no supported_frameworks")
    runtimes: list[Any] = []
    for manifest in plugin.runtimes:
        try:
            rt = Runtime.from_manifest(manifest)
        except (AttributeError, TypeError, ValueError) as exc:
            raise _Refused(f"a runtime manifest does not parse ({exc})") from None
        if manifest.get("kind") != "ClusterTrainingRuntime" or not rt.name:
            raise _Refused("each runtime must be a named ClusterTrainingRuntime manifest")
        taken = {r.name for r in reg.runtimes} | {r.name for r in runtimes}
        if rt.name in runtimes_builtin or rt.name in taken:
            by = _who(reg, f"runtime:{rt.name}", "kf-jupyter's default runtimes")
            raise _Refused(f"its runtime {rt.name!r} has the name of one in {by}")
        runtimes.append(rt)
    for opt in plugin.options:
        if opt in options_builtin or opt in reg.options:
            by = _who(reg, f"option:{opt}", "kf-jupyter itself")
            raise _Refused(f"its option {opt!r} has the name of one {by} has")
        if not callable(plugin.options[opt]):
            raise _Refused(f"its option {opt!r} is not callable")
    return policies, runtimes


def _load(ep: Any, reg: Registry) -> None:
    package, version = _package(ep)
    fix = "Update the plugin package to a version that works with this kf-jupyter."
    try:
        obj = ep.load()
        plugin = obj() if callable(obj) and not isinstance(obj, Plugin) else obj
        policies, runtimes = _check(ep.name, plugin, reg)
    except _Refused as exc:
        if "name of" in str(exc) or "already registered" in str(exc):
            fix = "Names must be unique: ask the plugin's authors to rename it."
        reg.problems.append(_problem(ep.name, package, ep.value, str(exc), fix))
        return
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a broken plugin must never break kf-jupyter (SystemExit too)
        last = (str(exc).strip().splitlines() or [""])[-1][:300]
        reason = f"importing or calling it raised {type(exc).__name__}" + (
            f": {last}" if last else ""
        )
        if not isinstance(exc, Exception):
            reason += (
                " (a plugin module must not exit or parse sys.argv when it is imported: "
                "argparse does that, and exits, at import time)"
            )
        reg.problems.append(_problem(ep.name, package, ep.value, reason, fix))
        return
    from .backends.local.runtimes import plugin_local_copy

    local = [plugin_local_copy(rt, ep.name) for rt in runtimes]
    reg.plugins.append(
        LoadedPlugin(ep.name, package, version, ep.value, plugin, tuple(r.name for r in local))
    )
    for magic, cls in plugin.trainers.items():
        reg.trainers[magic] = cls
        reg.owner["magic:" + magic] = ep.name
    for pname, policy in policies.items():
        reg.policies[pname] = policy
        reg.owner["policy:" + pname] = ep.name
    for rt in local:
        reg.runtimes.append(rt)
        reg.owner["runtime:" + rt.name] = ep.name
    for oname, opt in plugin.options.items():
        reg.options[oname] = opt
        reg.owner["option:" + oname] = ep.name


@functools.cache
def registry() -> Registry:
    """The plugins, loaded once per process (warnings for those that did not load)."""
    reg = Registry()
    try:
        eps = _entry_points()
    except Exception as exc:  # unreadable package metadata: no plugins, say so
        reg.problems.append(
            PluginProblem("", "", f"kf-jupyter could not read installed plugins: {exc}.")
        )
        eps = []
    for ep in eps:
        _load(ep, reg)
    for problem in reg.problems:
        log.warning("%s", problem.message)
    return reg


def reload() -> Registry:
    """Read the entry points again (after installing or removing a plugin in a running kernel)."""
    registry.cache_clear()
    return registry()


def get_policy(name: str) -> Any | None:
    """A plugin's framework policy by name, or None."""
    return registry().policies.get(name)


def get_option(name: str) -> Callable[..., Any]:
    """A plugin's option by name (OptionError lists the names when there is none)."""
    from .errors import OptionError

    reg = registry()
    if name not in reg.options:
        have = ", ".join(sorted(reg.options)) or "none"
        raise OptionError(
            f"No plugin option named {name!r}. Options from installed plugins: {have}. "
            "%kf_plugins lists the plugins and what each adds."
        )
    return reg.options[name]


def trainer_for_magic(magic: str) -> type | None:
    """The trainer class a plugin registered for `%%<magic>`, or None."""
    return registry().trainers.get(magic)


def plugin_rows() -> list[list[str]]:
    """Rows for `%kf_plugins`: name, package, what it adds, status."""
    reg = registry()
    rows = []
    for p in reg.plugins:
        adds = [f"%%{m} ({c.__name__})" for m, c in p.plugin.trainers.items()]
        adds += [f"policy {x.name}" for x in p.plugin.policies]
        adds += [f"runtime {r}" for r in p.runtime_names]
        adds += [f"option {o}" for o in p.plugin.options]
        pkg = f"{p.package} {p.version}".strip()
        rows.append([p.name, pkg, ", ".join(adds) or "-", "loaded"])
    for prob in reg.problems:
        rows.append([prob.name or "?", prob.package or "-", "-", "NOT loaded (see warning)"])
    return rows


def runtime_manifests() -> list[dict[str, Any]]:
    """The loaded plugins' ClusterTrainingRuntime manifests (for an admin to apply)."""
    return [dict(m) for p in registry().plugins for m in p.plugin.runtimes]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kf_jupyter.plugins [--manifests]`: list plugins, or print runtime manifests."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    reg = registry()
    if args == ["--manifests"]:
        import yaml

        print(yaml.safe_dump_all(runtime_manifests(), sort_keys=False), end="")
        return 0
    if args:
        print("usage: python -m kf_jupyter.plugins [--manifests]", file=sys.stderr)
        return 2
    for row in plugin_rows():
        print("  ".join(row))
    for prob in reg.problems:
        print("\n" + prob.message, file=sys.stderr)
    if not reg.plugins and not reg.problems:
        print(f"No kf-jupyter plugins installed (entry-point group {ENTRY_POINT_GROUP}).")
    return 1 if reg.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "BUILTIN_MAGICS",
    "ENTRY_POINT_GROUP",
    "LoadedPlugin",
    "Plugin",
    "PluginProblem",
    "Registry",
    "get_option",
    "get_policy",
    "main",
    "plugin_rows",
    "registry",
    "reload",
    "runtime_manifests",
    "shell_magic_names",
    "trainer_for_magic",
]
