#!/usr/bin/env bash
# Build the JupyterLab extension (labextension/ -> kf_jupyter/labextension) and
# link it into the project venv, so the editable install's JupyterLab loads the
# current build (the equivalent of `jupyter labextension develop --overwrite .`).
#
#   scripts/build-labextension.sh            # jlpm install + dev build + link
#   scripts/build-labextension.sh --prod     # production build (as in the wheel)
#   scripts/build-labextension.sh --test     # also run the Jest unit tests
#   scripts/build-labextension.sh --no-link  # build only
#   scripts/build-labextension.sh --install-only  # jlpm install only
#   scripts/build-labextension.sh --link-only     # link the existing build into the venv only
#
# Needs Node.js >= 20; jlpm comes from the venv (jupyter-builder / jupyterlab).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
NAME=kf-jupyter-labextension

prod=0 test=0 link=1 install_only=0 link_only=0
for arg in "$@"; do
  case "$arg" in
    --install-only) install_only=1 ;;
    --link-only) link_only=1 ;;
    --prod) prod=1 ;;
    --test) test=1 ;;
    --no-link) link=0 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "build-labextension: unknown argument $arg" >&2; exit 2 ;;
  esac
done

VENV=${VIRTUAL_ENV:-$ROOT/.venv}
if [ -x "$VENV/bin/jlpm" ]; then
  export PATH="$VENV/bin:$PATH"
fi
command -v node >/dev/null || { echo "build-labextension: node not found (Node.js >= 20 needed)" >&2; exit 1; }
command -v jlpm >/dev/null || { echo "build-labextension: jlpm not found (pip install jupyter-builder)" >&2; exit 1; }

# Use the registry npm is configured with (no host name written here).
if [ -z "${YARN_NPM_REGISTRY_SERVER:-}" ] && command -v npm >/dev/null; then
  reg=$(npm config get registry 2>/dev/null || true)
  [ -n "$reg" ] && export YARN_NPM_REGISTRY_SERVER="$reg"
fi

if ((!link_only)); then
cd labextension
start=$(date +%s)
jlpm install
if ((install_only)); then
  echo "build-labextension: Node packages installed in $(( $(date +%s) - start )) s"
  exit 0
fi
if ((prod)); then jlpm build:prod; else jlpm build; fi
# install.json is mapped from the top level by pyproject; a stray copy here (an editable install
# writing through the venv link below) would be added to the wheel twice.
rm -f "$ROOT/kf_jupyter/labextension/install.json"
echo "build-labextension: built $ROOT/kf_jupyter/labextension in $(( $(date +%s) - start )) s"
if ((test)); then jlpm test; fi
cd "$ROOT"
fi

if ((link)) && [ -x "$VENV/bin/python" ]; then
  dest_dir="$VENV/share/jupyter/labextensions"
  mkdir -p "$dest_dir"
  dest="$dest_dir/$NAME"
  # An editable `pip install -e .` copies the extension here: replace the copy by a link.
  if [ -e "$dest" ] && [ ! -L "$dest" ]; then rm -rf "$dest"; fi
  ln -sfn "$ROOT/kf_jupyter/labextension" "$dest"
  echo "build-labextension: linked $dest -> $ROOT/kf_jupyter/labextension"
  # (a check that JupyterLab sees it: seconds when idle, a minute on a loaded machine, so not
  # on setup.sh's path)
  if ((!link_only)); then
    "$VENV/bin/jupyter" labextension list 2>&1 | grep -F "$NAME" || true
  fi
fi
