"""A plain loop's report: UnusedParamsReport, one line after the wrapper, writes which
parameters each rank left unused in every iteration to the files that ``summarize`` reads,
names them in the log, writes the summary at ``finish()``, and holds the iteration that
made a strict stop in the file before the stop is raised."""
import json
import os.path as osp
import subprocess
import sys

import pytest

from mmdet3d_ddp_guard.pytorch import UnusedParamsReport
from tests.dist_utils import run_until_exit
from tests.pytorch.loops import Run, _batches_of, guarded
from tests.pytorch.scale_detector import unused_names

pytestmark = pytest.mark.timeout(200)
STEPS = 6


def _train_with_the_report(rank: int, world_size: int, out_dir: str, mode, finish: bool):
    run = Run(guarded, **({} if mode == 'auto' else dict(find_unused_parameters=mode)))
    report = UnusedParamsReport(run.model, out_dir=out_dir, interval=2)
    for batches in _batches_of(rank, 'plain', STEPS, 1):
        run.step(rank, batches)
    if finish:
        report.finish()
    run.model.stall_watchdog.stop()


def _lines(out_dir: str):
    with open(osp.join(out_dir, 'unused_params_table.json')) as table_file:
        names = [row['name'] for row in json.load(table_file)]
    with open(osp.join(out_dir, 'unused_params.jsonl')) as lines_file:
        lines = [json.loads(line) for line in lines_file]
    return names, lines


@pytest.mark.parametrize('mode', ['auto', True], ids=['auto', 'graph_search'])
def test_every_iteration_of_every_rank_is_in_the_files_and_the_log(tmp_path, mode):
    ranks = run_until_exit(_train_with_the_report, str(tmp_path), mode, True, timeout=90)
    assert [rank.exitcode for rank in ranks] == [0, 0], ranks[0].output[-3000:]
    names, lines = _lines(str(tmp_path))
    assert [line['iter'] for line in lines] == list(range(STEPS))
    for line in lines:
        assert [sorted(names[i] for i in ids) for ids in line['unused_per_rank']] == \
            [unused_names(rank, line['iter']) for rank in range(2)]
    log = ranks[0].output
    assert 'UnusedParamsReport: iteration 1: 4 parameters unused (0 on every rank)' in log
    assert 'only on rank(s) 1:' in log and 'heads.2 (Conv2d)' in log
    assert 'UnusedParamsReport summary' in log
    assert 'Setting that fits: from mmdet3d_ddp_guard.pytorch import GuardedDDP; ' \
           'model = GuardedDDP(model)' in log
    for suffix in ('summary.txt', 'summary.json'):
        assert osp.isfile(osp.join(str(tmp_path), f'unused_params_{suffix}'))


def test_without_finish_summarize_rebuilds_the_summary(tmp_path):
    """(The summary written at the interpreter's exit: tests/pytorch/test_plain_torchrun.py;
    these ranks leave through os._exit.)"""
    ranks = run_until_exit(_train_with_the_report, str(tmp_path), 'auto', False, timeout=90)
    assert [rank.exitcode for rank in ranks] == [0, 0]
    # The last iteration is resolved at the next forward, which never came.
    assert [line['iter'] for line in _lines(str(tmp_path))[1]] == list(range(STEPS - 1))
    rebuilt = subprocess.run([sys.executable, '-m', 'mmdet3d_ddp_guard', 'summarize',
                              str(tmp_path), '--framework', 'torch', '--no-plot'],
                             capture_output=True, text=True)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert 'Rebuilt from 5 iterations' in rebuilt.stdout
    assert 'model = GuardedDDP(model)' in rebuilt.stdout


def _strict_with_the_report(rank: int, world_size: int, out_dir: str):
    run = Run(guarded, find_unused_parameters=False)
    UnusedParamsReport(run.model, out_dir=out_dir)
    for batches in _batches_of(rank, 'plain', STEPS, 1):
        run.step(rank, batches)


def test_the_file_holds_the_iteration_that_made_the_strict_stop(tmp_path):
    ranks = run_until_exit(_strict_with_the_report, str(tmp_path), timeout=90)
    for rank in ranks:
        assert rank.exitcode == 1 and 'UnusedParametersError' in rank.output
    assert [line['iter'] for line in _lines(str(tmp_path))[1]] == [0, 1]


def test_the_report_needs_the_guarded_wrapper_and_a_folder():
    import torch
    with pytest.raises(TypeError, match='GuardedDDP'):
        UnusedParamsReport(torch.nn.Linear(1, 1), out_dir='x')


def test_check_says_plainly_what_it_does_for_a_loop_without_a_config(tmp_path):
    """Where torch alone is installed, ``check`` has no config to simulate: it says so, and
    what to use instead, with the usage exit code."""
    from mmdet3d_ddp_guard.rank_simulation.config_framework import config_frameworks
    if config_frameworks():
        pytest.skip('an OpenMMLab framework is installed: check reads configs here')
    config = tmp_path / 'loop.py'
    config.write_text('x = 1\n')
    checked = subprocess.run([sys.executable, '-m', 'mmdet3d_ddp_guard', 'check', str(config),
                              '--world-size', '2'], capture_output=True, text=True)
    assert checked.returncode == 2
    assert checked.stdout.startswith('check: A plain PyTorch loop has no config for `check` '
                                     'to simulate. Train it under '
                                     'mmdet3d_ddp_guard.pytorch.GuardedDDP')
    assert 'To check a config, install MMEngine' in checked.stdout


def test_a_second_run_into_the_same_out_dir_keeps_the_first_run_s_file(tmp_path):
    for _ in range(2):
        ranks = run_until_exit(_train_with_the_report, str(tmp_path), 'auto', True,
                               timeout=90)
        assert [rank.exitcode for rank in ranks] == [0, 0]
    kept = list(tmp_path.glob('unused_params.jsonl.before-*'))
    assert len(kept) == 1 and len(kept[0].read_text().splitlines()) == STEPS
    assert f'it is now {kept[0]}' in ranks[0].output
