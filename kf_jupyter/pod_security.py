"""Pod Security Standards for the pods a TrainJob makes (pure: no I/O).

A namespace labelled `pod-security.kubernetes.io/enforce=restricted` (or `baseline`) makes the
API server refuse every pod that breaks the level; the Job controller then only records a
`FailedCreate` event and the TrainJob stays Created. So the Kubernetes backend checks the pods a
job would make (the runtime's pod templates with the job's runtime patches merged, as the Trainer
merges them) against the namespace's level before it submits, with the same check names and
details the API server prints (kubernetes `staging/src/k8s.io/pod-security-admission/policy`), and
the `PodSecurity` option sets what `restricted` asks on every container of every replicated job.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")
#: The user id `PodSecurity` runs as when none is given (the Trainer's MPI images' `mpiuser`).
DEFAULT_USER = 1000

#: What `restricted` asks of every container (allowPrivilegeEscalation, capabilities checks).
RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}

_BASELINE_CAPS = frozenset(
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID "
    "SETPCAP SETUID SYS_CHROOT".split()
)
_RESTRICTED_VOLUMES = frozenset(
    "configMap csi downwardAPI emptyDir ephemeral persistentVolumeClaim projected secret".split()
)


def restricted_pod(run_as_user: int = DEFAULT_USER) -> dict[str, Any]:
    """The pod-level securityContext fields `restricted` asks (runAsNonRoot, seccompProfile)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def enforced_level(labels: Mapping[str, str] | None) -> tuple[str, str] | None:
    """(level, version) a namespace's labels enforce; None for none or `privileged`. An unknown
    level is enforced as `restricted`, as the API server does."""
    level = (labels or {}).get(ENFORCE_LABEL)
    if level is None or level == "privileged":
        return None
    if level not in LEVELS:
        level = "restricted"
    return level, (labels or {}).get(ENFORCE_VERSION_LABEL) or "latest"


