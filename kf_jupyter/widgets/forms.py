"""Forms: `RuntimeConfigForm` (-> RuntimeConfig) and `PodOverridesForm` (-> list of options).

Each form validates as the user types (core validators, one message per bad field) and its
`.value` raises the same `ValidationError` for bad input. Either form can be passed to a training
cell as `--config VAR` / `--options VAR`; `%kf_config` shows both with an Apply button.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from typing import Any

from ..config import RuntimeConfig, SecretRef, validate_index_url, validate_package
from ..errors import KFJupyterError, ValidationError
from ..options import ContainerOverride, PodSpecOverride, PodTemplateOverride, PodTemplateOverrides
from ..validation import validate_env_name, validate_label_key, validate_label_value

FRAMEWORKS = ("torch", "mpi", "jax", "xgboost")


def _fitting_runtimes(runtimes: list[Any], framework: str) -> list[str]:
    """Names of the runtimes a trainer of this form framework runs on, in its preference order
    (an MPI form offers deepspeed-distributed and mlx-distributed: both have the mpi policy)."""
    from ..trainers import TRAINER_CLASSES

    cls = TRAINER_CLASSES.get(framework)
    labels = cls.supported_frameworks if cls else (framework,)
    usable = [r for r in runtimes if not r.deprecated and r.framework in labels]
    return [r.name for r in sorted(usable, key=lambda r: (labels.index(r.framework), r.name))]


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
AUTO = "(chosen automatically)"


def _items(text: str) -> list[str]:
    """Non-empty entries of a text split on newlines and commas."""
    return [p.strip() for p in re.split(r"[\n,]", text or "") if p.strip()]


def _lines(text: str) -> list[str]:
    return [p.strip() for p in (text or "").splitlines() if p.strip()]


def _error_html(errors: list[str]) -> str:
    if not errors:
        return ""
    items = "".join(f"<li>{html.escape(e)}</li>" for e in errors)
    return f"<ul class='kf-errors' style='color:var(--jp-error-color1,#b02a37);margin:2px 0'>{items}</ul>"


class _Form:
    """Shared: an errors box refreshed on every change, `.value` raising the first error."""

    widget: Any
    messages: Any

    def _collect(self) -> tuple[Any, list[str]]:
        raise NotImplementedError

    def validate(self) -> list[str]:
        """The current error messages (also shown under the form)."""
        _, errors = self._collect()
        self.messages.value = _error_html(errors)
        return errors

    @property
    def value(self) -> Any:
        """The form's value; raises ValidationError (and shows it) for bad input."""
        value, errors = self._collect()
        self.messages.value = _error_html(errors)
        if errors:
            raise ValidationError(" ".join(errors))
        return value

    def _watch(self, *widgets: Any) -> None:
        for w in widgets:
            w.observe(lambda _c: self.validate(), names="value")

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


class EnvRow:
    """One environment variable: name, kind (value or Secret), value or `secret/key`."""

    def __init__(self, on_remove: Callable[[EnvRow], None], on_change: Callable[[], None]) -> None:
        import ipywidgets as w

        self.name = w.Text(placeholder="NAME", layout=w.Layout(width="160px"))
        # a description labels the select (axe: select-name)
        self.kind = w.Dropdown(
            options=[("value", "value"), ("from Secret", "secret")],
            value="value",
            description="as",
            style={"description_width": "initial"},
            layout=w.Layout(width="150px"),
        )
        self.text = w.Text(placeholder="value (or secret-name/key)", layout=w.Layout(width="260px"))
        self.remove = w.Button(description="remove", layout=w.Layout(width="70px"))
        self.remove.on_click(lambda _b: on_remove(self))
        for x in (self.name, self.kind, self.text):
            x.observe(lambda _c: on_change(), names="value")
        self.widget = w.HBox([self.name, self.kind, self.text, self.remove])

    def parse(self) -> tuple[str, str | SecretRef]:
        """(name, value or SecretRef); ValidationError for a bad row."""
        name = validate_env_name(self.name.value.strip())
        if self.kind.value == "secret":
            secret, sep, key = self.text.value.strip().partition("/")
            if not sep:
                raise ValidationError(
                    f"Env {name}: a Secret reference is written secret-name/key, got "
                    f"{self.text.value!r}."
                )
            return name, SecretRef(secret, key)
        return name, self.text.value


