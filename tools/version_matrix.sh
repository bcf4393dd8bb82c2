#!/usr/bin/env bash
# The version matrix: the part of the tests that needs only torch and MMEngine (wrapper,
# record, hook, policy, collective budget, equivalence, strict mode, CPU launch, the
# installed package), run where mmdet3d users train, each torch on a real Python of its own:
# torch 1.9.1 and 1.12.1 on Python 3.8 with mmengine 0.8.5 (the research codebases' torch,
# and the last before 1.13), 1.13.1 on 3.8 with mmengine 0.8.0 (the oldest supported
# MMEngine), 2.1.2 (the newest torch with mmcv 2.1 wheels) and 2.14.1 (the newest served)
# with mmengine 0.10.7. The main stack (torch 2.13) is tested by `make test` itself. And
# OpenMMLab 1.x, where the research codebases train: `openmmlab1`, Python 3.8, torch 1.12.1,
# mmcv-full 1.7.2 compiled with its CPU ops and mmdet 2.28.2, without MMEngine, runs the
# layout's import rules and tests/openmmlab1 (the mmcv 1.x adapter, trained for real). And a
# plain PyTorch loop: `pytorch`, torch alone (no MMEngine, no mmcv), runs the layout's import
# rules and tests/pytorch (the plain adapter, against torch's own DDP).
#
# Each leg has its own venv, .venvs/LEG, created when missing (a stamp of the leg's line
# below says it is complete); like .venv (tools/make_venv.sh) it is a link into the store
# outside the checkout, so that a fresh clone on the same machine reuses it. torch and
# mmengine are installed first, as a user installs them (no pins beyond the user's own, so a
# new torch brings the setuptools it brings); then this package with a regular
# `pip install .`, dependencies included, which must leave torch exactly as it was; then the
# leg's "documented fix", if any: what the README's install section tells such a user to run.
#
# Usage: tools/version_matrix.sh [--ci | --ci-first | --build | --ci-build] [LEG ...]
#   default: every leg; LEG as named below.
#   --build: only creates the venvs of the LEGs named that are missing, and runs no test
#     (`make test-quick` runs the openmmlab1 leg's core tests from the checkout in its venv).
#   --ci-build: --build for the legs marked yes (tools/ci_test.sh runs it while the suite runs).
#   --ci-first: the legs CI never leaves out (marked first: openmmlab1 and pytorch, the only
#     tests of a whole adapter where its framework alone is installed), whatever the deadline; `make test` runs them before the suite, whose
#     slowest tests give way instead when time is short (tests/ci_budget.py).
#   --ci: the other legs marked for CI, in the order below (their priority). With
#     DDP_GUARD_CI_DEADLINE (seconds since the epoch; .ci/run sets it), a leg whose
#     estimated time, at this machine's measured speed, would not end before the deadline is
#     left out, and said so loudly; the others still run.
set -euo pipefail
cd "$(dirname "$0")/.."

