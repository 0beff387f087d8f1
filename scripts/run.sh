#!/usr/bin/env bash
# Set up everything and run the main job: JupyterLab opened on the quickstart notebook itself,
# with the local backend (the embedded default). Without notebooks yet, print an example TrainJob.
# It serves my-tutorials/ (ignored by git; KF_TUTORIALS_DIR chooses another folder), a copy of
# notebooks/ made on the first run and never overwritten, so your edits and outputs stay there.
#
# It prints the URL to open (http://localhost:8888/lab/tree/01-quickstart.ipynb?token=...): that
# URL opens the quickstart notebook, not the Launcher. Only for this lab (not for your other
# labs): JupyterLab's "news" pop-up is off (jupyter-config/run-lab, on JUPYTER_CONFIG_PATH).
# KF_SKIP_SETUP=1 skips scripts/setup.sh (already set up); extra arguments go to `jupyter lab`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ -z "${KF_SKIP_SETUP:-}" ]; then
  bash scripts/setup.sh
fi
if [ -f notebooks/01-quickstart.ipynb ] && [ -z "${KF_NO_LAB:-}" ]; then
  # JupyterLab saves (and autosaves) into the folder it serves: serve your own copy of the
  # tutorials, so notebooks/ stays as committed (what the tests run). A tutorial is copied only
  # when your copy lacks it: your edits are never overwritten; delete a file to get it back.
  WORK=${KF_TUTORIALS_DIR:-$ROOT/my-tutorials}
  mkdir -p "$WORK"
  copied=0
  for src in notebooks/*; do
    dest="$WORK/$(basename "$src")"
    if [ ! -e "$dest" ]; then cp -R "$src" "$dest"; copied=$((copied + 1)); fi
  done
  if ((copied)); then
    echo "run: copied $copied tutorial(s) from notebooks/ to $WORK (your working copy)"
  fi
  echo "run: serving $WORK (your copy; notebooks/ stays as committed, delete a file here to get the original back)"
  export JUPYTER_CONFIG_PATH="$ROOT/jupyter-config/run-lab${JUPYTER_CONFIG_PATH:+:$JUPYTER_CONFIG_PATH}"
  # default_url (not a file argument): the URL printed is the notebook's own, so opening it from
  # the terminal (or from another machine) shows the notebook; a file argument only opens it
  # through the browser jupyter itself starts, and the printed URL shows the Launcher.
  exec .venv/bin/python -m jupyter lab --ServerApp.allow_root=True \
    --ServerApp.root_dir="$WORK" --LabApp.default_url=/lab/tree/01-quickstart.ipynb "$@"
fi
exec .venv/bin/python examples/build_trainjob.py
