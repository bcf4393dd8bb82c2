"""Every script of benchmarks/ runs at its smallest size: it exits 0 and prints the table (or
writes the JSON) that docs/performance.md and its docstring show, so that no benchmark rots
between the runs whose figures the docs quote. Nothing here is a speed assertion: one
repetition of one step measures nothing.

Each script runs in a subprocess from the repository root, as the docs run it (under torchrun
where they do), with the root on ``PYTHONPATH`` and ``TMPDIR`` in the test's folder (the
benchmarks' own work dirs land there). ``nccl_sync_bn_record.py`` needs CUDA (SyncBatchNorm's
kernels have no CPU build): without a GPU only its import is checked. ``device_check.sh``,
the GPU machine's checks, runs every step in its smoke mode (``DEVICE_CHECK_SMOKE=1``): on
the CPU, at the smallest size, its one-rank step time included (a world of one rank has no
stall guard to measure: the script raised "guarded_auto has no stall watchdog" there until
it learnt that).
"""
import importlib.util
import json
import re
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import pytest
import torch

from demo.launch import free_port, repository_importable
from tests.dist_utils import run_launcher
from tests.timeouts import scaled

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / 'benchmarks'
PERFORMANCE_DOC = REPO / 'docs' / 'performance.md'
#: Modules the scripts import, not scripts.
LIBRARIES = {'repo_root.py', 'zoo_overrides.py', 'zoo_render.py'}
DEVICE_CHECK = 'device_check.sh'
NEEDS_CUDA = 'nccl_sync_bn_record.py'

PLAIN, SEARCH = 'ddp_find_unused_false', 'ddp_find_unused_true'
GUARDED, GUARDED_NO_STALL_GUARD = 'guarded_auto', 'guarded_auto_stall_off'
# bench_step_time.py's wrappers per model: plain DDP only where it can train the model.
NO_UNUSED_WRAPPERS = {PLAIN, GUARDED, GUARDED_NO_STALL_GUARD, SEARCH}
RANK_DIVERGENT_WRAPPERS = {SEARCH, GUARDED}
STEP_TIME_ARGS = ['--device', 'cpu', '--backend', 'gloo', '--repetitions', '1', '--steps',
                  '1', '--warmup', '1', '--batch-size', '1', '--in-channels', '1', '--width',
                  '1', '--layers-per-stage', '1', '--size', '8', '--chain-width', '1']
# An -amp config: the zoo reads it with MMEngine and skips it (a GPU's mixed precision)
# without importing mmdet3d's models, the cheapest row there is.
ZOO_CONFIG = 'pointpillars/pointpillars_hv_fpn_sbn-all_8xb2-amp-2x_nus-3d.py'
ZOO_ROW_KEYS = {'config', 'family', 'status', 'reason', 'unused', 'plain_ddp_8',
                'sets_find_unused', 'needs_find_unused', 'guarded_ddp_trained',
                'seconds_per_step', 'zoo_version'}
#: The project's own zoo files, which a run with --out elsewhere must leave as they are.
ZOO_FILES = (REPO / 'docs' / 'zoo' / 'zoo.json', REPO / 'docs' / 'zoo' / 'README.md',
             REPO / 'docs' / 'compatibility.md')


def torchrun(nproc: int) -> List[str]:
    return ['-m', 'torch.distributed.run', f'--nproc_per_node={nproc}',
            f'--master_port={free_port()}']


def run_script(arguments: Sequence[str], tmp_path: Path, timeout: float,
               env: Dict[str, str] = None, program: Sequence[str] = (sys.executable, )) -> str:
    """``python ARGUMENTS`` (or ``PROGRAM ARGUMENTS``) from the repository root; its stdout
    (the ranks' warnings, on stderr, cannot split a line of the table). A run past
    ``timeout`` (quiet-machine seconds, scaled) is killed with every process it started
    (torchrun's workers run in sessions of their own) and fails the test with its output and
    every process's stacks (``run_launcher``)."""
    command = [*program, *arguments]
    run = run_launcher(command, timeout,
                       repository_importable(dict(env or {}, TMPDIR=str(tmp_path))), cwd=REPO)
    assert run.returncode == 0, (f'{" ".join(command)} exited {run.returncode}:\n'
                                 f'{run.stdout[-2000:]}\n{run.stderr[-3000:]}')
    return run.stdout