class RuntimeConfigForm(_Form):
    """Packages, pip index URLs, env rows (values or Secret references), framework, runtime,
    backend. `.value` is a RuntimeConfig; `.runtime`, `.framework`, `.backend` the choices."""

    def __init__(
        self,
        client_factory: Callable[[str], Any] | None = None,
        framework: str = "torch",
        backend: str = "local",
        value: RuntimeConfig | None = None,
    ) -> None:
        import ipywidgets as w

        self._client_factory = client_factory
        style = {"description_width": "110px"}
        self.packages = w.Textarea(
            description="packages", placeholder="numpy, transformers[torch]>=4.40", style=style
        )
        self.index_urls = w.Textarea(
            description="pip index URLs", placeholder="https://pypi.example.com/simple", style=style
        )
        self.framework_w = w.Dropdown(
            description="framework", options=list(FRAMEWORKS), value=framework, style=style
        )
        self.backend_w = w.Dropdown(
            description="backend", options=["local", "kubernetes"], value=backend, style=style
        )
        self.runtime_w = w.Dropdown(description="runtime", options=[AUTO], value=AUTO, style=style)
        self.runtime_note = w.HTML("")
        self.env_rows: list[EnvRow] = []
        self.env_box = w.VBox([])
        self.add_env_button = w.Button(description="add env var", icon="plus")
        self.add_env_button.on_click(lambda _b: self.add_env())
        self.messages = w.HTML("")
        self.widget = w.VBox(
            [
                w.HTML("<b>Runtime configuration</b>"),
                self.framework_w,
                self.backend_w,
                w.HBox([self.runtime_w, self.runtime_note]),
                self.packages,
                self.index_urls,
                w.HTML("environment variables"),
                self.env_box,
                self.add_env_button,
                self.messages,
            ]
        )
        self._watch(self.packages, self.index_urls)
        self.framework_w.observe(lambda _c: self.refresh_runtimes(), names="value")
        self.backend_w.observe(lambda _c: self.refresh_runtimes(), names="value")
        if value is not None:
            self.packages.value = "\n".join(value.packages)
            self.index_urls.value = "\n".join(value.index_urls)
            for k, v in (value.env or {}).items():
                if isinstance(v, SecretRef):
                    self.add_env(k, f"{v.name}/{v.key}", secret=True)
                else:
                    self.add_env(k, v)
        if client_factory is not None:
            self.refresh_runtimes()

    @property
    def framework(self) -> str:
        """The chosen framework (torch, mpi, jax, xgboost)."""
        return self.framework_w.value

    @property
    def backend(self) -> str:
        """The chosen backend."""
        return self.backend_w.value

    @property
    def runtime(self) -> str | None:
        """The chosen runtime name, or None to let it be picked automatically."""
        return None if self.runtime_w.value == AUTO else self.runtime_w.value

    def refresh_runtimes(self) -> list[str]:
        """Fill the runtime dropdown from discovery for the framework on the backend."""
        names: list[str] = []
        note = ""
        if self._client_factory is not None:
            try:
                client = self._client_factory(self.backend)
                names = _fitting_runtimes(client.list_runtimes(), self.framework)
            except KFJupyterError as exc:
                note = str(exc).split(". ")[0]
            except Exception as exc:  # discovery must never break the form
                note = f"runtime discovery failed: {type(exc).__name__}"
        current = self.runtime_w.value
        self.runtime_w.options = [AUTO, *names]
        self.runtime_w.value = current if current in names else AUTO
        self.runtime_note.value = f"<small>{html.escape(note)}</small>" if note else ""
        return names

    def add_env(self, name: str = "", value: str = "", secret: bool = False) -> EnvRow:
        """Add an env row (returns it)."""
        row = EnvRow(self._remove_env, self.validate)
        row.name.value = name
        row.kind.value = "secret" if secret else "value"
        row.text.value = value
        self.env_rows.append(row)
        self.env_box.children = [r.widget for r in self.env_rows]
        self.validate()
        return row

    def _remove_env(self, row: EnvRow) -> None:
        self.env_rows = [r for r in self.env_rows if r is not row]
        self.env_box.children = [r.widget for r in self.env_rows]
        self.validate()

    def _collect(self) -> tuple[RuntimeConfig | None, list[str]]:
        errors: list[str] = []
        packages = []
        for p in _items(self.packages.value):
            try:
                packages.append(validate_package(p))
            except ValidationError as exc:
                errors.append(str(exc))
        urls = []
        for u in _lines(self.index_urls.value):
            try:
                urls.append(validate_index_url(u))
            except ValidationError as exc:
                errors.append(str(exc))
        env: dict[str, str | SecretRef] = {}
        for row in self.env_rows:
            if not row.name.value.strip() and not row.text.value.strip():
                continue
            try:
                k, v = row.parse()
                if k in env:
                    raise ValidationError(f"Env {k} is set twice; keep one row.")
                env[k] = v
            except ValidationError as exc:
                errors.append(str(exc))
        if errors:
            return None, errors
        try:
            rc = RuntimeConfig(
                packages_to_install=packages or None,
                pip_index_urls=urls or None,
                env=env or None,
            )
        except ValidationError as exc:
            return None, [str(exc)]
        return rc, []


