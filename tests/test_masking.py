"""Index-URL credentials are masked whatever characters they hold (issue 13, item 6).

A password may hold '/', '@', ':', '?', '#', quotes, '%' and any other character a URL can carry;
whatever the URL validator accepts is hidden whole in job.json, plan.json and every dry run (local
plan, TrainJob manifest), and whatever it refuses is hidden in the error. The password is framed
by two markers found nowhere else, so a part of it left visible is caught too.
"""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kf_jupyter import MPITrainer, RuntimeConfig, TorchTrainer, ValidationError
from kf_jupyter.backends.local.backend import LocalBackend
from kf_jupyter.backends.local.config import LocalBackendConfig
from kf_jupyter.build import build_launch_plan, build_trainjob
from kf_jupyter.config import mask_object, mask_secrets, mask_url
from kf_jupyter.runtimes import Runtime

HEAD, TAIL = "Qm8v", "Jt4w"

#: Every character a URL can hold (RFC 3986 unreserved, gen-delims, sub-delims, '%'), the ones
#: people paste anyway (quotes, backslash, braces, '^', '|', '`', '<', '>') and non-ASCII.
URL_CHARS = string.ascii_letters + string.digits + "-._~:/?#[]@!$&'()*+,;=%\"\\{}^|`<>" + "éß€"
#: ... and a space, which the validator refuses: its error must not show the password either.
URL_CHARS += " "
passwords = st.text(alphabet=URL_CHARS, min_size=0, max_size=24)


def train() -> None:
    pass


def _leaked(blob: str) -> bool:
    return HEAD in blob or TAIL in blob


def _url(kind: str, pw: str) -> str:
    secret = f"{HEAD}{pw}{TAIL}"
    if kind == "token":  # a token holds no ':' (before a ':' is a user name, shown)
        return f"https://{secret.replace(':', '')}@pypi.example.com/simple"
    if kind == "port":
        return f"https://bob:{secret}@pypi.example.com:8443/simple"
    return f"https://bob:{secret}@pypi.example.com/simple"


@pytest.mark.reliability(
    scenario="index-URL passwords with any URL character ('/', '@', ':', '#', quotes, ...): "
    "masked whole in job.json, plan.json, both dry runs and RuntimeConfig's repr, or refused "
    "with an error that does not show them",
    area="hostile",
)
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(pw=passwords, kind=st.sampled_from(["user", "token", "port"]), mpi=st.booleans())
def test_any_password_is_masked_everywhere(pw: str, kind: str, mpi: bool, tmp_path_factory) -> None:
    url = _url(kind, pw)
    try:
        rc = RuntimeConfig(packages_to_install=["numpy"], pip_index_urls=[url])
    except ValidationError as exc:
        assert not _leaked(str(exc)), str(exc)
        return
    assert not _leaked(repr(rc)) and not _leaked(json.dumps(rc.to_dict(), ensure_ascii=False))
    assert not _leaked(mask_url(url)) and not _leaked(mask_secrets(f"pip: {url}, again {url}"))
    trainer = MPITrainer(func=train) if mpi else TorchTrainer(func=train)
    rt = Runtime(
        name="rt", framework="mpi" if mpi else "torch", ml_policy="mpi" if mpi else "torch"
    )
    manifest = build_trainjob(trainer, rt, rc)
    plan = build_launch_plan(manifest, trainer, rt, 29500, "/tmp/kfj-job")
    # job.json and plan.json are written as exactly these masked objects.
    for obj in (manifest, plan.to_dict()):
        text = json.dumps(mask_object(obj), ensure_ascii=False)
        assert not _leaked(text), text[:400]
    # The real URL is still what the job gets (in its environment, not its command).
    assert url in [e.get("value") for e in manifest["spec"]["trainer"]["env"]]
    state = tmp_path_factory.mktemp("state")
    dry = LocalBackend(LocalBackendConfig(state_dir=state)).dry_run(trainer, None, rc)
    assert not _leaked(json.dumps(dry, ensure_ascii=False))


@pytest.mark.parametrize(
    "url",
    [
        "https://bob:a/b@c@pypi.example.com/simple",
        "https://bob:q?x#y@pypi.example.com/simple",
        'https://bob:it\'s"q"@pypi.example.com/simple',
        "https://to/ken@pypi.example.com/simple",
    ],
)
def test_masked_url_keeps_user_and_host(url: str) -> None:
    masked = mask_url(url)
    assert masked.endswith("@pypi.example.com/simple")
    assert masked.startswith("https://bob:****@") or masked.startswith("https://****@")
