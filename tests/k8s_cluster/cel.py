"""The CRDs' ``x-kubernetes-validations`` (CEL) rules, evaluated as a kube-apiserver >= 1.25 does.

kube-apiserver 1.20 (the harness's) ignores them, so the admission webhook (``admission.py``)
calls ``cel_errors``. Each rule runs at its schema location with ``self`` bound to the value
there; a transition rule (one that names ``oldSelf``) runs only on an update and only where an old
value correlates: object properties and map keys by name, ``x-kubernetes-list-type: map`` items
by their keys (other list items never correlate), as apiextensions-apiserver's
``pkg/apiserver/schema/cel`` does. The CEL implementation is ``cel-python`` (``celpy``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

_PROGRAMS: dict[str, Any] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class CelError:
    """One failed rule: where (``spec.managedBy``), the schema type and the rule's message."""

    field: str
    type: str
    message: str

    def __str__(self) -> str:
        return f'{self.field or "<nil>"}: Invalid value: "{self.type}": {self.message}'


def _program(rule: str) -> Any:
    with _LOCK:
        prg = _PROGRAMS.get(rule)
        if prg is None:
            import celpy

            env = celpy.Environment()
            prg = _PROGRAMS[rule] = env.program(env.compile(rule))
        return prg


def _evaluate(rule: str, value: Any, old: Any, has_old: bool) -> bool:
    from celpy import json_to_cel

    activation = {"self": json_to_cel(value)}
    if has_old:
        activation["oldSelf"] = json_to_cel(old)
    result = _program(rule).evaluate(activation)
    if isinstance(result, Exception):
        raise result
    return bool(result)


def _type_name(schema: dict[str, Any]) -> str:
    t = schema.get("type")
    if t:
        return str(t)
    return "object" if "properties" in schema or "additionalProperties" in schema else "any"


def cel_errors(schema: dict[str, Any], new: Any, old: Any = None) -> list[CelError]:
    """Every failing rule of `schema` for object `new` (an update when `old` is given)."""
    out: list[CelError] = []
    _walk(schema, new, old, old is not None, "", out)
    return out


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _walk(
    schema: dict[str, Any], new: Any, old: Any, has_old: bool, path: str, out: list[CelError]
) -> None:
    if not isinstance(schema, dict) or new is None:
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        text = rule["rule"]
        transition = "oldSelf" in text
        if transition and not has_old:
            continue
        try:
            ok = _evaluate(text, new, old, transition)
        except Exception as e:  # an evaluation error refuses the object, as on a cluster
            out.append(CelError(path, _type_name(schema), f"{rule.get('message', text)} ({e})"))
            continue
        if not ok:
            msg = rule.get("message") or f"failed rule: {text}"
            out.append(CelError(path, _type_name(schema), msg))
    if isinstance(new, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, value in new.items():
            sub = props.get(key)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None:
                continue
            o_has = has_old and isinstance(old, dict) and key in old
            _walk(sub, value, old.get(key) if o_has else None, o_has, _join(path, key), out)
    elif isinstance(new, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        keys = schema.get("x-kubernetes-list-map-keys") or []
        by_key: dict[tuple[Any, ...], Any] = {}
        if has_old and schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
            for o in old:
                if isinstance(o, dict):
                    by_key[tuple(o.get(k) for k in keys)] = o
        for i, value in enumerate(new):
            k = tuple(value.get(k) for k in keys) if isinstance(value, dict) else None
            o_has = k is not None and k in by_key
            _walk(items, value, by_key.get(k) if o_has else None, o_has, f"{path}[{i}]", out)
