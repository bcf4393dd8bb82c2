# The two commands of the README. Each creates .venv with the pinned stack when missing.
PY := .venv/bin/python
# tools/make_venv.sh installs without byte-compiling (--no-compile): Python writes the bytecode
# of the modules a run imports, once, where a machine's environment would forbid it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-quick test-one test-openmmlab1 test-matrix venv bench docs clean

# The demo's driver, model and data writers are in demo/, outside the installed package.
demo: venv
	$(PY) -m demo

# tools/ci_test.sh: first the openmmlab1 and pytorch legs (OpenMMLab 1.x and torch alone,
# the only tests of their adapters with their framework alone: never left out), then the
# whole suite on the pinned stack (the slowest tests are listed at the end; under .ci/run's
# deadline, those of tests/ci_budget.py give way, loudly, when it cannot fit) while the other
# CI legs' venvs build, then those legs, in priority order: torch 1.9.1 on a real Python 3.8,
# the newest torch served, 1.13.1 and 2.1.2 (tools/version_matrix.sh --ci; under the deadline
# a leg that cannot finish in time is left out, loudly).
test: venv
	bash tools/ci_test.sh

# The edit loop's tests: the package's unit tests and its fast 1- to 3-rank gloo tests, chosen
# by measured duration to end in under 5 minutes on a quiet 2-core machine (4 min 16 s there,
# 2026-12-04: 276 tests in 184 s, then the 46 below in 63 s): the usage record, completion in each
# mode, training bit for bit against DDP's graph search and the DDP contract, the hook, `check`,
# `summarize`, the stall guard's judgement and watchdog, and three of its 2-rank cases, the
# plain PyTorch adapter's loops and modes against torch's own DDP. Then the
# mmcv 1.x adapter's core, from the checkout, in the openmmlab1 leg's venv (built when missing,
# as `make test` does): what the import guards and the config's keys mean, every backward shape
# trained by a real mmcv IterBasedRunner as mmcv's own DDP, bit for bit on 2 ranks (one launch),
# the hook's exchange arithmetic, the fix lines, and its step's calls, down and in order. Not the mmdet3d end-to-end, torchrun, zoo,
# cost or tooling (tests/tooling/) tests, nor the version matrix: `make test` runs everything,
# these included. Listed here, in one place, rather than marked in each file: a node id can
# pick a slow file's fast cases, and a name that no longer exists fails the run instead of
# silently dropping out.
QUICK_TESTS := \
	tests/test_usage_record.py tests/test_step_backwards.py tests/test_enums.py \
	tests/test_guarded_ddp_options.py tests/test_guarded_ddp_training.py \
	tests/test_compat_graphs.py tests/test_three_rank_rounding.py tests/test_ddp_contract.py \
	tests/test_torch_versions.py tests/test_collective_budget.py \
	tests/test_join_under_the_guard.py tests/test_unused_params_hook.py \
	tests/test_hook_faults.py tests/test_checkpoint_safe_globals.py \
	tests/test_outcome_words.py tests/test_fix_lines.py tests/test_check_command.py \
	tests/test_summarize_command.py tests/test_summary_plot.py tests/test_rank_simulation.py \
	tests/test_forward_collectives.py tests/test_collective_functions.py \
	tests/test_stall_diagnosis.py tests/test_stall_watchdog_faults.py \
	'tests/test_stall_guard.py::test_sync_bn_in_a_branch_some_ranks_skip[2_ranks-nonblocking]' \
	'tests/test_stall_guard.py::test_a_rank_that_raises_while_the_others_wait[2_ranks]' \
	'tests/test_stall_guard.py::test_waiting_for_one_slow_rank_is_not_a_hang[slow_rank_syncs-2_ranks-blocking]' \
	tests/test_layout.py tests/test_python38_syntax.py tests/test_import_changes.py \
	tests/test_training_changes.py tests/test_exchange_due.py tests/test_one_way_step.py \
	tests/pytorch/test_plain_loop.py tests/pytorch/test_plain_modes.py
QUICK_OPENMMLAB1_TESTS := \
	tests/openmmlab1/test_openmmlab1_adapter.py tests/openmmlab1/test_step_backwards.py \
	tests/openmmlab1/test_exchange_due_mmcv.py tests/openmmlab1/test_fix_lines_mmcv1.py \
	tests/test_one_way_step.py
test-quick: venv
	$(PY) -m pytest $(QUICK_TESTS) -p no:cacheprovider -q --durations=10
	bash tools/version_matrix.sh --build openmmlab1
	PYTHONPATH=$(CURDIR) .venvs/openmmlab1/bin/python -m pytest $(QUICK_OPENMMLAB1_TESTS) \
		-p no:cacheprovider -q --durations=5

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

# The step-time benchmark as docs/performance.md runs it: 2 gloo ranks on the CPU, every
# wrapper interleaved, medians (minutes). Every script of benchmarks/ runs at its smallest
# size in the suite (tests/tooling/test_benchmarks_run.py).
bench: venv
	$(PY) -m torch.distributed.run --nproc_per_node 2 benchmarks/bench_step_time.py

# README.md and docs/ (docs/conf.py says why the source folder is the repository root);
# tests/tooling/test_docs.py runs the same build, so `make test` fails on a warning too.
docs: venv
	$(PY) -m sphinx -W --keep-going -b html -c docs . build/docs
	@echo "Open build/docs/docs/index.html"

clean:
	rm -rf .venv .venvs work_dirs
