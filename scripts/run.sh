#!/usr/bin/env bash
# Set up everything and run the main job: open JupyterLab on the quickstart notebook with the
# local backend (the embedded default). Without notebooks yet, print an example TrainJob.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f notebooks/01-quickstart.ipynb ] && [ -z "${KF_NO_LAB:-}" ]; then
  exec .venv/bin/python -m jupyter lab --ServerApp.allow_root=True notebooks/01-quickstart.ipynb "$@"
fi
exec .venv/bin/python examples/build_trainjob.py
