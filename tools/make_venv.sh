#!/usr/bin/env bash
# Creates .venv with the pinned stack when it is missing; does nothing when it is complete.
# Order matters (see README "Set-up"): setuptools 80.9.0 before mmcv, because torch pulls
# setuptools 84 which has no pkg_resources and mmcv's setup.py imports it; mmcv compiled
# with its C++ ops against the installed torch (--no-build-isolation); mmdet3d and the two
# dataset SDKs with --no-deps, because their declared deps pull open3d, matplotlib<3.6
# (no wheel for Python 3.11) and linters.
#
# --no-compile: pip byte-compiles every module it installs, about 15,000 here; on a loaded
# 2-core machine, where the stack's installs took 55 minutes, compiling networkx's 580
# modules took 52 s, so about 20 minutes in all. The Makefile lets Python write the bytecode
# of the modules a run imports instead, once.
#
# .venv is a link to a venv kept in a store outside the checkout (default
# ~/.cache/mmdet3d_ddp_guard/venv; DDP_GUARD_VENV_STORE moves it), so that a fresh clone on
# a machine that has built the stack once reuses it instead of spending 20 to 50 minutes on
# it again. A .venv folder of an older checkout is used as it is. The editable install of
# this package is pointed at the checkout that asks.
set -euo pipefail
cd "$(dirname "$0")/.."
# The import check at the end then writes the bytecode of what a run imports (see --no-compile).
unset PYTHONDONTWRITEBYTECODE
VENV=.venv
STORE=${DDP_GUARD_VENV_STORE:-$HOME/.cache/mmdet3d_ddp_guard}
if [ ! -e "$VENV" ]; then
  mkdir -p "$STORE"
  ln -sfn "$STORE/venv" "$VENV"
fi
PIP_INSTALL="$VENV/bin/python -m pip --disable-pip-version-check install --no-compile -q"
STAMP="$VENV/.stack-complete"
# The stamp holds a hash of what defines the stack (edit a pin and the next run reinstalls)
# and the checkout the editable install points at.
WANT="$(cat tools/make_venv.sh requirements/stack.txt setup.py | sha256sum | cut -c1-16) $(pwd)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then exit 0; fi
if [ -f "$STAMP" ] && [ "$(cut -d' ' -f1 "$STAMP")" = "${WANT%% *}" ]; then
  # The same stack, another checkout: only the editable install moves.
  $PIP_INSTALL --no-deps --no-build-isolation -e .
  echo "$WANT" >"$STAMP"
  exit 0
fi
PY=${PYTHON:-python3}
# Progress on stderr with the elapsed time: the first run takes many minutes (README, Set-up).
say() { printf 'make_venv [%d:%02d]: %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }
# Runs "$@" in the background and says every minute that it still runs, so that a long
# silent step (pip -q, mmcv's compile) never looks hung; returns its exit status.
with_heartbeat() {
  local what=$1 start=$SECONDS pid next
  shift
  "$@" &
  pid=$!
  next=$((start + 60))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$SECONDS" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      say "$what: still running, $(((SECONDS - start) / 60)) min so far"
      next=$((next + 60))
    fi
  done
  wait "$pid"
}
say "building $VENV (the first time: 10 to 25 minutes on 2 quiet cores, most of it mmcv's compile)"
# A host that takes most of the machine's CPU makes every step many times longer (see
# docs/getting_started.md); the log then says so before any step looks hung.
say "this machine runs Python $("$PY" -c 'from tests.timeouts import measured_slowdown
print(f"{measured_slowdown(3):.1f}")')x slower than a quiet core"
# Created where the link points, so that its scripts name the store's path.
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$(readlink -f "$VENV")"
$PIP_INSTALL --upgrade pip==24.3.1
$PIP_INSTALL setuptools==80.9.0 wheel
say "installing torch 2.13.0 (CPU)"
with_heartbeat "torch" $PIP_INSTALL torch==2.13.0
$PIP_INSTALL setuptools==80.9.0
say "installing the pinned stack (requirements/stack.txt)"
with_heartbeat "the pinned stack" $PIP_INSTALL -r requirements/stack.txt
if ! "$VENV/bin/python" -c "import mmcv, mmcv.ops" 2>/dev/null; then
  say "building mmcv 2.1.0 with its C++ ops: minutes on 2 quiet cores, silent but working"
  # mmcv's 77 sources, each compiled with all of ATen's headers, were most of a fresh
  # machine's set-up; CI's run on 2026-11-30 spent over 86 min here without finishing.
  # tools/mmcv_cxx.sh parses those headers once (a precompiled header) and drops the debug
  # information. torch calls $CXX only through ninja, hence the venv's ninja first on PATH.
  PATH="$(readlink -f "$VENV")/bin:$PATH" CXX="$(pwd)/tools/mmcv_cxx.sh" \
    MMCV_WITH_OPS=1 FORCE_CUDA=0 MAX_JOBS=${MAX_JOBS:-2} \
    with_heartbeat "mmcv's compile" $PIP_INSTALL --no-build-isolation mmcv==2.1.0
fi
say "installing mmdet3d 1.4.0, the dataset SDKs and this package"
$PIP_INSTALL --no-deps mmdet3d==1.4.0 nuscenes-devkit==1.1.11 lyft-dataset-sdk==0.0.8
# The PEP 660 editable install (pyproject.toml), built with the pinned setuptools above.
$PIP_INSTALL --no-deps --no-build-isolation -e .
"$VENV/bin/python" -c "import torch, mmengine, mmcv.ops, mmdet, mmdet3d, mmdet3d_ddp_guard"
echo "$WANT" > "$STAMP"
say "done"
