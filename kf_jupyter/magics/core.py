"""`KubeflowMagics`: the training cell magics and the kf_* line magics.

Loaded by `%load_ext kf_jupyter`; it imports only IPython, traitlets and the light core. The
backends, ipywidgets, yaml and the kubernetes client load when a magic first needs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

from IPython.core import magic_arguments as ma
from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.utils.process import arg_split
from traitlets import Any as AnyTrait
from traitlets import Bool, CaselessStrEnum, Float, Int, Unicode

from .. import plugins
from ..config import RuntimeConfig, SecretRef, mask_secrets
from ..errors import (
    ClusterUnreachableError,
    JobFailedError,
    KFJupyterError,
    ValidationError,
)
from ..trainers import TRAINER_CLASSES, BaseTrainer
from ..types import COMPLETE, FAILED
from .cell import build_cell_function, oversize_message, oversized_training_cell
from .handle import JobHandle
from .lineargs import print_help, split_script_args, wants_help

#: Rows %kf_jobs shows unless --all (a table of thousands helps no one, and costs the notebook).
JOBS_SHOWN = 100


def failure_error_text(name: str, failure: Any) -> str:
    """The cell's error for a failed job: the root cause first, then where the full log is."""
    from ..failure import failure_text

    return (
        f"Job {name} failed. {failure_text(failure)}\n"
        f"Full logs: %kf_logs {name}; delete it with %kf_delete {name}."
    )


class KFMagicError(Exception):
    """A kf-jupyter error shown as one paragraph (no traceback); the cell ends in error."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mkf-jupyter:\x1b[0m {self}"]


#: How long the prestart waits for one pool to import before it starts the next.
PRESTART_WAIT_SECONDS = 300.0


def _wait_for_pool(pool: Any, timeout: float = PRESTART_WAIT_SECONDS) -> bool:
    """Wait until a pool that was started listens (True), or has died or timed out (False)."""
    from ..backends.local.warm import pool as warm_pool

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        meta = warm_pool._read_meta(pool.meta)
        if meta is None:
            return False  # stopped, or it failed and removed its record
        if meta.get("state") == "ready" and pool.socket.exists():
            return True
        pid = int(meta.get("pid") or 0)
        if pid and not warm_pool._alive(pid):
            return False
        time.sleep(0.1)
    return False


def _parse_args(magic: Any, line: str) -> Any:
    """Parse a magic line; an unbalanced quote is a UsageError like any other bad flag.

    `-h` / `--help` prints the magic's usage and gives None (the caller then does nothing).
    """
    if wants_help(line):
        print_help(magic)
        return None
    try:
        # Split as a shell does (quotes removed), not IPython's default that keeps them: with it
        # --resources 'cpu=2,memory=4Gi' read as the resource "'cpu".
        return magic.parser.parse_args(arg_split(line, posix=True))
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(
            f"Cannot read the flags ({exc}): close the quotation mark, or escape a lone quote "
            "or backslash with a backslash, for example --env NOTE=it\\'s."
        ) from None


def _fail(message: str) -> KFMagicError:
    return KFMagicError(mask_secrets(message))


def _refuse_oversized_training_cell(lines: list[str]) -> list[str]:
    """IPython input transformer: a training cell too large to submit is refused at once."""
    size = oversized_training_cell(lines)
    if size is not None:
        raise _fail(oversize_message(size))
    return lines


def _install_size_check(shell: Any) -> None:
    """Put the size check first among the shell's clean-up transformers (once)."""
    cleanup = getattr(shell, "input_transformers_cleanup", None)
    if isinstance(cleanup, list) and _refuse_oversized_training_cell not in cleanup:
        cleanup.insert(0, _refuse_oversized_training_cell)


def _training_args(framework: str) -> Any:
    """The flags of one training cell magic (shared, with -p / --max-restarts where they apply)."""
    decorators = [
        ma.magic_arguments(),
        ma.argument("-n", "--num-nodes", type=int, default=None, help="number of nodes"),
    ]
    if framework in ("torch", "mpi"):
        decorators.append(
            ma.argument(
                "-p", "--num-proc-per-node", type=int, default=None, help="processes per node"
            )
        )
    if framework in ("jax", "xgboost"):
        decorators.append(
            ma.argument(
                "--no-setup",
                action="store_true",
                help="the code does its own "
                + ("jax.distributed.initialize" if framework == "jax" else "tracker/communicator"),
            )
        )
    decorators += [
        ma.argument("script", nargs="?", default=None, help="line form: a Python file to run"),
        ma.argument("--backend", choices=("local", "kubernetes"), default=None),
        ma.argument("--namespace", default=None, help="Kubernetes namespace"),
        ma.argument("--runtime", default=None, help="training runtime name"),
        ma.argument("--name", default=None, help="job name (RFC 1035 label)"),
        ma.argument("--image", default=None, help="trainer container image"),
        ma.argument("--packages", default=None, help="pip packages, comma separated"),
        ma.argument("--pip-index-url", action="append", default=None, help="repeatable"),
        ma.argument("--env", action="append", default=None, help="K=V, repeatable"),
        ma.argument("--resources", default=None, help="per node, e.g. cpu=2,memory=4Gi,gpu=1"),
        ma.argument("--args", default=None, help="notebook variables passed, e.g. lr,epochs"),
        ma.argument("--config", default=None, help="variable: a RuntimeConfig or its form"),
        ma.argument("--options", default=None, help="variable: a list of options or the form"),
        ma.argument("--queue", default=None, help="Kueue LocalQueue (placement-only locally)"),
        ma.argument(
            "--pod-security",
            default=None,
            choices=["restricted"],
            help="make the pods pass a namespace's Pod Security level (placement-only locally)",
        ),
        ma.argument("--workspace", default=None, help="folder shipped (default: the cwd)"),
        ma.argument("--no-workspace", action="store_true", help="ship no folder"),
        ma.argument("--workspace-limit", default=None, help="e.g. 16MiB (default 4MiB)"),
    ]
    if framework == "torch":
        decorators.append(ma.argument("--max-restarts", type=int, default=None))
    decorators += [
        ma.argument(
            "--sweep",
            action="append",
            default=None,
            help="a swept parameter, repeatable: 'lr=loguniform(1e-4,1e-1)', 'b=choice(16,32)'",
        ),
        ma.argument("--trials", type=int, default=None, help="sweep: number of trials"),
        ma.argument("--parallel", type=int, default=None, help="sweep: trials at a time"),
        ma.argument("--objective", default=None, help="sweep: METRIC:min|max (loss:min)"),
        ma.argument("--algorithm", default=None, help="sweep: random (default) or grid"),
        ma.argument("--seed", type=int, default=None, help="sweep: random search seed"),
        ma.argument("--dry-run", action="store_true", help="show what would be submitted"),
        ma.argument("--no-wait", action="store_true", help="return at once"),
        ma.argument("-o", "--out", default=None, help="variable that receives the job handle"),
        ma.argument("--timeout", type=float, default=None, help="seconds to follow the job"),
        ma.argument("--cancel-on-interrupt", action="store_true", default=None),
        ma.argument(
            "--no-warm", action="store_true", help="local: start the ranks cold, not from the pool"
        ),
    ]

    def apply(func: Any) -> Any:
        for deco in reversed(decorators):
            func = deco(func)
        return func

    return apply


