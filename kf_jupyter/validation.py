"""Rules for names, env vars and resources; each failure is a ValidationError that names the rule."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import ValidationError

_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_QUANTITY = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/:@]*$")

#: Friendly resource keys and the Kubernetes resource names they stand for.
RESOURCE_ALIASES = {
    "cpu": "cpu",
    "memory": "memory",
    "storage": "ephemeral-storage",
    "ephemeral-storage": "ephemeral-storage",
    "gpu": "nvidia.com/gpu",
}


def validate_job_name(name: str) -> str:
    """Check a TrainJob name: an RFC 1035 label of at most 63 characters."""
    if not isinstance(name, str) or len(name) > 63 or not _RFC1035.fullmatch(name):
        raise ValidationError(
            f"Invalid job name {name!r}: a job name must be an RFC 1035 label — at most 63 "
            "characters, lower-case letters, digits and '-', starting with a letter and ending "
            "with a letter or digit (for example 'mnist-ddp-1'). Pick a name that follows it."
        )
    return name


def validate_env_name(name: str) -> str:
    """Check an environment variable name (a C identifier)."""
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise ValidationError(
            f"Invalid environment variable name {name!r}: names must start with a letter or '_' "
            "and hold only letters, digits and '_'. Rename the variable."
        )
    return name


def validate_env_value(name: str, value: str) -> str:
    """Check an environment variable value (a string without NUL bytes)."""
    if not isinstance(value, str):
        raise ValidationError(
            f"Environment variable {name} has a {type(value).__name__} value; env values must "
            "be strings (or a SecretRef). Convert it with str()."
        )
    if "\x00" in value:
        raise ValidationError(
            f"Environment variable {name} contains a NUL byte, which no process environment "
            "can hold. Remove it."
        )
    return value


def _label_key_problem(key: object) -> str | None:
    """Say what is wrong with a label/annotation key (Kubernetes qualified name), or None."""
    if not isinstance(key, str):
        return f"it is a {type(key).__name__}, not a string"
    prefix, slash, name = key.partition("/")
    if not slash:
        prefix, name = "", key
    if "/" in name:
        return "it holds more than one '/'"
    if slash:
        if not prefix:
            return "the prefix before '/' is empty (leave out the '/' or put a domain before it)"
        if len(prefix) > 253:
            return f"the prefix before '/' has {len(prefix)} characters (at most 253)"
        if _DNS_SUBDOMAIN.fullmatch(prefix) is None:
            return (
                f"the prefix {prefix!r} is not a DNS-1123 subdomain (lower-case letters, digits, "
                "'-' and '.', each dot-separated part starting and ending with a letter or digit)"
            )
    if not name:
        return "the name part is empty"
    if len(name) > 63:
        return f"the name part has {len(name)} characters (at most 63)"
    if _LABEL_NAME.fullmatch(name) is None:
        return (
            f"the name part {name!r} may hold only letters, digits, '-', '_' and '.', and must "
            "start and end with a letter or digit"
        )
    return None


def validate_label_key(key: str) -> str:
    """Check a label or annotation key: a Kubernetes qualified name, `[prefix/]name`."""
    problem = _label_key_problem(key)
    if problem is not None:
        raise ValidationError(
            f"Invalid label or annotation key {key!r}: {problem}. A key is a name of at most 63 "
            "characters of letters, digits, '-', '_' and '.', starting and ending with a letter "
            "or digit, optionally preceded by a DNS-1123 subdomain prefix of at most 253 "
            "characters and '/' (for example 'team' or 'example.com/team'). Rename the key."
        )
    return key


def validate_label_value(key: str, value: str) -> str:
    """Check a label value (≤ 63 characters of the label alphabet, may be empty)."""
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise ValidationError(
            f"Invalid value {value!r} for label {key!r}: a label value has at most 63 "
            "characters of letters, digits, '-', '_' and '.', starting and ending with a letter "
            "or digit. Put free text in an annotation instead."
        )
    return value


def validate_annotation_value(key: str, value: str) -> str:
    """Check an annotation value (any string)."""
    if not isinstance(value, str):
        raise ValidationError(
            f"Annotation {key!r} has a {type(value).__name__} value; annotation values must be "
            "strings. Convert it with str() or json.dumps()."
        )
    return value


def validate_image(image: str) -> str:
    """Check a container image reference (no spaces or shell characters)."""
    if not isinstance(image, str) or len(image) > 500 or not _IMAGE.fullmatch(image):
        raise ValidationError(
            f"Invalid container image {image!r}: an image reference is like "
            "'registry.example.com/team/trainer:1.0' or 'name@sha256:...', without spaces or "
            "shell characters, at most 500 characters."
        )
    return image


def validate_positive(what: str, value: Any) -> int:
    """Check a count that must be a whole number ≥ 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(
            f"{what} must be a whole number of at least 1, got {value!r}. Set it to 1 or more."
        )
    return value


