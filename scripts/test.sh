#!/usr/bin/env bash
# Set up everything and run ALL tests: lint, unit, slow (real frameworks, real API server,
# real browser), the lab extension's Jest tests and the tutorial notebooks (nbval).
# Fast loop for developers: .venv/bin/python -m pytest -m "not slow"
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || { echo "test: set-up failed" >&2; exit 1; }
PY=.venv/bin/python
status=0

echo "== ruff"
.venv/bin/ruff check kf_jupyter tests bench || status=1
.venv/bin/ruff format --check kf_jupyter tests bench || status=1

if [ -x labextension/node_modules/.bin/jest ]; then
  echo "== jest (labextension)"
  (cd labextension && node_modules/.bin/jest --ci) || status=1
else
  echo "test: the lab extension's Jest tests could not run (no node_modules)" >&2
  status=1
fi

echo "== pytest (all, slow included)"
# the slowest tests, so CI time (90 min allowed) can be watched and trimmed
$PY -m pytest -p no:cacheprovider --durations=25 "$@"
rc=$?
if [ $rc -eq 5 ]; then
  echo "test: pytest collected no tests — that is a failure here" >&2
  rc=1
fi
[ $rc -eq 0 ] || status=1

if compgen -G "notebooks/*.ipynb" >/dev/null; then
  echo "== notebooks (nbval)"
  bash scripts/test-notebooks.sh || status=1
fi
exit $status