def _kv(line: str, what: str) -> tuple[str, str]:
    k, sep, v = line.partition("=")
    if not sep or not k.strip():
        raise ValidationError(f"{what} {line!r} is not key=value.")
    return k.strip(), v.strip()


def _check_dns(value: str, what: str, label: bool = False) -> str:
    rx = _DNS_LABEL if label else _DNS_SUBDOMAIN
    if not value or len(value) > (63 if label else 253) or not rx.match(value):
        raise ValidationError(
            f"{what} {value!r} is not a valid Kubernetes name: lower-case letters, digits and "
            "'-' (and '.' between parts), starting and ending with a letter or digit."
        )
    return value


class PodOverridesForm(_Form):
    """Node selector, tolerations, PVC volumes with mount paths, service account, image pull
    secrets and env of side containers; `.value` is a list of options (empty when unset)."""

    def __init__(self, target_jobs: str = "node") -> None:
        import ipywidgets as w

        style = {"description_width": "130px"}
        self.target_jobs = w.Text(value=target_jobs, description="replicated jobs", style=style)
        self.node_selector = w.Textarea(
            description="node selector", placeholder="disktype=ssd", style=style
        )
        self.tolerations = w.Textarea(
            description="tolerations", placeholder="gpu=true:NoSchedule", style=style
        )
        self.volumes = w.Textarea(
            description="PVC volumes", placeholder="claim-name:/data[:ro]", style=style
        )
        self.service_account = w.Text(description="service account", style=style)
        self.image_pull_secrets = w.Text(
            description="image pull secrets", placeholder="regcred, other", style=style
        )
        self.side_env = w.Textarea(
            description="side container env", placeholder="sidecar:NAME=value", style=style
        )
        self.messages = w.HTML("")
        self.widget = w.VBox(
            [
                w.HTML("<b>Pod overrides</b> (Kubernetes only; skipped locally)"),
                self.target_jobs,
                self.node_selector,
                self.tolerations,
                self.volumes,
                self.service_account,
                self.image_pull_secrets,
                self.side_env,
                self.messages,
            ]
        )
        self._watch(
            self.target_jobs,
            self.node_selector,
            self.tolerations,
            self.volumes,
            self.service_account,
            self.image_pull_secrets,
            self.side_env,
        )

    def _collect(self) -> tuple[list[Any] | None, list[str]]:
        errors: list[str] = []

        def attempt(fn: Callable[[], Any]) -> Any:
            try:
                return fn()
            except ValidationError as exc:
                errors.append(str(exc))
                return None

        node_selector: dict[str, str] = {}
        for line in _lines(self.node_selector.value):

            def ns(line: str = line) -> None:
                k, v = _kv(line, "Node selector")
                node_selector[validate_label_key(k)] = validate_label_value(k, v)

            attempt(ns)
        tolerations = [
            t
            for t in (
                attempt(lambda ln=ln: _toleration(ln)) for ln in _lines(self.tolerations.value)
            )
            if t
        ]
        volumes: list[dict[str, Any]] = []
        mounts: list[dict[str, Any]] = []
        for line in _lines(self.volumes.value):
            vm = attempt(lambda ln=line: _volume(ln))
            if vm:
                volumes.append(vm[0])
                mounts.append(vm[1])
        sa = self.service_account.value.strip()
        if sa:
            attempt(lambda: _check_dns(sa, "Service account"))
        secrets = [s for s in _items(self.image_pull_secrets.value)]
        for s in secrets:
            attempt(lambda s=s: _check_dns(s, "Image pull secret"))
        side: dict[str, list[dict[str, Any]]] = {}
        for line in _lines(self.side_env.value):

            def se(line: str = line) -> None:
                container, sep, rest = line.partition(":")
                if not sep:
                    raise ValidationError(
                        f"Side container env {line!r} is written container:NAME=value."
                    )
                _check_dns(container.strip(), "Container name", label=True)
                if container.strip() in ("node", "dataset-initializer", "model-initializer"):
                    raise ValidationError(
                        f"Env of container {container.strip()!r} cannot be set by a pod override; "
                        "put trainer env in the RuntimeConfig form instead."
                    )
                k, v = _kv(rest, "Side container env")
                side.setdefault(container.strip(), []).append(
                    {"name": validate_env_name(k), "value": v}
                )

            attempt(se)
        targets = _items(self.target_jobs.value)
        if not targets:
            errors.append("Name at least one replicated job to override, for example node.")
        if errors:
            return None, errors
        containers = [ContainerOverride(name=c, env=e) for c, e in side.items()]
        if mounts:
            containers.append(ContainerOverride(name="node", volume_mounts=mounts))
        spec = PodSpecOverride(
            service_account_name=sa or None,
            node_selector=node_selector or None,
            tolerations=tolerations or None,
            volumes=volumes or None,
            image_pull_secrets=[{"name": s} for s in secrets] or None,
            containers=containers or None,
        )
        if not spec.set_fields():
            return [], []
        try:
            return [PodTemplateOverrides(PodTemplateOverride(target_jobs=targets, spec=spec))], []
        except KFJupyterError as exc:
            return None, [str(exc)]


