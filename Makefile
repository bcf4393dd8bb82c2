# The two commands of the README. Each creates .venv with the pinned stack when missing.
PY := .venv/bin/python

.PHONY: demo test test-main test-matrix venv bench docs clean

demo: venv
	$(PY) -m mmdet3d_ddp_guard demo

# The whole suite on the pinned stack, then the version matrix (tools/version_matrix.sh:
# torch 1.13.1 on Python 3.8, 2.1.2 and 2.14.1, each in a venv of its own under .venvs/).
test: test-main test-matrix

test-main: venv
	$(PY) -m pytest tests -p no:cacheprovider -q

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
