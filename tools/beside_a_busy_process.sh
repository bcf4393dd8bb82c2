#!/usr/bin/env bash
# Runs each test file (or node id) given N times in a row (default 5) beside one busy
# process (a Python loop on one core), and prints one line per run: how issue 58 measured
# that a timing-dependent test passes on a loaded 2-core machine, run after run.
# Usage: tools/beside_a_busy_process.sh [-n N] TEST [TEST ...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=5
if [ "${1:-}" = -n ]; then runs=$2; shift 2; fi
python3 -c 'while True: sum(range(100000))' &
busy=$!
trap 'kill "$busy" 2>/dev/null || true' EXIT
failed=0
for test in "$@"; do
  for run in $(seq 1 "$runs"); do
    start=$SECONDS
    if summary=$(.venv/bin/python -m pytest "$test" -p no:cacheprovider -q 2>&1 | tail -n 1); then
      status=passed
    else
      status=FAILED
      failed=1
    fi
    echo "$test run $run/$runs: $status in $((SECONDS - start)) s ($summary)"
  done
done
exit "$failed"
