#!/usr/bin/env bash
# Run the tutorial notebooks with nbval, as scripts/test.sh does (set up first: scripts/setup.sh).
#   bash scripts/test-notebooks.sh [pytest arguments, e.g. -k quickstart]
# It tests the committed tutorials, never what a user saved into notebooks/
# (tests/committed_tutorials.py says which differ; KF_TEST_NOTEBOOKS=worktree tests them as they
# are on disk), from a temporary copy so that nothing they write lands in the repository.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
tut=$(mktemp -d "${TMPDIR:-/tmp}/kf-tutorials-test.XXXXXX")
trap 'rm -rf "$tut"' EXIT
$PY -m tests.committed_tutorials "$tut/notebooks" || exit 1
# The nbval set-up (tests/nbval_tutorials.py) and sanitizers live in tests/: the tutorials
# folder shows only the tutorials.
$PY -m pytest -p no:cacheprovider -p tests.nbval_tutorials --nbval-lax --nbval-current-env \
  --nbval-cell-timeout=300 --nbval-sanitize-with tests/nbval-sanitize.cfg \
  --rootdir "$PWD" -c pyproject.toml -o testpaths=notebooks "$tut/notebooks" "$@"
rc=$?
[ $rc -eq 5 ] && { echo "test: no notebook cells ran" >&2; rc=1; }
exit $rc