def documented_line(output: str, starts_with: str) -> str:
    """The printed line that starts with ``starts_with`` (after spaces), which must be one
    of docs/performance.md's lines as well."""
    lines = [line.rstrip() for line in output.splitlines()
             if line.lstrip().startswith(starts_with)]
    assert lines, f'no line starting with {starts_with!r}:\n{output[-3000:]}'
    documented = {line.rstrip() for line in PERFORMANCE_DOC.read_text().splitlines()}
    assert lines[0] in documented, f'{lines[0]!r} is not the header docs/performance.md shows'
    return lines[0]


# ---------------------------------------------------------------------------------------
# What each script must print or write


def check_step_time(output: str, tmp_path: Path, chain_depths: Sequence[int]) -> None:
    documented_line(output, 'model ')
    models = {'bev_no_unused': NO_UNUSED_WRAPPERS,
              'bev_rank_divergent': RANK_DIVERGENT_WRAPPERS}
    for depth in chain_depths:
        models[f'chain{depth}_no_unused'] = NO_UNUSED_WRAPPERS
        models[f'chain{depth}_rank_divergent'] = RANK_DIVERGENT_WRAPPERS
    rows = re.findall(r'^(\w+) +\d+ +(\w+) +[\d.]+ +(?:[\d.]+|-) +[\d.]+ +[\d.]+ +[\d.]+$',
                      output, re.MULTILINE)
    assert sorted(rows) == sorted((model, wrapper) for model, wrappers in models.items()
                                  for wrapper in wrappers), output[-3000:]
    with open(tmp_path / 'step_time.json') as f:
        figures = json.load(f)
    assert set(figures) == {'args', 'results'}
    assert figures['args']['repetitions'] == 1 and figures['args']['chain_depths'] == list(
        chain_depths)
    assert {model: set(rows) for model, rows in figures['results'].items()} == models
    for wrappers in figures['results'].values():
        for row in wrappers.values():
            keys = {'step_ms', 'peak_mib', 'tensors', f'time_vs_{SEARCH}',
                    f'memory_vs_{SEARCH}'}
            if PLAIN in wrappers:
                keys |= {f'time_vs_{PLAIN}', f'memory_vs_{PLAIN}'}
            assert set(row) == keys, row


def check_collective_record(output: str, tmp_path: Path) -> None:
    assert re.search(r'^torch \S+, gloo, world 1; median of 1 interleaved repetitions of 1 '
                     r'all_reduce calls$', output, re.MULTILINE), output[-3000:]
    assert re.search(r'^torch\.distributed\.all_reduce: [\d.]+ us per call; recorded: [\d.]+ '
                     r'us \([+-][\d.]+ us, [\d.]+ times\)$', output, re.MULTILINE), output


def check_stall_store(output: str, tmp_path: Path) -> None:
    assert re.search(r'^stall timeout 0\.1 s; one TCPStore; W watchdog threads$', output,
                     re.MULTILINE), output[-3000:]
    documented_line(output, 'W ')
    rows = re.findall(r'^ +(\d+) +(slow rank|hang)(?: +[\d.]+){9}$', output, re.MULTILINE)
    assert rows == [('2', 'slow rank'), ('2', 'hang')], output[-3000:]


def check_hook_cost(output: str, tmp_path: Path) -> None:
    assert 'median of 1 interleaved repetitions of 4 iterations, a log line every 1' in output
    documented_line(output, 'wrapper ')
    rows = re.findall(r'^(GuardedDDP|DDP find_unused=True) +[\d.]+ +[\d.]+ +[\d.]+$', output,
                      re.MULTILINE)
    assert rows == ['GuardedDDP', 'DDP find_unused=True'], output[-3000:]


def check_real_models(output: str, tmp_path: Path) -> None:
    runs = re.findall(r'^PointPillars \(KITTI\) +(GuardedDDP|DDP find_unused=True) +[\d.]+ s$',
                      output, re.MULTILINE)
    assert sorted(runs) == ['DDP find_unused=True', 'GuardedDDP'], output[-3000:]
    assert re.search(r'^model +DDP find_unused=True +GuardedDDP +ratio$', output,
                     re.MULTILINE), output[-3000:]
    table = re.findall(r'^(.+?) {2,}[\d.]+ +[\d.]+ +[\d.]+$', output, re.MULTILINE)
    assert table == ['PointPillars (KITTI)'], output[-3000:]


