#!/usr/bin/env bash
# `make test`, what CI runs (.ci/run): the openmmlab1 and pytorch legs first (never left out),
# then the suite on .venv, then the version matrix's other CI legs under CI's deadline
# (tools/version_matrix.sh). The other legs' venvs are built while the suite runs: their
# builds are pip's downloads and unpacking, about one busy process, and took 7 to 9 of the
# 19 minutes the legs took from nothing, one after the other after the suite. Every test
# must pass beside one busy process (tests/timeouts.py); the build's log is printed after
# the suite, and a failed build fails its leg when the leg builds again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

bash tools/version_matrix.sh --ci-first

build_log=$(mktemp)
# A session of its own, so that the whole build (pip and its children) can be ended.
setsid bash tools/version_matrix.sh --ci-build >"$build_log" 2>&1 &
builder=$!
trap 'kill -- -"$builder" 2>/dev/null || true; rm -f "$build_log"' EXIT
started=$SECONDS

$PY -m pytest tests -p no:cacheprovider -q --durations=25

build_status=0
wait "$builder" || build_status=$?
echo "ci_test: the other legs' venvs, built beside the suite (exit $build_status, done" \
  "$((SECONDS - started)) s after the suite started):" >&2
cat "$build_log" >&2
bash tools/version_matrix.sh --ci
