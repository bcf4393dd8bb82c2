#!/usr/bin/env bash
# The version matrix: the part of the tests that needs only torch and MMEngine (wrapper,
# record, hook, policy, collective budget, equivalence, strict mode, CPU launch, the
# installed package), run where mmdet3d users train: torch 1.13.1 on Python 3.8 with
# mmengine 0.8.0 (the oldest of each that is supported), torch 2.1.2 (the newest torch with
# mmcv 2.1 wheels) and torch 2.14.1 (the newest served) with mmengine 0.10.7.
#
# Each leg has its own venv, .venvs/LEG, created when missing (a stamp of the leg's line
# below says it is complete); like .venv (tools/make_venv.sh) it is a link into the store
# outside the checkout, so that a fresh clone on the same machine reuses it. torch and mmengine are installed first, as a user has them;
# then this package with a regular `pip install .`, dependencies included, which must leave
# torch exactly as it was. The main stack (torch 2.13) is tested by `make test` itself.
#
# Usage: tools/version_matrix.sh [LEG ...]   (default: every leg; LEG as named below)
set -euo pipefail
cd "$(dirname "$0")/.."

# name | Python | what the user has installed before us
LEGS=(
  "torch1.13|3.8|torch==1.13.1 mmengine==0.8.0 numpy<1.25 setuptools<70 vermin==1.9.2"
  "torch2.1|3.11|torch==2.1.2 mmengine==0.10.7 numpy==1.26.4 setuptools<81"
  "torch2.14|3.11|torch==2.14.1 mmengine==0.10.7 numpy==1.26.4 setuptools<81"
)
TESTS=(
  tests/test_torch_versions.py tests/test_installed_package.py tests/test_usage_record.py
  tests/test_guarded_ddp_training.py tests/test_guarded_ddp_options.py
  tests/test_collective_budget.py tests/test_unused_params_hook.py
  tests/test_outcome_words.py tests/test_cpu_launch.py
)

STORE=${DDP_GUARD_VENV_STORE:-$HOME/.cache/mmdet3d_ddp_guard}

say() { printf 'version_matrix [%d:%02d]: %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*" >&2; }

find_python() {
  local version=$1 candidate
  for candidate in "python$version" "$HOME"/.pyenv/versions/"$version".*/bin/"python$version"; do
    if command -v "$candidate" >/dev/null 2>&1; then
      command -v "$candidate"
      return
    fi
  done
  say "no Python $version here (looked for python$version on PATH and in ~/.pyenv);" \
    "install it (e.g. pyenv install $version) to run this leg"
  return 1
}

make_leg_venv() {
  local name=$1 python_version=$2 stack=$3
  local venv=".venvs/$name" want
  if [ ! -e "$venv" ]; then
    mkdir -p .venvs "$STORE/venvs"
    ln -sfn "$STORE/venvs/$name" "$venv"
  fi
  want=$(echo "$python_version $stack" | sha256sum | cut -c1-16)
  if [ -f "$venv/.complete" ] && [ "$(cat "$venv/.complete")" = "$want" ]; then
    # The package itself is reinstalled every run: it is what is under test.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall .
    return
  fi
  local python
  python=$(find_python "$python_version")
  rm -rf "$(readlink -f "$venv")"
  say "$name: creating $venv (Python $python_version: $stack)"
  "$python" -m venv "$(readlink -f "$venv")"
  local pip="$venv/bin/python -m pip --disable-pip-version-check"
  # shellcheck disable=SC2086  # the stack is a list of requirement words
  $pip install -q $stack pytest pytest-timeout
  local before after
  before=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
  say "$name: pip install . (a regular install, dependencies included) beside torch $before"
  $pip install -q .
  after=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
  if [ "$before" != "$after" ]; then
    say "$name: installing mmdet3d_ddp_guard replaced torch $before with $after"
    return 1
  fi
  echo "$want" >"$venv/.complete"
}

# Python 3.8 syntax and standard library in the package, proved by vermin in the leg that
# runs Python 3.8 (annotations count: Python 3.8 evaluates them at import).
check_python38() {
  say "vermin: the package and setup.py must run on Python 3.8"
  ".venvs/$1/bin/python" -c 'import sys, vermin; sys.exit(vermin.main())' \
    --target=3.8- --violations --eval-annotations --no-tips mmdet3d_ddp_guard setup.py
}

repo=$(pwd)
selected=("$@")
failed=()
for leg in "${LEGS[@]}"; do
  IFS='|' read -r name python_version stack <<<"$leg"
  if [ ${#selected[@]} -gt 0 ] && [[ ! " ${selected[*]} " =~ " $name " ]]; then continue; fi
  make_leg_venv "$name" "$python_version" "$stack"
  if [ "$python_version" = 3.8 ] && ! check_python38 "$name"; then failed+=("vermin"); fi
  say "$name: ${#TESTS[@]} test files"
  # From a copy of the tests only, so that `import mmdet3d_ddp_guard` finds the installed
  # package, not the checkout.
  workdir=$(mktemp -d)
  cp -r tests pytest.ini "$workdir/"
  if (cd "$workdir" && DDP_GUARD_EXPECT_INSTALLED=1 \
      "$repo/.venvs/$name/bin/python" -m pytest "${TESTS[@]}" -p no:cacheprovider -q); then
    say "$name: passed"
  else
    failed+=("$name")
  fi
  rm -rf "$workdir"
done
if [ ${#failed[@]} -gt 0 ]; then
  say "failed: ${failed[*]}"
  exit 1
fi
say "all legs passed"