def check_trainers(output: str, tmp_path: Path) -> None:
    settings = re.findall(r'^(loop|hf|lightning): GPT-2 1 layers, 1 interleaved rounds of 1 '
                          r'steps, 2 ranks, gloo, cpu, torch \S+; median step:$', output,
                          re.MULTILINE)
    assert settings == ['loop', 'hf', 'lightning'], output[-3000:]
    rows = re.findall(r"^  (plain DDP|graph search|guard 'auto'|plain DDP again|plain \+ hook|"
                      r'plain \+ counts) +[\d.]+ ms +[\d.]+x plain DDP +[\d.]+x the graph '
                      r'search$', output, re.MULTILINE)
    assert len(rows) == 6 + 4 + 4, output[-3000:]
    # --profile: the plain loop's wrappers, the guard's comm hook and torch's among the rows.
    profiled = re.findall(r"^  profile of (plain DDP|graph search|guard 'auto'|plain \+ hook), "
                          r'ms per step .* [\d.]+ ms per step:$', output, re.MULTILINE)
    assert len(profiled) == 4, output[-3000:]
    assert re.search(r'^ +[\d.]+ ms +\d+  mmdet3d_ddp_guard/guard/unused_counts_comm_hook.py:'
                     r'\d+\(allreduce_with_unused_counts\)$', output, re.MULTILINE), output[-3000:]
    assert re.search(r'ddp_comm_hooks/default_hooks.py:\d+\(allreduce_hook\)$', output,
                     re.MULTILINE), output[-3000:]


def check_zoo(output: str, tmp_path: Path) -> None:
    assert re.search(r'^Classified \d+ configs: 0 pending, 0 ok, 1 skipped, 0 limitation, '
                     r'0 error$', output, re.MULTILINE), output[-3000:]
    with open(tmp_path / 'zoo' / 'zoo.json') as f:
        rows = json.load(f)
    assert [row['config'] for row in rows] == [ZOO_CONFIG]
    assert ZOO_ROW_KEYS <= set(rows[0]), rows[0]
    assert '| family | configs |' in (tmp_path / 'zoo' / 'README.md').read_text()


# ---------------------------------------------------------------------------------------


@dataclass
class Benchmark:
    script: str
    #: The script's arguments after ``python``, given the test's folder.
    arguments: Callable[[Path], List[str]]
    check: Callable[[str, Path], None]
    #: Seconds the run may take on a quiet machine (scaled), a hang detector.
    timeout: float
    needs: Sequence[str] = ('mmengine', )
    env: Callable[[], Dict[str, str]] = field(default=dict)
    #: Files of the checkout the run must leave as they are.
    keeps: Sequence[Path] = ()


def _script(name: str) -> str:
    return str(BENCHMARKS / name)


BENCHMARK_RUNS = {
    # 2 gloo ranks, the documented command; the chain sweep at its smallest depth.
    'bench_step_time_2ranks': Benchmark(
        'bench_step_time.py',
        lambda tmp: torchrun(2) + [_script('bench_step_time.py'), *STEP_TIME_ARGS,
                                   '--chain-depths', '1', '--out', str(tmp / 'step_time.json')],
        lambda output, tmp: check_step_time(output, tmp, [1]), timeout=120),
    'bench_collective_record': Benchmark(
        'bench_collective_record.py',
        lambda tmp: [_script('bench_collective_record.py'), '--repetitions', '1', '--calls',
                     '1'],
        check_collective_record, timeout=60, needs=(),
        env=lambda: dict(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()))),
    # 2 simulated ranks rather than 1, at the same cost: a judge, and a rank that reads the
    # verdict.
    'bench_stall_store': Benchmark(
        'bench_stall_store.py',
        lambda tmp: [_script('bench_stall_store.py'), '--world-sizes', '2', '--timeout', '0.1'],
        check_stall_store, timeout=60, needs=()),
    # Fewer iterations leave none: the first 3 of each run are dropped.
    'bench_hook_cost': Benchmark(
        'bench_hook_cost.py',
        lambda tmp: torchrun(2) + [_script('bench_hook_cost.py'), '--repetitions', '1',
                                   '--iters', '4', '--log-interval', '1'],
        check_hook_cost, timeout=150),
    # The cheapest of its models; the first iteration is dropped, so 2. Writes data/tiny
    # (ignored by git, what the example configs read) when it is missing, as documented.
    'bench_real_models': Benchmark(
        'bench_real_models.py',
        lambda tmp: [_script('bench_real_models.py'), '--models', 'pointpillars', '--iters',
                     '2', '--repetitions', '1'],
        check_real_models, timeout=400, needs=('mmengine', 'mmdet3d')),
    # The trainers' packages are in the pytorch leg's venv only, which runs this case.
    'bench_trainers': Benchmark(
        'bench_trainers.py',
        lambda tmp: torchrun(2) + [_script('bench_trainers.py'), '--layers', '1', '--rounds',
                                   '1', '--steps', '1', '--profile'],
        check_trainers, timeout=240, needs=('transformers', 'lightning')),
    'zoo': Benchmark(
        'zoo.py',
        lambda tmp: [_script('zoo.py'), '--classify', '--only', f'^{re.escape(ZOO_CONFIG)}$',
                     '--out', str(tmp / 'zoo'), '--data-root', str(tmp / 'zoo_data'),
                     '--work-root', str(tmp / 'zoo_work')],
        check_zoo, timeout=60, needs=('mmengine', 'mmdet3d'), keeps=ZOO_FILES),
}
#: pytest-timeout's limit of each run: its subprocess's, and time to report it.
MARGIN = 30


