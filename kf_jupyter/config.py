"""RuntimeConfig: the per-job environment (packages, pip index URLs, env), apart from the logic."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .errors import ValidationError
from .validation import validate_env_name, validate_env_value


@dataclass(frozen=True)
class SecretRef:
    """A value taken from a Kubernetes Secret (`valueFrom.secretKeyRef`), never written inline.

    On the local backend the value comes from the kernel's environment variable of the same
    name as the target variable (see docs/local-backend.md).
    """

    name: str
    key: str

    def __post_init__(self) -> None:
        for what, v in (("name", self.name), ("key", self.key)):
            if not isinstance(v, str) or not v or not re.fullmatch(r"[-._a-zA-Z0-9]+", v):
                raise ValidationError(
                    f"SecretRef {what} {v!r} is not valid: Secret names and keys hold letters, "
                    "digits, '-', '_' and '.'."
                )

    def __repr__(self) -> str:
        return f"SecretRef(name={self.name!r}, key={self.key!r})"


_VER = r"[<>=!~]=?=?\s*[A-Za-z0-9.*+!_-]+"
_PKG = re.compile(
    rf"^[A-Za-z0-9][A-Za-z0-9._\-]*(\[[A-Za-z0-9._\-]+(\s*,\s*[A-Za-z0-9._\-]+)*\])?"
    rf"\s*({_VER}(\s*,\s*{_VER})*)?$"
)


def validate_package(spec: str) -> str:
    """Check a pip requirement (name, extras, version specifiers; no options, no paths)."""
    if (
        not isinstance(spec, str)
        or not spec.strip()
        or spec.lstrip().startswith("-")
        or not _PKG.match(spec.strip())
    ):
        raise ValidationError(
            f"Invalid package {spec!r}: give a pip requirement such as 'numpy', "
            "'transformers[torch]' or 'scikit-learn>=1.4'. Options (starting with '-'), paths "
            "and URLs are not accepted here; use pip_index_urls for other indexes."
        )
    return spec.strip()


def validate_index_url(url: str) -> str:
    """Check a pip index URL (http or https, with a host)."""
    try:
        parts = urlsplit(url) if isinstance(url, str) else None
        parts is not None and parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:  # '[' without an IPv6 host, a port that is not a number, ...
        parts = None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or any(c.isspace() for c in url)
    ):
        raise ValidationError(
            f"Invalid pip index URL {mask_url(url) if isinstance(url, str) else url!r}: give an "
            "http(s) URL such as 'https://pypi.example.com/simple'."
        )
    return url


#: A URL scheme and its "://" (http, https, git+https, ftp, ...).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: A user name that is shown as it is (anything else in the userinfo is hidden).
_PLAIN_USER = re.compile(r"[A-Za-z0-9._~%!$&*+=-]*")


def _mask_userinfo(userinfo: str) -> str:
    user, sep, _ = userinfo.partition(":")
    if sep and _PLAIN_USER.fullmatch(user):
        return f"{user}:****"
    return "****"


def mask_url(url: str) -> str:
    """The URL with its credentials replaced by '****' (for everything printed).

    The userinfo is taken as everything between '://' and the *last* '@' of the URL, so a
    password holding '/', '@', ':', '?', '#', quotes or any other character is hidden whole (a
    path with an '@' in it is masked too: hiding too much is the safe side). A user name is
    kept when it is plain (`user:****@host`); a lone token is hidden (`****@host`).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:  # no scheme: still never print what may be credentials
        scheme, rest = "", url
    if "@" not in rest:
        return url
    userinfo, _, host = rest.rpartition("@")
    return f"{scheme}{sep}{_mask_userinfo(userinfo)}@{host}"


def mask_secrets(text: str) -> str:
    """Mask credentials of every URL found in a text (dry-run output, logs, errors).

    A URL runs from its scheme to the next whitespace; its userinfo up to the last '@' in it.
    """
    if "://" not in text:
        return text
    out: list[str] = []
    pos = 0
    while True:
        m = _SCHEME.search(text, pos)
        if m is None:
            out.append(text[pos:])
            return "".join(out)
        end = m.end()
        while end < len(text) and not text[end].isspace():
            end += 1
        at = text.rfind("@", m.end(), end)
        if at < 0:
            out.append(text[pos:end])
            pos = end
            continue
        out.append(text[pos : m.end()] + _mask_userinfo(text[m.end() : at]) + "@")
        pos = at + 1


def mask_object(obj: Any) -> Any:
    """A copy of a JSON-like object with URL credentials masked in every string."""
    if isinstance(obj, str):
        return mask_secrets(obj)
    if isinstance(obj, dict):
        return {k: mask_object(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [mask_object(v) for v in obj]
    return obj


@dataclass
class RuntimeConfig:
    """Per-job environment: packages to install, pip index URLs, environment variables, and the
    workspace (None/True: the notebook's folder at submit; a path or a `Workspace`; False: none).
    """

    packages_to_install: list[str] | None = None
    pip_index_urls: list[str] | None = None
    env: dict[str, str | SecretRef] | None = field(default=None)
    workspace: Any = None

    def __post_init__(self) -> None:
        if self.packages_to_install is not None:
            if isinstance(self.packages_to_install, str):
                raise ValidationError(
                    "packages_to_install must be a list of requirements, not one string: write "
                    f"[{self.packages_to_install!r}]."
                )
            self.packages_to_install = [validate_package(p) for p in self.packages_to_install]
        if self.pip_index_urls is not None:
            if isinstance(self.pip_index_urls, str):
                raise ValidationError(
                    "pip_index_urls must be a list of URLs, not one string; wrap it in a list."
                )
            self.pip_index_urls = [validate_index_url(u) for u in self.pip_index_urls]
        if self.env is not None:
            if not isinstance(self.env, dict):
                raise ValidationError("env must be a dict of name -> str or SecretRef.")
            for k, v in self.env.items():
                validate_env_name(k)
                if not isinstance(v, SecretRef):
                    validate_env_value(k, v)
        from .workspace import resolve

        resolve(self.workspace)  # a clear error now rather than at submit

    @property
    def packages(self) -> list[str]:
        """The packages (empty list when none)."""
        return list(self.packages_to_install or [])

    @property
    def index_urls(self) -> list[str]:
        """The pip index URLs (empty list when none)."""
        return list(self.pip_index_urls or [])

    def __repr__(self) -> str:
        env = None
        if self.env is not None:
            env = {k: (v if isinstance(v, SecretRef) else "<set>") for k, v in self.env.items()}
        urls = [mask_url(u) for u in self.pip_index_urls] if self.pip_index_urls else None
        return (
            f"RuntimeConfig(packages_to_install={self.packages_to_install!r}, "
            f"pip_index_urls={urls!r}, env={env!r}"
            + (f", workspace={self.workspace!r})" if self.workspace is not None else ")")
        )

    def to_dict(self) -> dict[str, Any]:
        """A masked, JSON-ready form (for widgets and the server; no secret values)."""
        return {
            "packages_to_install": self.packages,
            "pip_index_urls": [mask_url(u) for u in self.index_urls],
            "env": {
                k: ({"secret": v.name, "key": v.key} if isinstance(v, SecretRef) else v)
                for k, v in (self.env or {}).items()
            },
            "workspace": self.workspace
            if isinstance(self.workspace, bool | None)
            else repr(self.workspace),
        }
