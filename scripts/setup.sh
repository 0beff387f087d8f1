#!/usr/bin/env bash
# Set up everything kf-jupyter needs on a fresh Debian machine of this kind:
# system packages (OpenMPI, etcd, Chromium), a project-local virtualenv in .venv,
# the package itself (editable) and the frameworks the tests and tutorials run.
# Idempotent: a second run only checks what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${KF_PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

want_apt=(openmpi-bin libopenmpi-dev etcd-server chromium xz-utils)
missing=()
for p in "${want_apt[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
VPY=$ROOT/.venv/bin/python
stamp=.venv/.kf-setup-stamp
sum=$(cat pyproject.toml requirements/*.txt 2>/dev/null | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  "$VPY" -m pip install -q --upgrade pip
  # torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
  "$VPY" -m pip install -q "torch==2.13.0"
  "$VPY" -m pip install -q -r requirements/dev.txt
  # The lab extension is built and linked by scripts/build-labextension.sh below, not by the hook.
  # The editable install copies shared-data into the venv: drop our link first so it cannot write
  # through it into kf_jupyter/labextension, and relink below.
  link=.venv/share/jupyter/labextensions/kf-jupyter-labextension
  if [ -L "$link" ]; then rm -f "$link"; fi
  HATCH_BUILD_NO_HOOKS=true "$VPY" -m pip install -q --no-build-isolation --no-deps -e .
  rm -f .venv/.kf-labext-stamp
  # The wheel ships this as jupyter-config; the editable install needs it said once.
  .venv/bin/jupyter server extension enable --sys-prefix kf_jupyter >/dev/null
  echo "$sum" >"$stamp"
fi
# The JupyterLab extension: built from labextension/ and linked into the venv; rebuilt only
# when its sources change.
if command -v node >/dev/null 2>&1; then
  lsum=$(cat labextension/package.json labextension/yarn.lock labextension/tsconfig.json \
    $(find labextension/src labextension/style -type f | sort) 2>/dev/null | sha256sum | cut -c1-16)
  lstamp=.venv/.kf-labext-stamp
  if [ ! -f "$lstamp" ] || [ "$(cat "$lstamp")" != "$lsum" ] || [ ! -f kf_jupyter/labextension/package.json ]; then
    VIRTUAL_ENV=$ROOT/.venv bash scripts/build-labextension.sh --prod
    echo "$lsum" >"$lstamp"
  fi
else
  echo "setup: Node.js not found; the JupyterLab extension is not built" >&2
fi
echo "setup: ready ($("$VPY" --version), venv at $ROOT/.venv)"
