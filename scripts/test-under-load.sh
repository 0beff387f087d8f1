#!/usr/bin/env bash
# Run tests next to a CPU hog, to check they hold on a loaded machine (issue 13).
#
#   scripts/test-under-load.sh [pytest args...]        e.g. tests/test_reliability_local.py
#   LOAD_FACTOR=4 scripts/test-under-load.sh           busy processes per CPU (default 4)
#   scripts/test-under-load.sh --ci                     the whole of scripts/test.sh under load
#
# Starts LOAD_FACTOR x nproc busy-looping processes (plain bash, nothing to install), runs
# pytest (or scripts/test.sh with --ci) with the worktree first on PYTHONPATH, then stops the
# hog processes it started (by their pids) and prints the wall time and the load average.
set -uo pipefail
cd "$(dirname "$0")/.."
factor=${LOAD_FACTOR:-4}
cpus=$(nproc)
n=$((cpus * factor))
pids=()
stop_hog() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
}
trap stop_hog EXIT
trap 'stop_hog; exit 130' INT TERM
for ((i = 0; i < n; i++)); do
  bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "test-under-load: $n busy processes on $cpus CPUs (${factor}x oversubscription)"
start=$(date +%s)
if [ "${1:-}" = "--ci" ]; then
  shift
  bash scripts/test.sh "$@"
else
  PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" .venv/bin/python -m pytest -p no:cacheprovider "$@"
fi
rc=$?
load=$(cut -d' ' -f1-3 /proc/loadavg)
stop_hog
echo "test-under-load: exit $rc after $(($(date +%s) - start)) s; load average $load"
exit $rc