# name | Python | what the user has installed before us | documented fix | CI (first: always,
# before the suite; yes: after it, under the deadline) | minutes to build the venv, then to
# run its tests, on a quiet 2-core machine (measured 2026-12-01; the legs of PLAIN_LEGS one
# more minute for tests/pytorch from 2026-12-05, 77 s on torch 1.9; the pytorch leg's tests
# 2 min 11 s in .ci/run at 1.06x on 2026-12-05, with torch's own DDP tests and the comm hooks'
# contract; docs/compatibility.md). In
# priority order: CI runs the legs marked yes, in this order.
LEGS=(
  "openmmlab1|3.8|torch==1.12.1 numpy<1.24 setuptools<70 wheel ninja pillow<10 requests||first|7|7"
  "pytorch|3.11|torch==2.13.0 numpy==1.26.4 pytorch-lightning==2.6.6 lightning==2.6.6 accelerate==1.15.0 transformers==5.23.0||first|3|2"
  "torch1.9|3.8|torch==1.9.1 mmengine==0.8.5 numpy<1.25 setuptools<70 vermin==1.9.2||yes|3|4"
  "torch1.12|3.8|torch==1.12.1 mmengine==0.8.5 numpy<1.25 setuptools<70||no|3|3"
  "torch2.14|3.11|torch==2.14.1 mmengine==0.10.7 numpy==1.26.4|setuptools<81|yes|3|6"
  "torch1.13|3.8|torch==1.13.1 mmengine==0.8.0 numpy<1.25 setuptools<70|yapf==0.40.1|yes|3|3"
  "torch2.1|3.11|torch==2.1.2 mmengine==0.10.7 numpy==1.26.4|setuptools<81|yes|3|4"
  "mmengine_forms|3.11|torch==2.13.0 numpy==1.26.4 addict pyyaml rich termcolor yapf packaging matplotlib opencv-python-headless<4.11||yes|2|2"
)
TESTS=(
  tests/test_torch_versions.py tests/test_installed_package.py tests/test_usage_record.py
  tests/test_step_backwards.py
  # The record's coverage on each torch, its gloo ranks included (about 3 s a leg; left out
  # from 2026-12-02, when its run on torch 2.1.2 hung once in three, until the cause was found
  # in the harness: see run_distributed's _worker).
  tests/test_collective_functions.py
  # The record against torch's flight recorder, where torch has one (2.14 here; skipped before).
  tests/test_flight_recorder_oracle.py tests/test_join_under_the_guard.py
  tests/test_three_rank_rounding.py
  # The wrapper handled as a DDP (deepcopy, pickle, buffers, requires_grad, sparse...), against
  # MMEngine's own wrapper; the Runner-level hooks test runs in the suite only.
  tests/test_ddp_contract.py::test_the_guard_handles_and_trains_as_the_framework_s_own_wrapper
  # Sparse gradients in every place of DDP's bucket order, against an independent computation,
  # under MMEngine's adapter (DDP_GUARD_SPARSE_ADAPTERS below; the suite runs every adapter).
  tests/test_sparse_gradients.py
  # A user's comm hook (torch's, the built-ins, a user's own) against the framework's wrapper.
  tests/test_comm_hooks.py
  tests/test_guarded_ddp_training.py tests/test_guarded_ddp_options.py tests/test_one_way_step.py
  tests/test_collective_budget.py tests/test_unused_params_hook.py
  tests/test_outcome_words.py tests/test_cpu_launch.py tests/test_stall_diagnosis.py
  # The stall guard on each torch's collectives: a hang named, a rank that raised named (a
  # rank slow outside collectives, which meets no collective of torch's, runs in the suite).
  'tests/test_stall_guard.py::test_sync_bn_in_a_branch_some_ranks_skip[2_ranks-nonblocking]'
  'tests/test_stall_guard.py::test_a_rank_that_raises_while_the_others_wait[2_ranks]'
  tests/test_stall_guard_costs.py::test_the_newest_wrapper_of_a_process_takes_the_stall_guard_and_says_so
  tests/test_stall_guard_costs.py::test_a_compiled_model_with_a_sync_bn_compiles_the_same_frames_with_the_guard
)
# The plain PyTorch adapter, against torch's own DDP, at the old end of the torch range (the
# suite runs all of tests/pytorch on torch 2.13, one release from the newest, 2.14, where
# these took about 2 of the leg's 5.7 minutes): what depends on the torch at hand (the loops
# against its DDP, the loss in the loop against its DDP without a _DDPSink, the modes,
# torch's own DDP tests of that release); its torchrun restart, report and stall guard run in
# the suite.
PLAIN_LEGS=(torch1.9)
PLAIN_TESTS=(tests/pytorch/test_plain_loop.py tests/pytorch/test_loss_in_the_loop.py
  tests/pytorch/test_plain_modes.py tests/pytorch/test_torch_ddp_suite.py)
# The openmmlab1 leg has no MMEngine: the layout's import rules, what importing the package
# changes there (README), and its adapter's own tests.
OPENMMLAB1_TESTS=(tests/test_layout.py tests/test_ddp_contract.py tests/test_import_changes.py
  tests/test_sparse_gradients.py tests/test_comm_hooks.py tests/test_training_changes.py tests/test_one_way_step.py
  tests/openmmlab1)
