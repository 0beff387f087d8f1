"""TEST STAND-IN for Pod Security admission (the API server's built-in `PodSecurity` plugin).

kube-apiserver 1.20 (the harness's) has no PodSecurity admission, so the harness's validating
webhook (``admission.py``, ``pod-security.harness.kf-jupyter.io``, pods CREATE) plays it: for a
namespace labelled ``pod-security.kubernetes.io/enforce=<level>`` (``-version``: ``latest`` or
absent, any other version is treated as latest) a pod that violates the level is refused with the
real message (``pods "X" is forbidden: violates PodSecurity "restricted:latest": ...``). Written
from kubernetes ``staging/src/k8s.io/pod-security-admission`` (``policy/check_*.go``,
``policy/registry.go``, ``policy/checks.go``, ``admission/admission.go``): the checks a Trainer
pod can meet, in the order the real evaluator runs them. Not played: AppArmor, SELinux, procMount,
sysctls, Windows host process, exemptions; ``warn``/``audit`` labels (not enforcement).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")

#: check_capabilities_baseline.go: what baseline lets a container add.
BASELINE_CAPS = frozenset(
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID "
    "SETPCAP SETUID SYS_CHROOT".split()
)
#: check_restrictedVolumes.go: the volume types restricted allows.
ALLOWED_VOLUMES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret")  # fmt: skip

Result = tuple[str, str]  # (ForbiddenReason, ForbiddenDetail)


def enforced(labels: dict[str, str] | None) -> str | None:
    """``level:version`` the namespace enforces, None for privileged or no label (api/helpers.go
    PolicyToEvaluate: an unknown level is enforced as restricted)."""
    labels = labels or {}
    level = labels.get(ENFORCE)
    if level is None or level == "privileged":
        return None
    if level not in LEVELS:
        level = "restricted"
    version = labels.get(ENFORCE_VERSION) or "latest"
    return f"{level}:{version}"


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """visitor.go visitContainers: init containers, containers, ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(c: dict[str, Any]) -> dict[str, Any]:
    return c.get("securityContext") or {}


def _plural(one: str, many: str, n: int) -> str:
    return one if n == 1 else many


def _quote(items: list[str]) -> str:
    return ", ".join(f'"{i}"' for i in items)


def _who(names: list[str]) -> str:
    return f"{_plural('container', 'containers', len(names))} {_quote(names)}"


# -- baseline ------------------------------------------------------------------------------------
def host_namespaces(spec: dict[str, Any]) -> Result | None:
    found = [f"{k}=true" for k in ("hostIPC", "hostNetwork", "hostPID") if spec.get(k)]
    return ("host namespaces", ", ".join(found)) if found else None


