"""One exception hierarchy; every message is one paragraph saying what is wrong and what to do."""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """` Did you mean 'torch-distributed'?` for the closest of `choices`, else ``."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


class KFJupyterError(Exception):
    """Base class of every error kf-jupyter raises on purpose."""


class ValidationError(KFJupyterError, ValueError):
    """Input that breaks a rule (a name, a resource, an env var, an argument)."""


class OptionError(ValidationError):
    """An option that contradicts another option, the trainer or the backend."""


class RuntimeNotFoundError(KFJupyterError, LookupError):
    """No training runtime matches the request."""


class AmbiguousRuntimeError(KFJupyterError):
    """Several runtimes fit and nothing says which one to take."""


class RuntimeMismatchError(ValidationError):
    """A runtime was named explicitly but does not fit the trainer."""


class JobNotFoundError(KFJupyterError, LookupError):
    """No job of that name exists on the backend."""


class JobFailedError(KFJupyterError):
    """The job ended Failed while the caller waited for another status."""


class WaitTimeoutError(KFJupyterError, TimeoutError):
    """wait_for_job_status ran out of time before the job reached the wanted status."""


class BackendError(KFJupyterError):
    """The backend could not do what was asked (cluster unreachable, forbidden, ...)."""


class ClusterUnreachableError(BackendError):
    """The Kubernetes API server cannot be reached."""


class ForbiddenError(BackendError):
    """The API server refused a request (401/403)."""


class NamespaceNotFoundError(BackendError):
    """The namespace does not exist."""


class TrainerNotInstalledError(BackendError):
    """The Kubeflow Trainer CRDs are not installed on the cluster."""


class JobRejectedError(BackendError):
    """The API server rejected the TrainJob; the message carries its field errors."""


class PackageInstallError(BackendError):
    """Installing the RuntimeConfig's packages failed."""


class JobStateError(BackendError):
    """The job is not in a state that allows this (suspend a finished job, resume a queued one)."""