# The pytorch leg has the suite's torch without MMEngine and mmcv, and the trainers that build
# torch's DDP themselves (Lightning, Accelerate, transformers: never the project's
# requirements): what only such an install shows (the layout's import rules, what importing
# changes there: nothing, README; the package loads no framework and no trainer), one plain
# loop trained and reported, and the trainers' tests (tests/trainers, each against the
# trainer's own find_unused_parameters=True). The plain adapter's other tests run in the
# suite on the same torch, and in the torch1.9 leg.
# The mmengine_forms leg has MMEngine's runtime dependencies but no mmengine distribution:
# tools/mmengine_forms.sh puts mmengine-lite, onedl-mmengine and a source tree each in a
# folder of its own, and its test trains each through the Runner (issue 60).
MMENGINE_FORMS_TESTS=(tests/mmengine_forms)
PYTORCH_TESTS=(tests/test_layout.py tests/test_import_changes.py
  tests/pytorch/test_plain_loop.py::test_the_package_imports_with_torch_alone_and_loads_no_framework
  tests/pytorch/test_plain_loop.py::test_trains_as_the_graph_search_on_every_rank
  tests/pytorch/test_plain_report.py tests/trainers
  'tests/tooling/test_benchmarks_run.py::test_benchmark_runs_at_its_smallest_size[bench_trainers]')

STORE=${DDP_GUARD_VENV_STORE:-$HOME/.cache/mmdet3d_ddp_guard}