def host_ports(spec: dict[str, Any]) -> Result | None:
    bad, ports = [], set()
    for c in _containers(spec):
        mine = [int(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if mine:
            bad.append(c.get("name", ""))
            ports.update(mine)
    if not bad:
        return None
    listed = ", ".join(str(p) for p in sorted(ports, key=str))
    detail = (f"{_who(bad)} {_plural('uses', 'use', len(bad))} "
              f"{_plural('hostPort', 'hostPorts', len(ports))} {listed}")  # fmt: skip
    return "hostPort", detail


def privileged(spec: dict[str, Any]) -> Result | None:
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("privileged")]
    return (
        ("privileged", f"{_who(bad)} must not set securityContext.privileged=true") if bad else None
    )


def seccomp_baseline(spec: dict[str, Any]) -> Result | None:
    setters = []
    if ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get(
        "type"
    ) == "Unconfined":
        setters.append("pod")
    bad = [c.get("name", "") for c in _containers(spec)
           if (_sc(c).get("seccompProfile") or {}).get("type") == "Unconfined"]  # fmt: skip
    if bad:
        setters.append(_who(bad))
    if not setters:
        return None
    return "seccompProfile", (
        f'{" and ".join(setters)} must not set securityContext.seccompProfile.type to "Unconfined"'
    )


def capabilities_baseline(spec: dict[str, Any]) -> Result | None:
    bad, caps = [], set()
    for c in _containers(spec):
        extra = [a for a in (_sc(c).get("capabilities") or {}).get("add") or []
                 if a not in BASELINE_CAPS]  # fmt: skip
        if extra:
            bad.append(c.get("name", ""))
            caps.update(extra)
    if not bad:
        return None
    detail = (
        f"{_who(bad)} must not include {_quote(sorted(caps))} in securityContext.capabilities.add"
    )
    return "non-default capabilities", detail


def host_path_volumes(spec: dict[str, Any]) -> Result | None:
    bad = [v.get("name", "") for v in spec.get("volumes") or [] if "hostPath" in v]
    if not bad:
        return None
    return "hostPath volumes", f"{_plural('volume', 'volumes', len(bad))} {_quote(bad)}"


# -- restricted ----------------------------------------------------------------------------------
def allow_privilege_escalation(spec: dict[str, Any]) -> Result | None:
    bad = [c.get("name", "") for c in _containers(spec)
           if _sc(c).get("allowPrivilegeEscalation") is not False]  # fmt: skip
    if not bad:
        return None
    detail = f"{_who(bad)} must set securityContext.allowPrivilegeEscalation=false"
    return "allowPrivilegeEscalation != false", detail


def capabilities_restricted(spec: dict[str, Any]) -> Result | None:
    no_drop, adding, caps = [], [], set()
    for c in _containers(spec):
        cap = _sc(c).get("capabilities")
        if cap is None:
            no_drop.append(c.get("name", ""))
            continue
        if "ALL" not in (cap.get("drop") or []):
            no_drop.append(c.get("name", ""))
        extra = [a for a in cap.get("add") or [] if a != "NET_BIND_SERVICE"]
        if extra:
            adding.append(c.get("name", ""))
            caps.update(extra)
    details = []
    if no_drop:
        details.append(f'{_who(no_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(
            f"{_who(adding)} must not include {_quote(sorted(caps))} in "
            "securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def restricted_volumes(spec: dict[str, Any]) -> Result | None:
    details = []
    for v in spec.get("volumes") or []:
        kinds = [k for k in v if k != "name"]
        bad = [k for k in kinds if k not in ALLOWED_VOLUMES]
        if bad:
            details.append(f'volume "{v.get("name", "")}" uses restricted volume type "{bad[0]}"')
    return ("restricted volume types", ", ".join(details)) if details else None


def _pod_or_containers(
    spec: dict[str, Any], key: str, good: Callable[[Any], bool]
) -> tuple[list[str], list[str], bool]:
    """(explicitly bad setters, containers implicitly bad, pod sets a good value)."""
    setters: list[str] = []
    pod_value = (spec.get("securityContext") or {}).get(key)
    pod_good = pod_value is not None and good(pod_value)
    if pod_value is not None and not pod_good:
        setters.append("pod")
    explicit, implicit = [], []
    for c in _containers(spec):
        value = _sc(c).get(key)
        if value is not None:
            if not good(value):
                explicit.append(c.get("name", ""))
        elif not pod_good:
            implicit.append(c.get("name", ""))
    if explicit:
        setters.append(_who(explicit))
    return setters, implicit, pod_good


def run_as_non_root(spec: dict[str, Any]) -> Result | None:
    setters, implicit, _ = _pod_or_containers(spec, "runAsNonRoot", lambda v: v is True)
    if setters:
        return "runAsNonRoot != true", (
            f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false"
        )
    if implicit:
        return "runAsNonRoot != true", (
            f"pod or {_who(implicit)} must set securityContext.runAsNonRoot=true"
        )
    return None


def run_as_user(spec: dict[str, Any]) -> Result | None:
    setters = ["pod"] if (spec.get("securityContext") or {}).get("runAsUser") == 0 else []
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(_who(bad))
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp_restricted(spec: dict[str, Any]) -> Result | None:
    def valid(p: Any) -> bool:
        return isinstance(p, dict) and p.get("type") in ("RuntimeDefault", "Localhost")

    setters, implicit, _ = _pod_or_containers(spec, "seccompProfile", valid)
    if setters:
        values = {str((p or {}).get("type")) for p in [(spec.get("securityContext") or {}).get(
            "seccompProfile")] + [_sc(c).get("seccompProfile") for c in _containers(spec)]
            if p is not None and not valid(p)}  # fmt: skip
        return "seccompProfile", (
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
            f"{_quote(sorted(values))}"
        )
    if implicit:
        return "seccompProfile", (
            f"pod or {_who(implicit)} must set securityContext.seccompProfile.type to "
            '"RuntimeDefault" or "Localhost"'
        )
    return None


# registry.go EvaluatePod: baseline checks (in file order), then for baseline the overlapping
# baseline checks, for restricted the restricted ones (which replace the overlapping ones).
BASELINE = (host_namespaces, host_ports, privileged, seccomp_baseline)
BASELINE_OVERLAP = (capabilities_baseline, host_path_volumes)
RESTRICTED = (allow_privilege_escalation, capabilities_restricted, restricted_volumes,
              run_as_non_root, run_as_user, seccomp_restricted)  # fmt: skip


def violations(spec: dict[str, Any], level: str) -> list[Result]:
    """The failed checks of a pod spec at `level` ("baseline" or "restricted"), in order."""
    checks = BASELINE + (RESTRICTED if level.startswith("restricted") else BASELINE_OVERLAP)
    return [r for r in (check(spec) for check in checks) if r is not None]


def refusal(pod: dict[str, Any], labels: dict[str, str] | None) -> str | None:
    """The API server's message refusing `pod` in a namespace with `labels`, None if admitted
    (admission.go EvaluatePod + forbiddenResponse: apierrors.NewForbidden(pods, name, ...))."""
    policy = enforced(labels)
    if policy is None:
        return None
    found = violations(pod.get("spec") or {}, policy.split(":", 1)[0])
    if not found:
        return None
    detail = ", ".join(f"{r} ({d})" if d else r for r, d in found)
    name = (pod.get("metadata") or {}).get("name", "")
    return f'pods "{name}" is forbidden: violates PodSecurity "{policy}": {detail}'
