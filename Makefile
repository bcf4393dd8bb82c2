# The two commands of the README. Each creates .venv with the pinned stack when missing.
PY := .venv/bin/python
# tools/make_venv.sh installs without byte-compiling (--no-compile): Python writes the bytecode
# of the modules a run imports, once, where a machine's environment would forbid it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-one test-openmmlab1 test-matrix venv bench docs clean

# The demo's driver, model and data writers are in demo/, outside the installed package.
demo: venv
	$(PY) -m demo

# First the openmmlab1 leg (OpenMMLab 1.x, the only test of its adapter: never left out),
# then the whole suite on the pinned stack (the slowest tests are listed at the end; under
# .ci/run's deadline, those of tests/ci_budget.py give way, loudly, when it cannot fit), then
# the version matrix's other CI legs, in priority order: torch 1.9.1 and 1.12.1 on a real
# Python 3.8, the newest torch served, 1.13.1 and 2.1.2 (tools/version_matrix.sh --ci; under
# the deadline a leg that cannot finish in time is left out, loudly).
test: venv
	bash tools/version_matrix.sh --ci-first
	$(PY) -m pytest tests -p no:cacheprovider -q --durations=25
	bash tools/version_matrix.sh --ci

# One test file or node id on the pinned stack: make test-one T=tests/test_usage_record.py
test-one: venv
	$(PY) -m pytest $(T) -p no:cacheprovider -q

# The OpenMMLab 1.x tests alone: the openmmlab1 leg (its Python 3.8 venv built when missing).
test-openmmlab1:
	bash tools/version_matrix.sh openmmlab1

# Every leg of the version matrix, without a deadline (docs/compatibility.md).
test-matrix:
	bash tools/version_matrix.sh

# Quick when .venv matches the pins (tools/make_venv.sh compares a stamp).
venv:
	bash tools/make_venv.sh

bench: venv
	$(PY) benchmarks/bench_step_time.py

# README.md and docs/ (docs/conf.py says why the source folder is the repository root);
# tests/test_docs.py runs the same build, so `make test` fails on a warning too.
docs: venv
	$(PY) -m sphinx -W --keep-going -b html -c docs . build/docs
	@echo "Open build/docs/docs/index.html"

clean:
	rm -rf .venv .venvs work_dirs