say() { printf 'version_matrix [%d:%02d]: %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }
loud() { printf '\nversion_matrix: *** %s ***\n\n' "$*" >&2; }

find_python() {
  local version=$1 candidate
  for candidate in "python$version" "$HOME"/.pyenv/versions/"$version".*/bin/"python$version"; do
    # pyenv's shims are on PATH for every version it knows, but run only the selected ones.
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c '' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
  say "no Python $version here (looked for python$version on PATH and in ~/.pyenv);" \
    "install it (e.g. pyenv install $version) to run this leg"
  return 1
}

stamp_of() { echo "$1 $2 $3" | sha256sum | cut -c1-16; }

leg_is_built() {
  local venv=".venvs/$1"
  [ -f "$venv/.complete" ] && [ "$(cat "$venv/.complete")" = "$(stamp_of "$2" "$3" "$4")" ]
}

# The pkg_resources trap (docs/compatibility.md): with the setuptools a new torch brings,
# mmengine's Config.fromfile cannot read a package-scoped base (`mmdet3d::...`), since it
# calls mmengine's is_installed for the scope's package. Said before the fix is applied.
report_scoped_config_trap() {
  local err
  if err=$("$1/bin/python" -c \
      'from mmengine.utils import is_installed; is_installed("torch")' 2>&1); then
    say "the user's install as it is reads package-scoped configs (mmdet3d::)"
  else
    say "the user's install as it is cannot read package-scoped configs: $(tail -n 1 <<<"$err")"
  fi
}

# OpenMMLab 1.x as the research codebases install it (docs/openmmlab1.md): torchvision without
# its dependencies (mmcv's ops import it; its own pins would move torch), mmcv-full 1.7.2
# compiled with its CPU ops (through tools/mmcv_cxx.sh, as .venv's mmcv), mmdet 2.28.2. No
# MMEngine: the package must import and guard with mmcv 1.x alone.
build_openmmlab1() {
  local venv=$1 pip="$1/bin/python -m pip --disable-pip-version-check"
  $pip install -q --no-compile --no-deps torchvision==0.13.1
  say "openmmlab1: compiling mmcv-full 1.7.2 with its CPU ops (about 6 min on 2 quiet cores)"
  PATH="$(readlink -f "$venv")/bin:$PATH" CXX="$(pwd)/tools/mmcv_cxx.sh" \
    MMCV_WITH_OPS=1 FORCE_CUDA=0 MAX_JOBS=${MAX_JOBS:-2} \
    $pip install -q --no-compile --no-build-isolation mmcv-full==1.7.2
  $pip install -q --no-compile mmdet==2.28.2
}

# mmdet3d 0.x without its CUDA ops (tools/mmdet3d_0x.sh: for its own train path's tests, not a
# user's install), into the openmmlab1 venv; again whenever that script changes.
add_mmdet3d_0x() {
  local venv=$1 stamp
  stamp=$(sha256sum tools/mmdet3d_0x.sh | cut -c1-16)
  if [ "$(cat "$venv/.mmdet3d_0x" 2>/dev/null)" = "$stamp" ]; then return; fi
  say "openmmlab1: mmdet3d 0.17.1 without its CUDA ops (about 1 min)"
  bash tools/mmdet3d_0x.sh "$venv"
  echo "$stamp" >"$venv/.mmdet3d_0x"
}

make_leg_venv() {
  local name=$1 python_version=$2 stack=$3 fix=$4
  local venv=".venvs/$name"
  if [ ! -e "$venv" ]; then
    mkdir -p .venvs "$STORE/venvs"
    ln -sfn "$STORE/venvs/$name" "$venv"
  fi
  local pip="$venv/bin/python -m pip --disable-pip-version-check"
  if leg_is_built "$name" "$python_version" "$stack" "$fix"; then
    # The package itself is reinstalled every run: it is what is under test.
    $pip install -q --no-compile --no-deps --force-reinstall .
    if [ "$name" = openmmlab1 ]; then add_mmdet3d_0x "$venv"; fi
    if [ "$name" = mmengine_forms ]; then bash tools/mmengine_forms.sh "$venv"; fi
    return
  fi
  local python
  python=$(find_python "$python_version")
  rm -rf "$(readlink -f "$venv")"
  say "$name: creating $venv (Python $python_version: $stack)"
  "$python" -m venv "$(readlink -f "$venv")"
  # shellcheck disable=SC2086  # the stack is a list of requirement words
  $pip install -q --no-compile $stack pytest pytest-timeout
  if [ "$name" = openmmlab1 ]; then build_openmmlab1 "$venv" && add_mmdet3d_0x "$venv"; fi
  local before after
  before=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
  say "$name: pip install . (a regular install, dependencies included) beside torch $before"
  $pip install -q --no-compile .
  after=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
  if [ "$before" != "$after" ]; then
    say "$name: installing mmdet3d_ddp_guard replaced torch $before with $after"
    return 1
  fi
  if [ -n "$fix" ]; then
    report_scoped_config_trap "$venv"
    say "$name: the README's fix for this stack: pip install '$fix'"
    $pip install -q --no-compile "$fix"
  fi
  if [ "$name" = mmengine_forms ]; then bash tools/mmengine_forms.sh "$venv"; fi
  stamp_of "$python_version" "$stack" "$fix" >"$venv/.complete"
}

# Python 3.8 syntax and standard library in the package, proved by vermin in the leg that
# has it (annotations count: Python 3.8 evaluates them at import).
check_python38() {
  say "vermin: the package and setup.py must run on Python 3.8"
  ".venvs/$1/bin/python" -c 'import sys, vermin; sys.exit(vermin.main())' \
    --target=3.8- --violations --eval-annotations --no-tips mmdet3d_ddp_guard setup.py
}

if [ "${1:-}" = --build ] || [ "${1:-}" = --ci-build ]; then
  mode=$1
  shift
  for leg in "${LEGS[@]}"; do
    IFS='|' read -r name python_version stack fix in_ci _ <<<"$leg"
    if [ "$mode" = --ci-build ] && [ "$in_ci" != yes ]; then continue; fi
    if [ "$mode" = --build ] && [[ " $* " != *" $name "* ]]; then continue; fi
    if [ ! -e ".venvs/$name" ]; then
      mkdir -p .venvs "$STORE/venvs"
      ln -sfn "$STORE/venvs/$name" ".venvs/$name"
    fi
    if ! leg_is_built "$name" "$python_version" "$stack" "$fix"; then
      make_leg_venv "$name" "$python_version" "$stack" "$fix"
    fi
  done
  exit 0
fi

ci=no
if [ "${1:-}" = --ci ] || [ "${1:-}" = --ci-first ]; then
  ci=$([ "$1" = --ci ] && echo yes || echo first)
  shift
fi
selected=("$@")
deadline=${DDP_GUARD_CI_DEADLINE:-}
slowdown=1
if [ -n "$deadline" ]; then
  slowdown=$(python3 -c 'from tests.timeouts import measured_slowdown
print(f"{max(measured_slowdown(5), 1.0):.2f}")')
  say "CI deadline in $(((deadline - $(date +%s)) / 60)) min; this machine runs Python" \
    "${slowdown}x slower than a quiet core"
fi

repo=$(pwd)
failed=()
passed=()
left_out=()
for leg in "${LEGS[@]}"; do
  IFS='|' read -r name python_version stack fix in_ci build_minutes test_minutes <<<"$leg"
  if [ ${#selected[@]} -gt 0 ] && [[ ! " ${selected[*]} " =~ " $name " ]]; then continue; fi
  if [ "$ci" != no ] && [ "$in_ci" != "$ci" ]; then continue; fi
  if [ -n "$deadline" ] && [ "$ci" != first ]; then
    minutes=$test_minutes
    if ! leg_is_built "$name" "$python_version" "$stack" "$fix"; then
      minutes=$((build_minutes + test_minutes))
    fi
    estimate=$(python3 -c "import math; print(math.ceil($minutes * $slowdown * 60))")
    left=$((deadline - $(date +%s)))
    if [ "$estimate" -gt "$left" ]; then
      loud "LEFT OUT leg $name: it takes about $((estimate / 60)) min on this machine" \
        "($minutes min on a quiet one, ${slowdown}x slower now), and only" \
        "$((left / 60)) min are left before CI's limit. Run it with:" \
        "bash tools/version_matrix.sh $name"
      left_out+=("$name")
      continue
    fi
  fi
  make_leg_venv "$name" "$python_version" "$stack" "$fix"
  if [[ " $stack " == *" vermin=="* ]] && ! check_python38 "$name"; then failed+=("vermin"); fi
  # The torch legs run sparse gradients under MMEngine's adapter alone (see TESTS).
  tests=("${TESTS[@]}")
  sparse_adapters=mmengine
  # The leg that installs mmdet3d 0.x (add_mmdet3d_0x) says so to its tests, which then fail
  # without it instead of skipping (tests/openmmlab1/test_mmdet3d_0x.py).
  expect_mmdet3d_0x=
  if [ "$name" = openmmlab1 ]; then
    tests=("${OPENMMLAB1_TESTS[@]}")
    # mmcv's adapter: this leg is its only home (the plain adapter's runs in the suite).
    sparse_adapters=mmcv
    expect_mmdet3d_0x=1
  fi
  if [ "$name" = pytorch ]; then tests=("${PYTORCH_TESTS[@]}"); sparse_adapters=; fi
  mmengine_forms=
  if [ "$name" = mmengine_forms ]; then
    tests=("${MMENGINE_FORMS_TESTS[@]}")
    mmengine_forms=$(readlink -f ".venvs/$name")/forms
  fi
  if [[ " ${PLAIN_LEGS[*]} " == *" $name "* ]]; then tests+=("${PLAIN_TESTS[@]}"); fi
  say "$name: ${#tests[@]} test files and tests"
  # From a copy of the tests, the demo's launcher and data writers they use (not installed),
  # the benchmarks (the pytorch leg smoke-runs bench_trainers.py, whose packages only it has),
  # and the docs some of them check against (README.md's list of what importing the package
  # changes), so that `import mmdet3d_ddp_guard` finds the installed package, not the checkout.
  workdir=$(mktemp -d)
  cp -r tests demo docs benchmarks pytest.ini README.md "$workdir/"
  if (cd "$workdir" && DDP_GUARD_EXPECT_INSTALLED=1 DDP_GUARD_SPARSE_ADAPTERS=$sparse_adapters \
      DDP_GUARD_MMENGINE_FORMS=$mmengine_forms \
      DDP_GUARD_EXPECT_MMDET3D_0X=$expect_mmdet3d_0x \
      "$repo/.venvs/$name/bin/python" -m pytest "${tests[@]}" -p no:cacheprovider -q \
      --durations=10); then
    say "$name: passed"
    passed+=("$name")
  else
    failed+=("$name")
  fi
  rm -rf "$workdir"
done
say "passed: ${passed[*]:-none}"
if [ ${#left_out[@]} -gt 0 ]; then
  loud "NOT RUN for lack of time: ${left_out[*]} (see the LEFT OUT lines above)"
fi
if [ ${#failed[@]} -gt 0 ]; then
  say "failed: ${failed[*]}"
  exit 1
fi
say "all legs that ran passed"