def _toleration(line: str) -> dict[str, Any]:
    """`key[=value]:Effect` (kubectl taint syntax) as a toleration."""
    head, sep, effect = line.rpartition(":")
    if not sep or effect not in _EFFECTS:
        raise ValidationError(
            f"Toleration {line!r} is written key[=value]:Effect with Effect one of "
            f"{', '.join(_EFFECTS)} (for example gpu=true:NoSchedule)."
        )
    key, eq, value = head.partition("=")
    validate_label_key(key.strip())
    if eq:
        validate_label_value(key.strip(), value.strip())
        return {"key": key.strip(), "operator": "Equal", "value": value.strip(), "effect": effect}
    return {"key": key.strip(), "operator": "Exists", "effect": effect}


def _volume(line: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`claim:/mount/path[:ro]` as a PVC volume and its mount on the trainer container."""
    parts = line.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValidationError(
            f"Volume {line!r} is written claim-name:/mount/path, optionally :ro for read-only."
        )
    claim, path = parts[0].strip(), parts[1].strip()
    _check_dns(claim, "PVC claim name")
    if not path.startswith("/"):
        raise ValidationError(f"Mount path {path!r} of claim {claim!r} must be absolute (/data).")
    ro = len(parts) == 3 and parts[2] == "ro"
    name = ("pvc-" + claim.replace(".", "-"))[:63].rstrip("-")
    volume = {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": ro}}
    mount = {"name": name, "mountPath": path, "readOnly": ro}
    return volume, mount


class SessionConfigPanel:
    """What `%kf_config` shows: both forms and an Apply button setting the session defaults."""

    def __init__(self, magics: Any) -> None:
        import ipywidgets as w

        self.magics = magics
        self.config_form = RuntimeConfigForm(
            client_factory=lambda b: magics.client(b),
            backend=magics.backend,
            value=magics.runtime_config,
        )
        self.pod_form = PodOverridesForm()
        self.apply_button = w.Button(description="Apply", button_style="primary")
        self.status = w.HTML("")
        self.apply_button.on_click(lambda _b: self.apply())
        self.widget = w.VBox(
            [self.config_form.widget, self.pod_form.widget, self.apply_button, self.status]
        )

    def apply(self) -> bool:
        """Set the session RuntimeConfig, options and backend from the forms."""
        try:
            rc = self.config_form.value
            opts = self.pod_form.value
        except ValidationError:
            self.status.value = "<span style='color:var(--jp-error-color1,#b02a37)'>Fix the fields above first.</span>"
            return False
        self.magics.runtime_config = rc
        self.magics.options = opts or None
        self.magics.backend = self.config_form.backend
        self.status.value = (
            f"Session defaults set: backend {html.escape(self.config_form.backend)}, "
            f"{html.escape(repr(rc))}, {len(opts)} option(s)."
        )
        return True