@pytest.mark.parametrize('name', [
    pytest.param(name, id=name, marks=pytest.mark.timeout(run.timeout + MARGIN))
    for name, run in BENCHMARK_RUNS.items()])
def test_benchmark_runs_at_its_smallest_size(name, tmp_path):
    run = BENCHMARK_RUNS[name]
    missing = [module for module in run.needs if importlib.util.find_spec(module) is None]
    if missing:
        pytest.skip(f'{run.script} needs {", ".join(missing)}')
    kept = {path: path.read_bytes() for path in run.keeps if path.is_file()}
    # The figures of docs/performance.md are CPU figures, here too on a machine with a GPU.
    output = run_script(run.arguments(tmp_path), tmp_path, run.timeout,
                        dict(run.env(), CUDA_VISIBLE_DEVICES=''))
    run.check(output, tmp_path)
    assert {path: path.read_bytes() for path in run.keeps if path.is_file()} == kept, \
        f'{run.script} changed files of the checkout'


@pytest.mark.timeout(60)
def test_nccl_sync_bn_record_imports_without_cuda():
    """It cannot run here, but it must not rot: its module runs to the definitions."""
    module = runpy.run_path(_script(NEEDS_CUDA), run_name='nccl_sync_bn_record')
    assert callable(module['main'])
    assert {'all_gather_single', 'all_gather_into_tensor'} <= set(module['GATHERS'])


@pytest.mark.timeout(150)
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs CUDA: SyncBatchNorm's kernels have no CPU build")
def test_nccl_sync_bn_record_runs_on_one_gpu(tmp_path):
    """World size 1: torch's SyncBatchNorm function through the record, on NCCL."""
    output = run_script(torchrun(1) + [_script(NEEDS_CUDA)], tmp_path, 120)
    assert re.search(r'^rank 0: torch \S+, NCCL, world size 1: recorded \[', output,
                     re.MULTILINE), output[-3000:]


@pytest.mark.timeout(300)
def test_the_device_check_runs_every_step_in_its_smoke_mode(tmp_path):
    """On the CPU: the GPU-only steps skip, the others run at their smallest size."""
    out = tmp_path / 'out'
    run_script([str(BENCHMARKS / DEVICE_CHECK)], tmp_path, 270,
               dict(DEVICE_CHECK_SMOKE='1', PYTHON=sys.executable, OUT=str(out),
                    DEVICE_CHECK_LIMIT_SCALE=f'{scaled(1.0):.2f}', CUDA_VISIBLE_DEVICES=''),
               program=('bash', ))
    summary = (out / 'summary.txt').read_text()
    for step in ('tests_cuda_fast_path', 'bench_step_time', 'tests_equivalence_1rank',
                 'tests_equivalence_2ranks'):
        assert re.search(rf'^   {step}: exit 0 after \d+ s$', summary, re.MULTILINE), summary
    assert '== nccl_sync_bn_record: skipped, no CUDA' in summary
    assert '1 passed' in (out / 'tests_equivalence_2ranks.txt').read_text()
    figures = json.loads((out / 'bench_step_time.json').read_text())
    assert set(figures['results']) == {'bev_no_unused', 'bev_rank_divergent'}
    assert set(figures['results']['bev_no_unused']) == NO_UNUSED_WRAPPERS
    profiles = (out / 'bench_profile.txt').read_text()
    assert '== bev_rank_divergent, guarded_auto: 1 profiled steps' in profiles


@pytest.mark.timeout(10)
def test_every_benchmark_script_is_run_here():
    scripts = ({path.name for path in BENCHMARKS.glob('*.py')} - LIBRARIES
               | {path.name for path in BENCHMARKS.glob('*.sh')})
    covered = {run.script for run in BENCHMARK_RUNS.values()} | {NEEDS_CUDA, DEVICE_CHECK}
    assert scripts == covered, 'a benchmark script without a smoke run here, or a run of ' \
        'a script that is gone'