_UNIT_SPELLINGS = {
    "kb": ("k", "Ki"), "mb": ("M", "Mi"), "gb": ("G", "Gi"), "tb": ("T", "Ti"),
    "kib": ("Ki",), "mib": ("Mi",), "gib": ("Gi",), "tib": ("Ti",),
    "k": ("k", "Ki"), "g": ("G", "Gi"), "t": ("T", "Ti"),
    "ki": ("Ki",), "mi": ("Mi",), "gi": ("Gi",), "ti": ("Ti",),
}  # fmt: skip


def _quantity_hint(raw: Any) -> str:
    """` Did you mean '2G' (10^9 bytes) or '2Gi' (2^30)?` for a size written the usual way."""
    if not isinstance(raw, str):
        return ""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", raw)
    if m is None:
        return ""
    number, unit = m.groups()
    options = [f"{number}{u}" for u in _UNIT_SPELLINGS.get(unit.lower(), (unit,))]
    options = [o for o in options if _QUANTITY.fullmatch(o) and o != raw]
    if not options:
        return ""
    if len(options) == 2:
        return (
            f" Did you mean {options[0]!r} (powers of 1000) or {options[1]!r} "
            "(powers of 1024, what memory is usually given in)?"
        )
    return f" Did you mean {options[0]!r}?"


def normalize_resources(resources: Mapping[str, Any] | None) -> dict[str, str]:
    """Turn `resources_per_node` into Kubernetes resource names and quantity strings."""
    if not resources:
        return {}
    out: dict[str, str] = {}
    mig = []
    for key, raw in resources.items():
        if not isinstance(key, str):
            raise ValidationError(f"Resource keys must be strings, got {key!r}.")
        if key in RESOURCE_ALIASES:
            name = RESOURCE_ALIASES[key]
        elif key.startswith("mig-") and len(key) > 4:
            name = f"nvidia.com/{key}"
            mig.append(key)
        elif "/" in key and _DNS_SUBDOMAIN.fullmatch(key.split("/", 1)[0]):
            name = key
            if key.startswith("nvidia.com/mig-"):
                mig.append(key)
        else:
            raise ValidationError(
                f"Unknown resource {key!r} in resources_per_node: use cpu, memory, gpu, storage, "
                "mig-<profile> (for example mig-1g.5gb) or a full Kubernetes resource name such "
                "as 'amd.com/gpu'."
            )
        value = str(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else raw
        if not isinstance(value, str) or not _QUANTITY.fullmatch(value):
            raise ValidationError(
                f"Invalid quantity {raw!r} for resource {key!r}: use a Kubernetes quantity such "
                f"as 2, 500m, 4Gi or 1.5, without spaces.{_quantity_hint(raw)}"
            )
        out[name] = value
    if mig and "nvidia.com/gpu" in out:
        raise ValidationError(
            "resources_per_node asks for both whole GPUs ('gpu') and MIG slices "
            f"({', '.join(mig)}); a node gets one or the other. Drop one of them."
        )
    return out