def _with_workspace(rc: RuntimeConfig | None, args: Any) -> RuntimeConfig | None:
    """The RuntimeConfig with --workspace / --no-workspace / --workspace-limit applied."""
    import dataclasses

    from ..workspace import Workspace, parse_size, resolve

    if args.no_workspace and (args.workspace or args.workspace_limit):
        raise ValidationError("--no-workspace cannot be combined with --workspace options.")
    if args.no_workspace:
        return dataclasses.replace(rc or RuntimeConfig(), workspace=False)
    if not (args.workspace or args.workspace_limit):
        return rc
    ws = resolve(rc.workspace if rc else None) or Workspace()
    if args.workspace:
        ws = dataclasses.replace(ws, path=os.path.expanduser(args.workspace))
    if args.workspace_limit:
        ws = dataclasses.replace(ws, max_bytes=parse_size(args.workspace_limit))
    return dataclasses.replace(rc or RuntimeConfig(), workspace=ws)


def _parse_kv(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValidationError(f"{what} {text!r} is not KEY=VALUE; write it like {what} NAME=value.")
    return key.strip(), value


def _resources(text: str | None) -> dict[str, str] | None:
    if not text:
        return None
    out = {}
    for part in text.split(","):
        if part.strip():
            k, v = _parse_kv(part.strip(), "--resources")
            out[k] = v.strip()
    return out


def _say_world(client: Any, trainer: BaseTrainer, runtime: Any) -> None:
    """At submit, say the job's world size and why when it is not nodes × processes (an MPI
    runtime that runs its launcher as a host: kf_jupyter/magics/world.py)."""
    from ..backends.base import resolve_runtime_arg
    from .world import world_notice

    try:
        notice = world_notice(trainer, resolve_runtime_arg(client.backend, trainer, runtime))
    except KFJupyterError:  # submitted already; the runtime is read again only for this line
        return
    if notice:
        print(notice, flush=True)


def _show_dry_run(plan: dict[str, Any], full: str, trainer: Any, rc: Any) -> None:
    """A short summary first, the full manifest after it: as text (YAML comments, so the
    output stays valid YAML), and in a notebook as a table with the manifest folded."""
    from IPython.display import display

    from ..dryrun import summary_html, summary_text

    text = summary_text(plan, full.count("\n"), trainer, rc) + full
    display(
        {"text/plain": text.rstrip("\n"), "text/html": summary_html(plan, full, trainer, rc)},
        raw=True,
    )


def _gpu_preview(plan: dict[str, Any]) -> str:
    """The local device plan of a dry run, as YAML comments: each node's GPUs (or why not)."""
    g = plan["gpus"]
    if not g.get("per_node"):
        return f"# local GPUs: {g.get('note', 'none')}\n"
    lines = [
        f"# local GPUs: {g['per_node']} per node; {g.get('free')} of {len(g.get('devices') or [])}"
        f" free now ({g.get('note', '')})"
    ]
    for node, p in (g.get("plan") or {}).items():
        lines.append(f"#   {node}: {', '.join(p['devices'])}")
        lines.append(f"#     CUDA_VISIBLE_DEVICES={p['CUDA_VISIBLE_DEVICES']}")
    nccl = " ".join(f"{k}={v}" for k, v in (g.get("nccl_defaults") or {}).items())
    if nccl:
        lines.append(f"#   NCCL defaults (your env wins): {nccl}")
    return "\n".join(lines) + "\n"


def _workspace_preview(plan: dict[str, Any]) -> str:
    """The workspace part of a dry run: what ships, as YAML comments."""
    ws = plan["workspace"]
    lines = [
        f"# workspace: {ws['folder']} -> {ws['file_count']} files, {ws['size']} "
        f"(limit {ws['limit']}); every rank imports from a copy of it",
        *(f"#   {f}" for f in ws["files"]),
    ]
    if ws.get("skipped"):
        lines.append("# skipped: " + ", ".join(ws["skipped"]))
    if ws.get("credentials"):
        why = dict(w.split(": ", 1) for w in ws.get("skipped_why", []) if ": " in w)
        lines.append("# not shipped, they look like credentials:")
        lines.extend(f"#   {p} ({why.get(p, '')})" for p in ws["credentials"])
    if ws.get("outputs"):
        lines.append(f"# outputs: {ws['outputs']}")
    return "\n".join(lines) + "\n"


@magics_class
class KubeflowMagics(Magics):
    """Training cell magics and kf_* line magics; defaults are configurable with `%config`."""

    backend = CaselessStrEnum(
        ("local", "kubernetes"), default_value="local", help="default backend"
    ).tag(config=True)
    namespace = Unicode(None, allow_none=True, help="default Kubernetes namespace").tag(config=True)
    kubeconfig = Unicode(
        None, allow_none=True, help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)"
    ).tag(config=True)
    context = Unicode(None, allow_none=True, help="kubeconfig context").tag(config=True)
    num_nodes = Int(None, allow_none=True, help="default number of nodes").tag(config=True)
    num_proc_per_node = Int(None, allow_none=True, help="default processes per node").tag(
        config=True
    )
    image = Unicode(None, allow_none=True, help="default trainer image").tag(config=True)
    timeout = Float(
        None, allow_none=True, help="seconds a cell follows a job (None: until done)"
    ).tag(config=True)
    cancel_on_interrupt = Bool(False, help="delete the job when the cell is interrupted").tag(
        config=True
    )
    widgets = CaselessStrEnum(
        ("auto", "on", "off"), default_value="auto", help="show the job monitor widget"
    ).tag(config=True)
    buffer_lines = Int(400, help="log lines the monitor keeps in view").tag(config=True)
    warm = Bool(True, help="local: start ranks from the warm pool (docs/local-backend.md)").tag(
        config=True
    )
    warm_prestart = Bool(
        True, help="local: start the torch pool when the extension loads (if torch is installed)"
    ).tag(config=True)
    warm_idle_seconds = Float(
        600.0, help="local: a warm pool process ends after this long without a launch"
    ).tag(config=True)
    warm_max_pools = Int(3, help="local: at most this many warm pool processes at once").tag(
        config=True
    )
    warm_max_memory_mib = Float(
        4096.0,
        help="local: the warm pools' memory together stays under this (and under a quarter of "
        "the container's memory limit)",
    ).tag(config=True)
    runtime_config = AnyTrait(None, help="session RuntimeConfig (set by %kf_config)")
    options = AnyTrait(None, help="session options list (set by %kf_config)")

    def __init__(self, shell: Any = None, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self._clients: dict[tuple[str, str | None, str | None, str | None], Any] = {}
        self.monitors: list[Any] = []
        if shell is not None:
            _install_size_check(shell)

    # -- clients -----------------------------------------------------------------------------

    def client(self, backend: str | None = None, namespace: str | None = None) -> Any:
        """The TrainerClient of a backend (cached per backend and namespace)."""
        backend = backend or self.backend
        namespace = namespace if namespace is not None else self.namespace
        key = (
            (backend, namespace, self.kubeconfig, self.context)
            if backend == "kubernetes"
            else (backend, None, None, repr(self.warm_settings()))
        )
        if key not in self._clients:
            from ..client import TrainerClient

            if backend == "kubernetes":
                from ..backends.kubernetes.config import KubernetesBackendConfig

                self._clients[key] = TrainerClient(
                    KubernetesBackendConfig(
                        namespace=namespace, config_file=self.kubeconfig, context=self.context
                    )
                )
            else:
                from ..backends.local.config import LocalBackendConfig

                self._clients[key] = TrainerClient(LocalBackendConfig(**self.warm_settings()))
        return self._clients[key]

    def warm_settings(self) -> dict[str, Any]:
        """The warm settings of `%config KubeflowMagics.…`, as LocalBackendConfig takes them."""
        return {
            "warm": self.warm,
            "warm_idle_seconds": self.warm_idle_seconds,
            "warm_max_pools": self.warm_max_pools,
            "warm_max_memory_mib": self.warm_max_memory_mib,
        }

    def use_widgets(self) -> bool:
        """A widget frontend is there (a kernel with ipywidgets), unless `widgets` says otherwise."""
        if self.widgets == "off":
            return False
        if self.widgets == "on":
            return True
        if getattr(self.shell, "kernel", None) is None:
            return False
        import importlib.util

        return importlib.util.find_spec("ipywidgets") is not None

    def _guard(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except KFJupyterError as exc:
            raise _fail(str(exc)) from None

    # -- training cells ------------------------------------------------------------------------

    @_training_args("torch")
    @line_cell_magic
    def torchtrain(self, line: str, cell: str | None = None) -> None:
        """Run the cell, or a script file (line form), as a PyTorch job (torchrun on every node).

        Everything after ` -- ` is the program's sys.argv[1:]: %%torchtrain -n 2 -- --epochs 3
        (cell), %torchtrain train.py -n 2 -- --epochs 3 (a script file, line form).
        """
        return self._train_magic("torch", self.torchtrain, line, cell)

    @_training_args("mpi")
    @line_cell_magic
    def mpitrain(self, line: str, cell: str | None = None) -> None:
        """Run the cell, or a script file (line form), as an MPI job (mpirun over all slots).

        Everything after ` -- ` is the program's sys.argv[1:]: %%mpitrain -n 2 -- --epochs 3
        (cell), %mpitrain train.py -n 2 -- --epochs 3 (a script file, line form).
        """
        return self._train_magic("mpi", self.mpitrain, line, cell)

    @_training_args("jax")
    @line_cell_magic
    def jaxtrain(self, line: str, cell: str | None = None) -> None:
        """Run the cell, or a script file (line form), as a JAX job (one process per node).

        Everything after ` -- ` is the program's sys.argv[1:]: %%jaxtrain -n 2 -- --epochs 3
        (cell), %jaxtrain train.py -n 2 -- --epochs 3 (a script file, line form).
        """
        return self._train_magic("jax", self.jaxtrain, line, cell)

    @_training_args("xgboost")
    @line_cell_magic
    def xgboosttrain(self, line: str, cell: str | None = None) -> None:
        """Run the cell, or a script file (line form), as an XGBoost job (tracker on rank 0).

        Everything after ` -- ` is the program's sys.argv[1:]: %%xgboosttrain -n 2 -- --rounds 3
        (cell), %xgboosttrain train.py -n 2 -- --rounds 3 (a script file, line form).
        """
        return self._train_magic("xgboost", self.xgboosttrain, line, cell)

    @_training_args("torch")
    @line_cell_magic
    def transformerstrain(self, line: str, cell: str | None = None) -> None:
        """Fine-tune a Hugging Face Transformers model from the cell's YAML/JSON configuration.

        The cell body is a TransformersTrainer configuration (model, dataset, training_args,
        lora, ...; see docs/notebook.md); it runs on the torch runtime, torchrun on every node.
        Line form: %transformerstrain config.yaml -n 2 (the configuration in a file).
        """
        return self._train_magic("transformers", self.transformerstrain, line, cell)

    def _train_magic(self, framework: str, magic: Any, line: str, cell: str | None) -> None:
        flags, script_args = split_script_args(line)
        args = _parse_args(magic, flags)
        if args is None:
            return None
        args.script_args = script_args
        form = f"%%{magic.__name__}" if cell is not None else f"%{magic.__name__}"
        if cell is not None and args.script:
            raise UsageError(
                f"{form} takes no script path ({args.script!r}): the cell is the program. To run "
                f"a file, use the line form on its own line: %{magic.__name__} {args.script} ..."
            )
        if cell is None and not args.script:
            raise UsageError(
                f"{form} needs a Python file to run, for example %{magic.__name__} train.py -n 2 "
                f"-- --epochs 3; or write the code in a cell under %%{magic.__name__}."
            )
        return self._guard(self._train, framework, args, cell)

    def register_plugin_magics(self) -> None:
        """`%%<name>` for every trainer an installed plugin registers (kf_jupyter.plugins);
        a plugin that did not load gets one warning paragraph (logged), and the rest works."""
        from .. import plugins
        from .cell import PLUGIN_TRAINING_MAGICS

        reg = plugins.registry()  # a plugin that did not load was logged there, once
        PLUGIN_TRAINING_MAGICS.clear()
        PLUGIN_TRAINING_MAGICS.update(reg.trainers)  # their cells get the size check too
        _install_size_check(self.shell)
        for magic_name, cls in reg.trainers.items():
            self.shell.register_magic_function(
                self._plugin_magic(magic_name, cls, reg.owner["magic:" + magic_name]),
                "line_cell",
                magic_name,
            )

    def _plugin_magic(self, magic_name: str, cls: type, plugin: str) -> Any:
        import dataclasses

        procs = "num_proc_per_node" in {f.name for f in dataclasses.fields(cls)}

        def magic(line: str, cell: str | None = None) -> None:
            return self._train_magic(magic_name, magic, line, cell)

        magic.__name__ = magic_name
        magic.__doc__ = (
            f"Run the cell, or a script file (line form), as a {cls.__name__} job (from the "
            f"kf-jupyter plugin {plugin!r}; runtimes of framework "
            f"{', '.join(cls.supported_frameworks)}).\n\n{cls.__doc__ or ''}"
        )
        return _training_args("mpi" if procs else "plain")(magic)

    @ma.magic_arguments()
    @ma.argument(
        "--reload", action="store_true", help="read the installed plugins again (after pip)"
    )
    @line_magic
    def kf_plugins(self, line: str) -> None:
        """List the installed kf-jupyter plugins (entry points `kf_jupyter.plugins`) and what
        each adds; `%kf_plugins --reload` reads the entry points again."""
        args = _parse_args(self.kf_plugins, line)
        if args is None:
            return None
        if args.reload:
            plugins.reload()
            self.register_plugin_magics()
        self._table(
            ("plugin", "package", "adds", "status"),
            plugins.plugin_rows(),
            f"No kf-jupyter plugins installed (entry-point group {plugins.ENTRY_POINT_GROUP}).",
        )

    def _user_value(self, var: str, flag: str) -> Any:
        ns = self.shell.user_ns
        if var not in ns:
            raise ValidationError(
                f"{flag} {var}: no notebook variable named {var!r}. Run the cell that defines it "
                "first, or check the spelling."
            )
        return ns[var]

    def _func_args(self, names: tuple[str, ...]) -> dict[str, Any]:
        out = {}
        for n in names:
            value = self._user_value(n, "--args")
            try:
                json.dumps(value, allow_nan=True)
            except (TypeError, ValueError):
                raise ValidationError(
                    f"--args {n}: the variable {n!r} is a {type(value).__name__}, which cannot be "
                    "sent to the job as JSON. Pass numbers, strings, lists and dicts, and build "
                    "richer objects inside the cell."
                ) from None
            out[n] = value
        return out

    def _make_function(self, source: str, name: str) -> Any:
        compiler = getattr(self.shell, "compile", None)
        filename = "<training cell>"
        if compiler is not None and hasattr(compiler, "cache"):
            filename = compiler.cache(source)
        else:
            import linecache

            filename = f"<kf-jupyter cell {abs(hash(source))}>"
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        ns: dict[str, Any] = {"__name__": "__kf_cell__"}
        exec(compile(source, filename, "exec", dont_inherit=True), ns)
        func = ns[name]
        func.__kf_source__ = source
        return func

    def _runtime_config(self, args: Any) -> RuntimeConfig | None:
        base = self.runtime_config
        if args.config:
            base = self._user_value(args.config, "--config")
        if base is not None and not isinstance(base, RuntimeConfig):
            value = getattr(base, "value", None)  # a RuntimeConfigForm
            if not isinstance(value, RuntimeConfig):
                raise ValidationError(
                    f"--config {args.config}: expected a RuntimeConfig or a RuntimeConfigForm, "
                    f"got {type(base).__name__}."
                )
            base = value
        if not (args.packages or args.pip_index_url or args.env):
            return base
        packages = list(base.packages) if base else []
        packages += [p.strip() for p in (args.packages or "").split(",") if p.strip()]
        urls = (list(base.index_urls) if base else []) + list(args.pip_index_url or [])
        env: dict[str, str | SecretRef] = dict((base.env or {}) if base else {})
        for item in args.env or []:
            k, v = _parse_kv(item, "--env")
            env[k] = v
        return RuntimeConfig(
            packages_to_install=packages or None, pip_index_urls=urls or None, env=env or None
        )

    def _options(self, args: Any) -> list[Any]:
        from ..options import Name

        opts: Any = self.options
        if args.options:
            opts = self._user_value(args.options, "--options")
        if opts is not None and not isinstance(opts, list | tuple):
            value = getattr(opts, "value", None)  # a PodOverridesForm
            if isinstance(value, list):
                opts = value
            elif callable(opts):
                opts = [opts]
            else:
                raise ValidationError(
                    f"--options {args.options}: expected a list of options or a PodOverridesForm, "
                    f"got {type(opts).__name__}."
                )
        out = list(opts or [])
        if args.name:
            out.append(Name(args.name))
        if getattr(args, "queue", None):
            from ..options import Queue

            out.append(Queue(args.queue))
        if getattr(args, "pod_security", None):
            from ..options import PodSecurity

            out.append(PodSecurity(args.pod_security))
        if getattr(args, "no_warm", False):
            from ..options import Warm

            out.append(Warm(False))
        return out

    def _program(self, args: Any, cell: str | None, names: tuple[str, ...]) -> dict[str, Any]:
        """The trainer's program: a script file (line form), or the cell as script or function."""
        from ..script import Script
        from .cell import CELL_ARGV0

        program: dict[str, Any] = {"script_args": list(args.script_args) or None}
        if cell is None:
            program["script"] = args.script
            return program
        cf = build_cell_function(cell, names)
        self._warn_free_names(cf)
        if cf.is_script:
            program["script"] = Script(cf.script_source, CELL_ARGV0)
        else:
            program["func"] = self._make_function(cf.source, cf.name)
            program["func"].__kf_argv0__ = CELL_ARGV0
        return program

    def _config_trainer(
        self, args: Any, cell: str | None, cls: type | None = None, magic: str = "transformerstrain"
    ) -> BaseTrainer:
        """%%transformerstrain, or a plugin's configuration-driven (Tier-2) trainer's magic:
        the cell (or the file named on the line) is the configuration."""
        import dataclasses

        from ..transformers_trainer import TransformersTrainer, parse_config_text

        cls = cls or TransformersTrainer
        if args.args or args.script_args:
            raise ValidationError(
                f"%%{magic} takes its settings from the configuration in the cell; "
                "--args and arguments after -- do not apply. Put the values in the YAML."
            )
        if cell is None:
            try:
                with open(args.script, encoding="utf-8") as fh:
                    cell = fh.read()
            except OSError as exc:
                raise ValidationError(
                    f"Cannot read the configuration file {args.script!r} ({exc.strerror})."
                ) from None
        kwargs: dict[str, Any] = {
            "config": parse_config_text(cell),
            "num_nodes": args.num_nodes or self.num_nodes,
            "resources_per_node": _resources(args.resources),
            "image": args.image or self.image,
        }
        fields = {f.name for f in dataclasses.fields(cls)}
        if "num_proc_per_node" in fields:
            kwargs["num_proc_per_node"] = (
                getattr(args, "num_proc_per_node", None) or self.num_proc_per_node
            )
        if getattr(args, "max_restarts", None) is not None and "max_restarts" in fields:
            kwargs["max_restarts"] = args.max_restarts
        return cls(**kwargs)

    def _trainer(self, framework: str, args: Any, cell: str | None) -> BaseTrainer:
        if framework == "transformers":
            return self._config_trainer(args, cell)
        from ..tier2 import ConfigTrainer

        plugin_cls = None if framework in TRAINER_CLASSES else plugins.trainer_for_magic(framework)
        if plugin_cls is not None and issubclass(plugin_cls, ConfigTrainer):
            return self._config_trainer(args, cell, plugin_cls, framework)
        names = tuple(a.strip() for a in (args.args or "").split(",") if a.strip())
        program = self._program(args, cell, names)
        func_args = self._func_args(names)
        kwargs: dict[str, Any] = {
            **program,
            "func_args": func_args or None,
            "num_nodes": args.num_nodes or self.num_nodes,
            "resources_per_node": _resources(args.resources),
            "image": args.image or self.image,
        }
        cls = TRAINER_CLASSES.get(framework) or plugins.trainer_for_magic(framework)
        if cls is None:
            raise ValidationError(f"No trainer for %%{framework}; %kf_plugins lists plugins.")
        if framework in ("torch", "mpi") or hasattr(args, "num_proc_per_node"):
            kwargs["num_proc_per_node"] = args.num_proc_per_node or self.num_proc_per_node
        if framework == "torch" and args.max_restarts is not None:
            kwargs["max_restarts"] = args.max_restarts
        if framework == "jax" and args.no_setup:
            kwargs["initialize_distributed"] = False
        if framework == "xgboost" and args.no_setup:
            kwargs["setup_collective"] = False
        return cls(**kwargs)

    def _warn_free_names(self, cf: Any) -> None:
        if cf.free_names:
            known = [n for n in cf.free_names if n in self.shell.user_ns]
            hint = f" Pass notebook variables with --args {','.join(known)}." if known else ""
            print(
                f"kf-jupyter warning: the cell uses {', '.join(repr(n) for n in cf.free_names)} "
                "without defining or importing it; in the job these names are undefined "
                f"(NameError). Define or import them inside the cell.{hint}",
                file=sys.stderr,
            )

    def _train(self, framework: str, args: Any, cell: str | None) -> None:
        from .sweepargs import parse_plan

        names = tuple(a.strip() for a in (args.args or "").split(",") if a.strip())
        plan = parse_plan(args, names)
        if plan is not None:  # a sweep (docs/notebook.md, "Sweeps"): kf_jupyter.magics.sweep
            from .sweep import run_sweep

            run_sweep(self, framework, args, cell, plan)
            return
        trainer = self._trainer(framework, args, cell)
        rc = _with_workspace(self._runtime_config(args), args)
        options = self._options(args)
        backend = args.backend or self.backend
        if args.dry_run:
            self._dry_run(trainer, backend, args, rc, options)
            return
        client = self.client(backend, args.namespace)
        name = client.train(trainer, args.runtime, rc, options)
        _say_world(client, trainer, args.runtime)
        runtime = args.runtime or ""
        handle = JobHandle(client, name, client.backend_name, runtime)
        if args.out:
            self.shell.user_ns[args.out] = handle
        self._follow(handle, args)

    def _dry_run(
        self, trainer: BaseTrainer, backend: str, args: Any, rc: Any, options: list[Any]
    ) -> None:
        from .render import to_yaml

        try:
            client = self.client(backend, args.namespace)
            plan = client.dry_run(trainer, args.runtime, rc, options)
        except (ClusterUnreachableError, ImportError) as exc:
            if backend != "kubernetes":
                raise
            from ..backends.local.runtimes import local_runtimes
            from ..build import build_trainjob
            from ..runtimes import Runtime, select_runtime

            # The runtime a default Trainer install would give this trainer.
            defaults = {r.name: r for r in local_runtimes()}
            rt_name = args.runtime or select_runtime(trainer, defaults.values()).name
            runtime = defaults.get(rt_name) or Runtime(
                name=rt_name, framework=trainer.framework, ml_policy=trainer.policy
            )
            from ..backends.kubernetes.workspace import prepare
            from ..build import describe_processes, job_shape
            from ..config import mask_object

            job = build_trainjob(trainer, runtime, rc, options, backend="kubernetes")
            carrier = prepare(job, trainer, rc, os.getcwd())
            shape = job_shape(trainer, runtime, job["metadata"]["name"])
            plan = mask_object(  # as the online dry run gives it (KubernetesBackend.dry_run)
                {"backend": "kubernetes", "namespace": args.namespace or self.namespace}
                | {"trainjob": job, "world": describe_processes(shape, trainer.policy)}
                | (carrier.preview() if carrier is not None else {})
            )
            why = str(exc).split(". ")[0] if isinstance(exc, KFJupyterError) else "not available"
            print(
                f"kf-jupyter: the cluster cannot be reached ({why}); this manifest uses runtime "
                f"{rt_name!r} without checking that it exists.",
                file=sys.stderr,
            )
        given = dict(plan) if isinstance(plan, dict) else {}
        if backend == "kubernetes" and not given.get("namespace"):
            given["namespace"] = args.namespace or self.namespace
        extra = ""
        if isinstance(plan, dict) and isinstance(plan.get("workspace"), dict):
            extra = _workspace_preview(plan)
        if isinstance(plan, dict) and isinstance(plan.get("gpus"), dict):
            extra += _gpu_preview(plan)
        if isinstance(plan, dict) and isinstance(plan.get("trainjob"), dict):
            # The Kubernetes backend wraps the manifest; print the TrainJob itself, ready for
            # `kubectl apply -f`, with its namespace.
            namespace = plan.get("namespace")
            if namespace and isinstance(plan.get("configmap"), dict):
                plan["configmap"]["metadata"].setdefault("namespace", namespace)
            extra += f"---\n{to_yaml(plan['configmap'])}" if plan.get("configmap") else ""
            plan = plan["trainjob"]
            if namespace:
                plan.setdefault("metadata", {}).setdefault("namespace", namespace)
        elif backend == "kubernetes" and (args.namespace or self.namespace):
            plan.setdefault("metadata", {}).setdefault(
                "namespace", args.namespace or self.namespace
            )
        full = to_yaml(plan) + extra
        _show_dry_run(given, full, trainer, rc)

    # -- following a job -------------------------------------------------------------------------

    def _follow(self, handle: JobHandle, args: Any) -> None:
        timeout = args.timeout if args.timeout is not None else self.timeout
        cancel = args.cancel_on_interrupt or self.cancel_on_interrupt
        if self.use_widgets():
            display = self._show_monitor(handle, waiting=not args.no_wait)
            if args.no_wait:
                return
            self._wait_widget(handle, *display, timeout, cancel)
        else:
            if args.no_wait:
                print(f"Submitted {handle.name}; follow it with %kf_logs {handle.name} -f")
                return
            self._wait_text(handle, timeout, cancel)

    def _show_monitor(self, handle: JobHandle, waiting: bool) -> tuple[Any, Any]:
        """Display the live monitor of a job (see kf_jupyter.widgets.static); return
        (monitor, display handle).

        The bundle carries the lab extension's live MIME type (controls that work while the
        kernel is busy), the ipywidget monitor for other frontends, and a static fallback.
        """
        from IPython.display import display

        from ..widgets.monitor import JobMonitor
        from ..widgets.static import MIME_TYPE, live_bundle

        monitor = JobMonitor(
            handle.client,
            handle.name,
            backend=handle.backend,
            runtime=handle.runtime,
            buffer_lines=self.buffer_lines,
        )
        monitor.set_waiting(waiting)
        self.monitors = [*self.monitors[-9:], monitor]  # the last 10, for inspection
        namespace = getattr(handle.client.backend, "namespace", None)
        bundle = live_bundle(
            handle.name,
            handle.backend,
            namespace if handle.backend == "kubernetes" else None,
            handle.runtime,
            waiting=waiting,
            widget_model_id=monitor.widget.model_id,
        )
        display_id = f"kf-jupyter-job-{handle.name}"
        shown = display(bundle, raw=True, display_id=display_id)
        if not waiting:  # no cell waits for the job: the monitor replaces its output at the end
            monitor.display_id = display_id
            monitor.live_payload = bundle.get(MIME_TYPE)
        monitor.start()
        return monitor, shown

    def _interrupted(self, handle: JobHandle, cancel: bool, why: str) -> KFMagicError:
        if cancel:
            from ..widgets.monitor import cancel_job

            cancel_job(handle.client, handle.name)
            return _fail(f"{why}: job {handle.name} was cancelled (--cancel-on-interrupt).")
        return _fail(
            f"{why}: stopped following job {handle.name}, which keeps running. Reattach with "
            f"%kf_monitor {handle.name} (or %kf_logs {handle.name} -f), check it with %kf_jobs, "
            f"or stop it with the monitor's Cancel or %kf_delete {handle.name}."
        )

    def _wait_widget(
        self, handle: JobHandle, monitor: Any, shown: Any, timeout: Any, cancel: bool
    ) -> None:
        from ..errors import JobNotFoundError
        from ..widgets.static import status_label

        try:
            job = handle.client.wait_for_job_status(
                handle.name, frozenset({COMPLETE, FAILED}), timeout=timeout or 10**9
            )
        except KeyboardInterrupt:
            monitor.stop(detached=not cancel)
            monitor.set_waiting(False)  # the kernel is free: the widget's controls work now
            raise self._interrupted(handle, cancel, "Interrupted") from None
        except TimeoutError:
            monitor.stop(detached=True)
            monitor.set_waiting(False)
            raise self._interrupted(handle, False, f"Timed out after {timeout} s") from None
        except JobFailedError:
            job = handle.client.get_job(handle.name)
        except JobNotFoundError:  # deleted while followed (the monitor's Cancel on Kubernetes)
            monitor.stop()
            raise _fail(f"Job {handle.name} was deleted while this cell followed it.") from None
        try:
            monitor.join(timeout=10)
        except KeyboardInterrupt:
            pass
        monitor.finish(job)
        monitor.set_waiting(False)
        if shown is not None:  # main thread, before the cell ends: lands in this cell's output
            final = monitor.final_bundle(job)
            shown.update(final, raw=True)
            # its widget becomes that static view too, for a page that was away (see settle)
            monitor.settle(final)
        if status_label(job) == "Cancelled":
            raise _fail(f"Job {handle.name} was cancelled; its processes were stopped.")
        if job.status == FAILED:
            raise self._failed(handle, job, monitor.state.failure_tail(job))

    def _wait_text(self, handle: JobHandle, timeout: Any, cancel: bool) -> None:
        import queue
        import threading

        from ..widgets.state import LogState

        state = LogState(buffer_lines=self.buffer_lines)
        deadline = time.monotonic() + timeout if timeout else None
        color = bool(getattr(sys.stdout, "isatty", lambda: False)())
        # A reader thread follows the logs; the main thread prints (and notices an interrupt or
        # the timeout even while the job is quiet). The bounded queue keeps memory flat.
        lines: queue.Queue[Any] = queue.Queue(maxsize=10_000)
        stop = threading.Event()
        end = object()

        def read() -> None:
            try:
                for rec in handle.client.iter_log_records(handle.name, follow=True, stop=stop):
                    if stop.is_set():
                        return
                    lines.put(rec)
            except Exception as exc:
                lines.put(exc)
            finally:
                lines.put(end)

        reader = threading.Thread(target=read, name=f"kf-follow-{handle.name}", daemon=True)
        reader.start()
        try:
            while True:
                try:
                    item = lines.get(timeout=0.25)
                except queue.Empty:
                    item = None
                if item is end:
                    for source, text in state.flush_held():
                        print(state.text_prefix(source, color) + text)
                    break
                if isinstance(item, Exception):
                    raise item
                if item is not None and state.add(item.source, item.line):
                    for text in state.printed:
                        print(state.text_prefix(item.source, color) + text)
                if deadline and time.monotonic() > deadline:
                    raise TimeoutError
            job = handle.client.wait_for_job_status(
                handle.name, frozenset({COMPLETE, FAILED}), timeout=60
            )
        except KeyboardInterrupt:
            raise self._interrupted(handle, cancel, "Interrupted") from None
        except TimeoutError:
            raise self._interrupted(handle, False, f"Timed out after {timeout} s") from None
        except JobFailedError:
            job = handle.client.get_job(handle.name)
        finally:
            stop.set()
            with contextlib.suppress(queue.Empty):
                while True:  # unblock a reader waiting on a full queue
                    lines.get_nowait()
        sys.stdout.flush()
        from ..widgets.static import status_label

        if status_label(job) == "Cancelled":
            raise _fail(f"Job {handle.name} was cancelled; its processes were stopped.")
        if job.status == FAILED:
            raise self._failed(handle, job, state.failure_tail(job))

    def _failed(self, handle: JobHandle, job: Any, tail: tuple[str, list[str]]) -> KFMagicError:
        failure = getattr(job, "failure", None)
        if failure is not None:
            return _fail(failure_error_text(handle.name, failure))
        source, lines = tail
        why = " ".join(p for p in (job.reason, job.message) if p) or "a process exited non-zero"
        last = ""
        if lines:
            last = f" Last lines of {source}:\n" + "\n".join("    " + ln for ln in lines)
        return _fail(
            f"Job {handle.name} failed ({why}). Full logs: %kf_logs {handle.name}; delete it "
            f"with %kf_delete {handle.name}.{last}"
        )

    # -- line magics -------------------------------------------------------------------------

    @ma.magic_arguments()
    @ma.argument("backend", nargs="?", choices=("local", "kubernetes"), default=None)
    @ma.argument("--namespace", default=None)
    @line_magic
    def kf_backend(self, line: str) -> None:
        """Show or set the session's default backend and namespace."""
        args = _parse_args(self.kf_backend, line)
        if args is None:
            return None
        if args.backend:
            self.backend = args.backend
        if args.namespace is not None:
            self.namespace = args.namespace
        ns = f", namespace {self.namespace}" if self.namespace and self.backend != "local" else ""
        print(f"kf-jupyter backend: {self.backend}{ns}")

    @ma.magic_arguments()
    @ma.argument("framework", nargs="?", default=None)
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @line_magic
    def kf_runtimes(self, line: str) -> None:
        """List the training runtimes (optionally of one framework)."""
        args = _parse_args(self.kf_runtimes, line)
        if args is None:
            return None
        from .render import RUNTIME_HEADERS, runtime_rows

        runtimes = self._guard(lambda: self.client(args.backend).list_runtimes(args.framework))
        self._table(RUNTIME_HEADERS, runtime_rows(runtimes), "No training runtimes.")

    @ma.magic_arguments()
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @ma.argument(
        "--all",
        action="store_true",
        help=f"every job (default: the newest {JOBS_SHOWN}, and how many older ones there are)",
    )
    @line_magic
    def kf_jobs(self, line: str) -> None:
        """List the jobs: name, framework, backend, status, nodes, age, and actions."""
        args = _parse_args(self.kf_jobs, line)
        if args is None:
            return None
        from .render import JOB_HEADERS, job_rows

        client = self._guard(self.client, args.backend)
        newest = getattr(client.backend, "newest_jobs", None)
        hidden = 0
        if newest is not None and not args.all:  # local: only the rows shown are read
            jobs, total = self._guard(newest, JOBS_SHOWN)
            hidden = total - len(jobs)
        else:
            jobs = self._guard(client.list_jobs)
        if not args.all and len(jobs) > JOBS_SHOWN:
            oldest = datetime.min.replace(tzinfo=UTC)
            jobs = sorted(jobs, key=lambda j: j.creation_time or oldest)
            hidden = len(jobs) - JOBS_SHOWN
            jobs = jobs[hidden:]
        shown = len(jobs)
        rows = job_rows(jobs)
        if hidden:
            print(
                f"The newest {shown} of {hidden + shown} jobs; %kf_jobs --all lists "
                f"the {hidden} older ones too."
            )
        if getattr(self.shell, "kernel", None) is not None:
            self._table(JOB_HEADERS, rows, "No jobs.")
            if self.use_widgets() and rows:
                from IPython.display import display

                from ..widgets.tables import JobsTable

                display(JobsTable(self, rows, args.backend).widget)
            return
        self._table(
            (*JOB_HEADERS, "actions"),
            [[*r, f"%kf_logs {r[0]} | %kf_delete {r[0]}"] for r in rows],
            "No jobs.",
        )

    def _table(self, headers: Any, rows: list[list[str]], empty: str) -> None:
        from .render import html_table, text_table

        if not rows:
            print(empty)
            return
        if getattr(self.shell, "kernel", None) is not None:
            from IPython.display import HTML, display

            display(HTML(html_table(headers, rows)))
        else:
            print(text_table(headers, rows))

    @ma.magic_arguments()
    @ma.argument("name")
    @ma.argument("-f", "--follow", action="store_true", help="follow until the job ends")
    @ma.argument("--tail", type=int, default=None, help="only the last N lines")
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @line_magic
    def kf_logs(self, line: str) -> None:
        """Print a job's logs (`-f` follows until the job ends; interrupt to stop)."""
        args = _parse_args(self.kf_logs, line)
        if args is None:
            return None

        def run() -> None:
            client = self.client(args.backend)
            try:
                for text in client.get_job_logs(
                    args.name, follow=args.follow, tail_lines=args.tail
                ):
                    print(text, flush=args.follow)
            except KeyboardInterrupt:
                print(f"Stopped following {args.name}; it keeps running.")

        self._guard(run)

    @ma.magic_arguments()
    @ma.argument("name")
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @ma.argument("--namespace", default=None, help="Kubernetes namespace")
    @line_magic
    def kf_monitor(self, line: str) -> None:
        """Show a job's monitor here: live while it runs (re-attach from any notebook or after
        a kernel restart; the cell does not wait), its static rendering once it ended."""
        args = _parse_args(self.kf_monitor, line)
        if args is None:  # --help was printed
            return None

        def run() -> None:
            from ..types import TERMINAL

            client = self.client(args.backend, args.namespace)
            job = client.get_job(args.name)
            handle = JobHandle(client, args.name, client.backend_name, job.runtime or "")
            if job.status not in TERMINAL:
                if self.use_widgets():
                    self._show_monitor(handle, waiting=False)
                else:
                    print(
                        f"Job {args.name} is {job.status}; follow it with %kf_logs {args.name} -f"
                    )
                return
            self._show_final(client, handle, job)

        self._guard(run)

    def _show_final(self, client: Any, handle: JobHandle, job: Any) -> None:
        from ..widgets.state import LogState
        from ..widgets.static import final_bundle

        state = LogState(buffer_lines=self.buffer_lines)
        for rec in client.iter_log_records(handle.name, follow=False):
            state.add(rec.source, rec.line)
        backend = getattr(client, "backend", None)
        job_dir = getattr(backend, "job_dir", None)
        pointer = ""
        if callable(job_dir):
            import html

            pointer = f"<code>{html.escape(str(job_dir(handle.name) / 'logs'))}</code>"
        namespace = getattr(backend, "namespace", None) if handle.backend == "kubernetes" else None
        bundle = final_bundle(
            state, job, handle.name, handle.backend, namespace, handle.runtime, pointer
        )
        if getattr(self.shell, "kernel", None) is None:
            print(bundle["text/plain"])
            return
        from IPython.display import display

        display(bundle, raw=True)

    @ma.magic_arguments()
    @ma.argument("name")
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @line_magic
    def kf_delete(self, line: str) -> None:
        """Delete a job and stop its processes."""
        args = _parse_args(self.kf_delete, line)
        if args is None:
            return None
        self._guard(lambda: self.client(args.backend).delete_job(args.name))
        print(f"Deleted job {args.name}.")

    @ma.magic_arguments()
    @ma.argument("name")
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @line_magic
    def kf_suspend(self, line: str) -> None:
        """Suspend a job: stop its processes (pods), keep the job; `%kf_resume` restarts it."""
        args = _parse_args(self.kf_suspend, line)
        if args is None:  # --help was printed
            return
        self._guard(lambda: self.client(args.backend).suspend_job(args.name))
        print(f"Suspended job {args.name}. Resume it with %kf_resume {args.name}.")

    @ma.magic_arguments()
    @ma.argument("name")
    @ma.argument("--backend", choices=("local", "kubernetes"), default=None)
    @line_magic
    def kf_resume(self, line: str) -> None:
        """Resume a suspended job (its processes or pods start again)."""
        args = _parse_args(self.kf_resume, line)
        if args is None:  # --help was printed
            return
        self._guard(lambda: self.client(args.backend).resume_job(args.name))
        print(f"Resumed job {args.name}.")

    @ma.magic_arguments()
    @ma.argument("--stop", action="store_true", help="stop every pool process now")
    @ma.argument("--start", default=None, help="start the pool of a framework: torch, jax, xgboost")
    @line_magic
    def kf_pool(self, line: str) -> None:
        """The local warm pool: one process per interpreter and framework, with its memory."""
        args = _parse_args(self.kf_pool, line)
        if args is None:  # --help was printed
            return None
        from ..backends.local.warm import pool as warm_pool

        backend = self.client("local").backend
        if args.stop:
            n = warm_pool.stop_all(backend.state_dir)
            print(f"kf-jupyter: stopped {n} warm pool process(es).")
            return
        if args.start:
            if args.start not in warm_pool.PRELOAD:
                raise _fail(f"--start takes one of {', '.join(warm_pool.PRELOAD)}")
            self._guard(lambda: backend.prestart_pool(args.start))
        from .render import POOL_HEADERS, pool_learned_lines, pool_rows

        pools = warm_pool.list_pools(backend.state_dir)
        state = "on" if self.warm else "off (%config KubeflowMagics.warm = True turns it on)"
        cfg = backend.config
        held = sum(warm_pool.pool_bytes(p) for p in pools if p.get("alive")) / 2**20
        cap = warm_pool.effective_max_memory_mib(cfg.warm_max_memory_mib)
        why_cap = (
            f" ({warm_pool.CGROUP_SHARE:.0%} of the container's memory limit)"
            if cap < cfg.warm_max_memory_mib
            else ""
        )
        print(
            f"kf-jupyter warm pool: {state}; pool processes end after "
            f"{cfg.warm_idle_seconds:.0f} s idle or with this kernel; at most "
            f"{cfg.warm_max_pools} of them holding {cap:.0f} MiB together{why_cap} "
            f"(now {held:.0f} MiB)."
        )
        self._table(
            POOL_HEADERS,
            pool_rows(pools),
            "No pool process runs (the next torch/JAX/XGBoost job starts one).",
        )
        learned = pool_learned_lines(pools)
        if learned:
            print("What each pool imports before it forks (learned: what its jobs imported):")
            print("\n".join(learned))
        print(
            "Change: %config KubeflowMagics.warm = False (warm starts off), "
            "%config KubeflowMagics.warm_prestart = False (no pools at %load_ext), "
            "%config KubeflowMagics.warm_idle_seconds = 1800, "
            "%config KubeflowMagics.warm_max_pools = 2, "
            "%config KubeflowMagics.warm_max_memory_mib = 1024 (LocalBackendConfig(...) takes "
            "the same names for a TrainerClient of your own). "
            "`%kf_pool --stop` stops every pool now."
        )
        cold = warm_pool.recent_cold(backend.state_dir)
        if cold:
            print("Recent cold starts, and why:")
            for rec in cold:
                node = f" {rec['node']}" if rec.get("node") else ""
                print(f"  {rec.get('job', '?')}{node}: {rec['why']}")

    def prestart(self) -> threading.Thread | None:
        """Start, in the background, the supervisor host and the warm pools of the installed
        frameworks (torch, then JAX, then XGBoost, one after the other: each imports alone)
        when the extension loads; a pool that would not fit under the caps is not started."""
        if not (self.warm and self.warm_prestart) or self.backend != "local":
            return None
        import importlib.util

        frameworks = [
            fw
            for fw, module in (("torch", "torch"), ("jax", "jax"), ("xgboost", "xgboost"))
            if importlib.util.find_spec(module) is not None
        ]

        def run() -> None:
            backend = self.client("local").backend
            with contextlib.suppress(Exception):
                backend.prestart_supervisor_host()
            for fw in frameworks:
                with contextlib.suppress(Exception):
                    pool = backend.prestart_pool(fw, make_room=False)
                    if pool is not None:
                        _wait_for_pool(pool)

        thread = threading.Thread(target=run, name="kf-jupyter-prestart", daemon=True)
        thread.start()
        return thread

    @ma.magic_arguments()
    @ma.argument("--reset", action="store_true", help="clear the session RuntimeConfig and options")
    @line_magic
    def kf_config(self, line: str) -> Any:
        """Show the RuntimeConfig and pod-override forms; Apply sets the session defaults."""
        args = _parse_args(self.kf_config, line)
        if args is None:
            return None
        if args.reset:
            self.runtime_config = None
            self.options = None
            print("kf-jupyter: session RuntimeConfig and options cleared.")
            return None
        if not self.use_widgets():
            print(
                f"kf-jupyter session defaults: backend={self.backend}, namespace={self.namespace}, "
                f"runtime_config={self.runtime_config!r}, options={self.options!r}. The forms "
                "need a notebook; here use --config VAR / --options VAR or %config "
                "KubeflowMagics.<name> = value."
            )
            return None
        from ..widgets.forms import SessionConfigPanel

        panel = SessionConfigPanel(self)
        from IPython.display import display

        display(panel.widget)
        return None