def _containers(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(key) or []


def _names(items: list[str]) -> str:
    return ", ".join(f'"{n}"' for n in items)


def _who(items: list[str]) -> str:
    return f"{'container' if len(items) == 1 else 'containers'} {_names(items)}"


def _bad(pod: Mapping[str, Any], test: Any) -> list[str]:
    return [
        str(c.get("name", "")) for c in _containers(pod) if test(c.get("securityContext") or {})
    ]


def _added(pod: Mapping[str, Any], allowed: Any) -> list[str]:
    """The capabilities the pod's containers add beyond `allowed`, sorted."""
    added = {
        str(a)
        for c in _containers(pod)
        for a in ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
    }
    return sorted(added - set(allowed))


def _pod_level(pod: Mapping[str, Any], key: str, ok: Any) -> tuple[list[str], list[str]]:
    """(who set a bad value, containers left unset with no good pod value)."""
    value = (pod.get("securityContext") or {}).get(key)
    setters = ["pod"] if value is not None and not ok(value) else []
    explicit = _bad(pod, lambda sc: sc.get(key) is not None and not ok(sc[key]))
    if explicit:
        setters.append(_who(explicit))
    pod_ok = value is not None and ok(value)
    unset = [] if pod_ok else _bad(pod, lambda sc: sc.get(key) is None)
    return setters, unset


def violations(pod: Mapping[str, Any], level: str) -> list[str]:
    """`reason (detail)` for each check of `level` the pod spec fails, in the API server's
    order (registry.go: baseline checks, then restricted's or baseline's overlapping ones)."""
    out: list[str] = []
    hosts = [f"{k}=true" for k in ("hostIPC", "hostNetwork", "hostPID") if pod.get(k)]
    if hosts:
        out.append(f"host namespaces ({', '.join(hosts)})")
    ports = [
        str(c.get("name", ""))
        for c in _containers(pod)
        if any(p.get("hostPort") for p in c.get("ports") or [])
    ]
    if ports:
        numbers = sorted(
            {str(p["hostPort"]) for c in _containers(pod) for p in c.get("ports") or []
             if p.get("hostPort")}
        )  # fmt: skip
        noun = "hostPort" if len(numbers) == 1 else "hostPorts"
        out.append(
            f"hostPort ({_who(ports)} {'uses' if len(ports) == 1 else 'use'} {noun} "
            f"{', '.join(numbers)})"
        )
    priv = _bad(pod, lambda sc: sc.get("privileged") is True)
    if priv:
        out.append(f"privileged ({_who(priv)} must not set securityContext.privileged=true)")
    unconfined, _ = _pod_level(pod, "seccompProfile", lambda v: v.get("type") != "Unconfined")
    if unconfined:
        out.append(
            f"seccompProfile ({' and '.join(unconfined)} must not set "
            'securityContext.seccompProfile.type to "Unconfined")'
        )
    if level != "restricted":
        caps = _bad(pod, lambda sc: set((sc.get("capabilities") or {}).get("add") or [])
                    - _BASELINE_CAPS)  # fmt: skip
        if caps:
            extra = _added(pod, _BASELINE_CAPS)
            out.append(
                f"non-default capabilities ({_who(caps)} must not include {_names(extra)} in "
                "securityContext.capabilities.add)"
            )
        host_path = [str(v.get("name", "")) for v in pod.get("volumes") or [] if "hostPath" in v]
        if host_path:
            noun = "volume" if len(host_path) == 1 else "volumes"
            out.append(f"hostPath volumes ({noun} {_names(host_path)})")
        return out
    escalation = _bad(pod, lambda sc: sc.get("allowPrivilegeEscalation") is not False)
    if escalation:
        out.append(
            f"allowPrivilegeEscalation != false ({_who(escalation)} must set "
            "securityContext.allowPrivilegeEscalation=false)"
        )
    no_drop = _bad(pod, lambda sc: "ALL" not in (sc.get("capabilities") or {}).get("drop", []))
    adds = _bad(pod, lambda sc: set((sc.get("capabilities") or {}).get("add") or [])
                - {"NET_BIND_SERVICE"})  # fmt: skip
    details = []
    if no_drop:
        details.append(f'{_who(no_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adds:
        details.append(
            f"{_who(adds)} must not include {_names(_added(pod, {'NET_BIND_SERVICE'}))} in "
            "securityContext.capabilities.add"
        )
    if details:
        out.append(f"unrestricted capabilities ({'; '.join(details)})")
    volumes = [
        f'volume "{v.get("name", "")}" uses restricted volume type "{kind}"'
        for v in pod.get("volumes") or []
        for kind in [next((k for k in v if k != "name" and k not in _RESTRICTED_VOLUMES), None)]
        if kind
    ]
    if volumes:
        out.append(f"restricted volume types ({', '.join(volumes)})")
    setters, unset = _pod_level(pod, "runAsNonRoot", lambda v: v is True)
    if setters:
        out.append(
            f"runAsNonRoot != true ({' and '.join(setters)} must not set "
            "securityContext.runAsNonRoot=false)"
        )
    elif unset:
        out.append(
            f"runAsNonRoot != true (pod or {_who(unset)} must set "
            "securityContext.runAsNonRoot=true)"
        )
    root, _ = _pod_level(pod, "runAsUser", lambda v: v != 0)
    if root:
        out.append(f"runAsUser=0 ({' and '.join(root)} must not set runAsUser=0)")
    setters, unset = _pod_level(
        pod, "seccompProfile", lambda v: v.get("type") in ("RuntimeDefault", "Localhost")
    )
    if setters:
        bad = sorted(
            {
                str(p.get("type"))
                for p in [(pod.get("securityContext") or {}).get("seccompProfile")]
                + [(c.get("securityContext") or {}).get("seccompProfile") for c in _containers(pod)]
                if p is not None and p.get("type") not in ("RuntimeDefault", "Localhost")
            }
        )
        out.append(
            f"seccompProfile ({' and '.join(setters)} must not set "
            f"securityContext.seccompProfile.type to {_names(bad)})"
        )
    elif unset:
        out.append(
            f"seccompProfile (pod or {_who(unset)} must set securityContext.seccompProfile."
            'type to "RuntimeDefault" or "Localhost")'
        )
    return out


def _merge(a: Any, b: Any) -> Any:
    """Merge patch `b` into `a` as the Trainer merges runtime patches: maps key by key, lists of
    named items by name, other values replaced."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = dict(a)
        for k, v in b.items():
            out[k] = _merge(out[k], v) if k in out else copy.deepcopy(v)
        return out
    if (
        isinstance(a, list)
        and isinstance(b, list)
        and all(isinstance(x, Mapping) and "name" in x for x in a + b)
    ):
        merged = [copy.deepcopy(x) for x in a]
        for item in b:
            i = next((j for j, x in enumerate(merged) if x["name"] == item["name"]), None)
            if i is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[i] = _merge(merged[i], item)
        return merged
    return copy.deepcopy(b)


def job_pods(job: Mapping[str, Any], runtime: Any) -> dict[str, dict[str, Any]]:
    """The pod spec of each replicated job the Trainer would create for `job` on `runtime` (the
    runtime's template with the job's runtime patches merged, in order)."""
    pods = {rj.name: dict(rj.pod) for rj in runtime.replicated_jobs or ()}
    for patch in (job.get("spec") or {}).get("runtimePatches") or []:
        tmpl = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
        for rj in tmpl.get("replicatedJobs") or []:
            spec = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get(
                "spec"
            )
            if rj.get("name") in pods and spec:
                pods[rj["name"]] = _merge(pods[rj["name"]], spec)
    return pods


def restricted_patch(
    containers: list[str], init_containers: list[str], run_as_user: int = DEFAULT_USER
) -> dict[str, Any]:
    """The pod spec patch that makes a pod with these containers pass `restricted` (unless its
    runtime sets what no patch can take back: privileged, host namespaces, hostPath, ...)."""
    patch: dict[str, Any] = {"securityContext": restricted_pod(run_as_user)}
    for key, names in (("initContainers", init_containers), ("containers", containers)):
        if names:
            patch[key] = [
                {"name": n, "securityContext": copy.deepcopy(RESTRICTED_CONTAINER)} for n in names
            ]
    return patch


def _with_option(pod: Mapping[str, Any]) -> dict[str, Any]:
    inits = [str(c.get("name", "")) for c in pod.get("initContainers") or []]
    mains = [str(c.get("name", "")) for c in pod.get("containers") or []]
    return dict(_merge(pod, restricted_patch(mains, inits)))


def refusal(
    job: Mapping[str, Any], runtime: Any, labels: Mapping[str, str] | None, namespace: str
) -> str | None:
    """One paragraph saying why the namespace's Pod Security level would refuse the job's pods
    (and what to do), None when they pass or nothing is enforced."""
    enforced = enforced_level(labels)
    if enforced is None:
        return None
    level, version = enforced
    pods = job_pods(job, runtime)
    found = {name: v for name, pod in pods.items() if (v := violations(pod, level))}
    if not found:
        return None
    listed = "; ".join(f"replicated job {name!r}: {', '.join(v)}" for name, v in found.items())
    head = (
        f"Namespace {namespace!r} enforces Pod Security {level!r} (label {ENFORCE_LABEL}="
        f"{level}, version {version}), and the pods of this job break it, so the API server "
        f"would refuse every one of them and the job would stay Created: {listed}. "
    )
    option = "PodSecurity('restricted')" if level == "restricted" else ""
    left = [name for name, pod in pods.items() if violations(_with_option(pod), level)]
    if option and not left:
        return head + (
            f"Add the {option} option: it sets allowPrivilegeEscalation=false, capabilities "
            "drop ALL, runAsNonRoot with a non-root runAsUser and the RuntimeDefault seccomp "
            "profile on every container of every replicated job. Or submit to a namespace "
            "without that label."
        )
    return head + (
        f"{'Besides the ' + option + ' option, remove' if option else 'Remove'} what the "
        "runtime or your runtime patches set that the level forbids (privileged containers, "
        "host namespaces or ports, hostPath or other restricted volumes, added capabilities, "
        "runAsUser=0), or submit to a namespace without that label."
    )
