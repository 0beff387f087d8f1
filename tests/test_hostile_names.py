"""Hostile names and values: job names, labels, annotations, env, packages, index URLs, images,
runtime names. Invalid ones are refused with the rule they break; valid ones arrive exactly in
the manifest; nothing reaches a shell unquoted (the generated script runs under bash with a
stand-in `python3`, and a canary file a `$(touch ...)`, backtick or `;` payload would create
never appears); a sample runs as a real local job whose processes see the env exactly as given.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from kf_jupyter import MPITrainer, RuntimeConfig, TorchTrainer, ValidationError, program
from kf_jupyter.build import build_trainjob
from kf_jupyter.options import Annotations, Labels, Name
from kf_jupyter.policies import get_policy
from kf_jupyter.policies.base import Payload
from kf_jupyter.runtimes import Runtime

CANARY = "/tmp/kfj-hostile-canary"
PAYLOADS = [f"$(touch {CANARY})", f"`touch {CANARY}`", f"; touch {CANARY}", f"' ; touch {CANARY} ; '",
            f'" ; touch {CANARY} ; "', f"\\'$(touch {CANARY})", f"&& touch {CANARY}",
            f"| touch {CANARY}", f"\n touch {CANARY}\n", "${IFS}", "$HOME", "EOM", "%s%n"]  # fmt: skip
hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="$`;|&<>(){}'\"\\ \n\t=-_./:@abcXYZ019", max_size=40),
    st.sampled_from(PAYLOADS),
    st.builds(lambda a, p, b: a + p + b, st.text(max_size=8), st.sampled_from(PAYLOADS),
              st.text(max_size=8)),
)  # fmt: skip
RUNTIME = Runtime(name="torch-distributed", framework="torch", ml_policy="torch")
MANY = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


def train() -> None:
    """A stand-in training function (never runs here)."""
    print("hi")


@pytest.fixture(autouse=True)
def _no_canary() -> Any:
    Path(CANARY).unlink(missing_ok=True)
    yield
    assert not Path(CANARY).exists(), "a payload reached a shell unquoted"


# -- rules, checked against independent re-statements -------------------------------------------

_RFC1035 = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _key_ok(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    return bool(_LABEL_NAME.fullmatch(name)) and (
        not slash or (len(prefix) <= 253 and bool(_DNS1123.fullmatch(prefix)))
    )


names = st.one_of(hostile_text, st.from_regex(_RFC1035, fullmatch=True))


@pytest.mark.reliability(
    scenario="job names: invalid ones refused naming RFC 1035; valid ones land exactly in "
    "metadata.name",
    area="hostile",
)
@MANY
@given(name=names)
def test_job_names(name: str) -> None:
    valid = bool(_RFC1035.fullmatch(name))
    try:
        job = build_trainjob(TorchTrainer(func=train), RUNTIME, options=[Name(name)])
    except ValidationError as exc:
        assert not valid, f"{name!r} is valid but was refused: {exc}"
        assert "RFC 1035" in str(exc)
        return
    assert valid, f"{name!r} was accepted"
    assert job["metadata"]["name"] == name


label_keys = st.one_of(hostile_text, st.from_regex(_LABEL_NAME, fullmatch=True),
                       st.builds(lambda p, n: f"{p}/{n}", st.from_regex(_DNS1123, fullmatch=True),
                                 st.from_regex(_LABEL_NAME, fullmatch=True)))  # fmt: skip
label_values = st.one_of(hostile_text, st.from_regex(_LABEL_VALUE, fullmatch=True))


@pytest.mark.reliability(
    scenario="labels and annotations: invalid keys/values refused with the rule; valid ones "
    "(annotations: any text) land exactly in metadata",
    area="hostile",
)
@MANY
@given(key=label_keys, value=label_values, note=hostile_text)
@example(key="/0", value="v", note="n")
@example(key="a//b", value="v", note="n")
def test_labels_and_annotations(key: str, value: str, note: str) -> None:
    key_ok, value_ok = _key_ok(key), bool(_LABEL_VALUE.fullmatch(value))
    try:
        labels = Labels({key: value})
    except ValidationError as exc:
        assert not (key_ok and value_ok), f"{key!r}={value!r} refused: {exc}"
        assert "label" in str(exc).lower() and "63" in str(exc)
        labels = None
    else:
        assert key_ok and value_ok, f"{key!r}={value!r} accepted"
    try:
        notes = Annotations({key: note})
    except ValidationError as exc:
        assert not key_ok and "key" in str(exc)
        notes = None
    opts = [o for o in (labels, notes) if o is not None]
    meta = build_trainjob(TorchTrainer(func=train), RUNTIME, options=opts)["metadata"]
    if labels:
        assert meta["labels"][key] == value
    if notes:
        assert meta["annotations"][key] == note


BAD_KEYS = {
    "/0": "prefix before '/' is empty",
    "/": "prefix before '/' is empty",
    "example.com/": "name part is empty",
    "a/b/c": "more than one '/'",
    "Example.com/team": "not a DNS-1123 subdomain",
    "example..com/team": "not a DNS-1123 subdomain",
    "-team": "must start and end",
    "team.": "must start and end",
    "x" * 64: "64 characters (at most 63)",
    "a" * 254 + "/team": "254 characters (at most 253)",
    "team\n": "may hold only",
}


@pytest.mark.parametrize("key", list(BAD_KEYS), ids=lambda k: repr(k)[:30])
def test_invalid_label_keys_are_refused_saying_why(key: str) -> None:
    """Kubernetes refuses these keys; so do Labels, Annotations and the node-selector form."""
    for option in (Labels, Annotations):
        with pytest.raises(ValidationError) as info:
            option({key: "v"})
        text = str(info.value)
        assert BAD_KEYS[key] in text, text
        assert "Rename the key" in text and "example.com/team" in text


@pytest.mark.parametrize(
    "key", ["team", "a", "example.com/team", "a.b-c/X_y.z-9", "a" * 253 + "/" + "b" * 63]
)
def test_valid_label_keys_land_in_metadata(key: str) -> None:
    meta = build_trainjob(
        TorchTrainer(func=train), RUNTIME, options=[Labels({key: "v"}), Annotations({key: "n"})]
    )["metadata"]
    assert meta["labels"][key] == "v" and meta["annotations"][key] == "n"


env_names = st.one_of(hostile_text, st.from_regex(_ENV, fullmatch=True))


@pytest.mark.reliability(
    scenario="env names/values: invalid names (and NUL in values, reserved names) refused; "
    "valid ones land exactly in spec.trainer.env and the local launch plan",
    area="hostile",
)
@MANY
@given(name=env_names, value=hostile_text)
def test_env_names_and_values(name: str, value: str) -> None:
    from kf_jupyter.build import build_launch_plan

    try:
        rc = RuntimeConfig(env={name: value})
        job = build_trainjob(TorchTrainer(func=train), RUNTIME, rc)
    except ValidationError as exc:
        reserved = name.startswith("PET_") or name.startswith("KF_JUPYTER_")
        assert not _ENV.fullmatch(name) or "\x00" in value or reserved, exc
        assert "environment variable" in str(exc).lower() or "Environment" in str(exc)
        return
    assert _ENV.fullmatch(name) and "\x00" not in value
    assert {"name": name, "value": value} in job["spec"]["trainer"]["env"]
    plan = build_launch_plan(job, TorchTrainer(func=train), RUNTIME, 29500, "/tmp/x")
    assert all(p.env[name] == value for p in plan.processes)
    # the env travels in the process environment, never in the command line
    assert all(p.argv == job["spec"]["trainer"]["command"] for p in plan.processes)


@pytest.mark.reliability(
    scenario="image and runtime names: invalid images refused with the rule, valid ones land "
    "exactly in spec.trainer.image; any runtime name lands verbatim in runtimeRef (no shell)",
    area="hostile",
)
@MANY
@given(image=st.one_of(hostile_text, st.from_regex(r"[a-z0-9][a-z0-9./:@_-]{0,60}", fullmatch=True)),
       runtime=hostile_text)  # fmt: skip
def test_images_and_runtime_names(image: str, runtime: str) -> None:
    ok = bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._\-/:@]*", image)) and len(image) <= 500
    try:
        trainer = TorchTrainer(func=train, image=image)
    except ValidationError as exc:
        assert not ok and "image" in str(exc)
        return
    assert ok
    rt = Runtime(name=runtime or "x", framework="torch", ml_policy="torch")
    job = build_trainjob(trainer, rt)
    assert job["spec"]["trainer"]["image"] == image
    assert job["spec"]["runtimeRef"]["name"] == (runtime or "x")


# -- the generated bash script, run for real ------------------------------------------------------

STUB = """#!/bin/bash
# stand-in python3: records its argv (NUL-separated) and succeeds
for a in "$@"; do printf '%s\\0' "$a"; done >> "$KFJ_RECORD"
# and the index URLs pip would read from its environment
for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL; do
  if [ -n "${!v+x}" ]; then printf '%s=%s\\0' "$v" "${!v}"; fi
