# The two commands of the README. Each creates .venv with the pinned stack when missing.
PY := .venv/bin/python

.PHONY: demo test venv bench clean

demo: venv
	$(PY) -m mmdet3d_ddp_guard demo

test: venv
	$(PY) -m pytest tests -p no:cacheprovider -q

# Quick when .venv matches the pins (tools/make_venv.sh compares a stamp).
venv:
	bash tools/make_venv.sh

bench: venv
	$(PY) benchmarks/bench_step_time.py

clean:
	rm -rf .venv work_dirs