done >> "$KFJ_RECORD"
printf '\\n--\\n' >> "$KFJ_RECORD"
"""


@pytest.fixture(scope="module")
def stub_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("stub-bin")
    for tool in ("python3", "torchrun"):
        (d / tool).write_text(STUB)
        (d / tool).chmod(0o755)
    return d


def _run_script(
    script: str, stub_bin: Path, work: Path, extra_env: dict[str, str] | None = None
) -> list[list[str]]:
    record = work / "record"
    record.unlink(missing_ok=True)
    env = {"PATH": f"{stub_bin}:/usr/bin:/bin", "KFJ_RECORD": str(record),
           "KF_JUPYTER_WORKDIR": str(work / "w"), "TMPDIR": str(work)}  # fmt: skip
    env.update(extra_env or {})
    subprocess.run(["bash", "-c", script], env=env, check=True, capture_output=True, timeout=30)
    calls = record.read_bytes().split(b"\n--\n")
    return [[a.decode("utf-8", "surrogateescape") for a in c.split(b"\0")[:-1]] for c in calls if c]


packages = st.one_of(hostile_text, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}(\[[a-z]+\])?(==[0-9.]{1,6})?", fullmatch=True))  # fmt: skip
urls = st.one_of(
    hostile_text,
    st.builds(lambda h, p: f"https://{h}/{p}", st.from_regex(r"[a-z]{1,10}(\.[a-z]{2,5})?", fullmatch=True),
              st.text(alphabet="$`;|&(){}'\"\\=-_./:@abc019%", max_size=30)),
    st.builds(lambda p: f"https://user:{p}@pypi.example.com/simple", st.sampled_from(PAYLOADS[:8])),
)  # fmt: skip


@pytest.mark.reliability(
    scenario="package names and pip index URLs: invalid ones refused with the rule; valid ones "
    "reach pip exactly when the generated bash script runs: packages as argv words, index URLs "
    "in pip's environment only, never in the script (no canary file)",
    area="hostile",
)
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(pkgs=st.lists(packages, min_size=1, max_size=3), index=st.lists(urls, max_size=2))
def test_packages_and_index_urls_reach_pip_exactly(
    pkgs: list[str], index: list[str], stub_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    try:
        rc = RuntimeConfig(packages_to_install=pkgs, pip_index_urls=index or None)
    except ValidationError as exc:
        assert "pip" in str(exc) or "index URL" in str(exc) or "URL" in str(exc)
        for u in index if "index URL" in str(exc) else []:
            if "@" in u and ":" in u.split("@")[0][8:]:
                assert u.split("@")[0].rsplit(":", 1)[1] not in str(exc) or "****" in str(exc)
        return
    payload = Payload("def f():\n    pass\n", "f", "{}", "print('runner')\n",
                      tuple(rc.packages), tuple(rc.index_urls))  # fmt: skip
    script = get_policy("torch").script(TorchTrainer(func=train), payload)
    work = tmp_path_factory.mktemp("run")
    # The index URLs (credentials maybe) are never in the script: they come from the job's env.
    assert not [u for u in rc.index_urls if u in script]
    calls = _run_script(script, stub_bin, work, program.index_env(rc.index_urls))
    install = next(c for c in calls if c[:3] == ["-m", "pip", "install"])
    idx: list[str] = []
    if rc.index_urls:
        idx.append(f"PIP_INDEX_URL={rc.index_urls[0]}")
    if len(rc.index_urls) > 1:
        idx.append(f"PIP_EXTRA_INDEX_URL={' '.join(rc.index_urls[1:])}")
    assert install[5:] == [*rc.packages, *idx]


@pytest.mark.reliability(
    scenario="the function source, JSON args and runner are written byte-exact by the script "
    "(hostile text in a string literal, `EOM`, quotes, backslashes)",
    area="hostile",
)
@MANY
@given(text=hostile_text)
def test_script_payloads_are_written_exactly(
    text: str, stub_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assume("\x00" not in text)
    source = f"def f():\n    return {text!r}\n"
    payload = Payload(source, "f", json.dumps({"t": text}), f"# {text!r}\n")
    script = get_policy("torch").script(TorchTrainer(func=train), payload)
    work = tmp_path_factory.mktemp("run")
    calls = _run_script(script, stub_bin, work)
    w = work / "w"
    assert (w / "kf_func.py").read_text(encoding="utf-8", errors="surrogatepass") == source
    assert json.loads((w / "kf_args.json").read_text(encoding="utf-8", errors="surrogatepass")) == {
        "t": text
    }
    assert calls[-1] == [str(w / "kf_entry.py"), str(w / "kf_func.py"), "f",
                             str(w / "kf_args.json"), "none"]  # fmt: skip


# -- a real local job: the processes see the env as given -------------------------------------------


def show_env(keys: list[str]) -> None:
    """Prints the named env vars as JSON (rank 0)."""
    import json
    import os

    print("ENV " + json.dumps({k: os.environ.get(k) for k in keys}), flush=True)


env_value = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)


@pytest.mark.slow
@pytest.mark.reliability(
    scenario="a real local job (mpirun, 1 rank) sees every hostile env value exactly as given; "
    "label/annotation values do not disturb it; no canary file",
    area="hostile",
)
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(env=st.dictionaries(st.from_regex(r"K[A-Z0-9_]{0,10}", fullmatch=True),
                           st.one_of(env_value, st.sampled_from(PAYLOADS)), min_size=1, max_size=8),
       note=st.sampled_from(PAYLOADS))  # fmt: skip
def test_real_local_job_sees_env_exactly(
    env: dict[str, str], note: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from kf_jupyter import TrainerClient
    from kf_jupyter.backends.local.config import LocalBackendConfig

    state = tmp_path_factory.mktemp("state")
    client = TrainerClient(LocalBackendConfig(state_dir=state, cwd=str(state)))
    trainer = MPITrainer(func=show_env, func_args={"keys": sorted(env)}, num_proc_per_node=1)
    name = client.train(trainer, runtime_config=RuntimeConfig(env=env),
                        options=[Annotations({"example.com/note": note})])  # fmt: skip
    try:
        job = client.wait_for_job_status(name, timeout=120)
        assert job.status == "Complete"
        line = next(ln for ln in client.get_job_logs(name) if "ENV {" in ln)
        assert json.loads(line.split("ENV ", 1)[1]) == env
    finally:
        client.delete_job(name)
    assert os.path.isdir(state)
