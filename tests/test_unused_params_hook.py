"""UnusedParamsHook against the truth, in the three settings it supports."""
import json
import os.path as osp

import pytest

from tests.dist_utils import DistributedRunError, run_distributed
from tests.equivalence import assert_hook_matches_truth, named_unused
from tests.scenarios import (GRADS_ZEROED_IN_PLACE, collectives_during_training,
                             strict_stop_in_a_runner, train_toy_runner)

PATTERNS = ['dead_layer', 'skip_odd', 'rank_dependent', 'output_not_in_loss']
WRAPPERS = {
    'guarded_ddp': dict(type='GuardedDDP'),
    'mmddp_find_unused': dict(type='CPUCompatibleMMDDP', find_unused_parameters=True),
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize('wrapper', sorted(WRAPPERS))
@pytest.mark.parametrize('pattern', PATTERNS)
def test_two_ranks_report_exactly_the_truth(tmp_path, wrapper, pattern):
    results = run_distributed(train_toy_runner, str(tmp_path), pattern, WRAPPERS[wrapper])
    result = results[0]
    assert_hook_matches_truth(result)
    # Only rank 0 writes; every rank accumulated the same gathered record.
    assert results[1]['statistics'] == result['statistics']
    assert result['statistics']['iterations_seen'] == 6
    # One set of autograd hooks: the wrapper's record when there is one.
    assert result['record_is_wrappers'] == (wrapper == 'guarded_ddp')
    assert set(result['post_accumulate_hooks']) == {1}
    # The log line's unused_params of every iteration: unused on at least one rank.
    assert result['scalar'] == [len(set().union(*map(set, line['unused_per_rank'])))
                                for line in result['lines']]
    # Each unused parameter of these patterns is unreached: plain DDP fails on every rank
    # that left some.
    assert [line.get('ranks_left_unreached', 0) for line in result['lines']] == \
        [sum(map(bool, truth)) for truth in result['truth']]


@pytest.mark.timeout(300)
@pytest.mark.parametrize('wrapper', sorted(WRAPPERS))
def test_per_rank_detail_costs_one_exchange_per_log_line_or_none(tmp_path, wrapper):
    """Under DDP's graph search the ranks exchange their masks once per LoggerHook line (here
    every 3 iterations), not once per iteration, and the record is still exact; under
    GuardedDDP the detail rides DDP's buckets and the hook adds no collective."""
    work_dir = str(tmp_path / 'with_hook')
    results = run_distributed(train_toy_runner, work_dir, 'rank_dependent',
                              WRAPPERS[wrapper], log_interval=3)
    assert_hook_matches_truth(results[0])
    assert results[0]['scalar'] == [len(set().union(*map(set, line['unused_per_rank'])))
                                    for line in results[0]['lines']]
    # The same dead layer on every rank: GuardedDDP needs no rank identities at all.
    counts = {hook: run_distributed(collectives_during_training, str(tmp_path / str(hook)),
                                    'dead_layer', WRAPPERS[wrapper], log_interval=3,
                                    hook=hook)[0]
              for hook in (True, False)}
    exchanges = 2 if wrapper == 'mmddp_find_unused' else 0
    assert counts[True] - counts[False] == exchanges, counts


@pytest.mark.timeout(300)
@pytest.mark.parametrize('wrapper', sorted(WRAPPERS) + ['plain_ddp'])
def test_undefined_gradients_alone_are_reported_and_do_not_fail_plain_ddp(tmp_path, wrapper):
    """Rank 1's gate gets an undefined gradient every iteration, nothing is unreached: plain
    DDP trains (zeros reduced), so the hook must neither stop it nor say it would fail."""
    wrappers = dict(WRAPPERS, plain_ddp=dict(type='CPUCompatibleMMDDP',
                                             find_unused_parameters=False))
    results = run_distributed(train_toy_runner, str(tmp_path), 'undefined_grad_only',
                              wrappers[wrapper], log_interval=3)
    result = results[0]
    assert_hook_matches_truth(result)
    # From the second iteration on, a gradient zeroed in place (torch < 2.0's zero_grad)
    # makes the gate's undefined gradient a defined one, which DDP counts as used.
    later = [[], []] if GRADS_ZEROED_IN_PLACE else [[], ['gate']]
    assert [named_unused(result, line) for line in result['lines']] == \
        [[[], ['gate']]] + [later] * 5
    assert all('ranks_left_unreached' not in line for line in result['lines'])
    assert result['statistics']['first_unreached_iteration'] is None
    with open(osp.join(tmp_path, 'unused_params_summary.json')) as f:
        verdict = json.load(f)['verdict']
    assert verdict['plain_ddp_fails'] is False and verdict['plain_ddp_outcome'] == 'ok'
    assert verdict['recommended_setting'] == "model_wrapper_cfg = dict(type='GuardedDDP')"
    assert verdict['why'].startswith('only undefined gradients: plain DDP would train')
    with open(osp.join(tmp_path, 'unused_params_summary.txt')) as f:
        text = f.read()
    assert 'Would plain DDP have failed? no: plain DDP (find_unused_parameters=False) would ' \
           'not fail on these: autograd reached them all' in text


def test_single_process_predicts_the_multi_gpu_failure(tmp_path):
    result = train_toy_runner(0, 1, str(tmp_path), 'skip_odd')
    assert_hook_matches_truth(result)
    with open(osp.join(tmp_path, 'unused_params_summary.json')) as f:
        summary = json.load(f)
    assert summary['verdict']['plain_ddp_fails'] is True
    assert summary['verdict']['plain_ddp_first_failure_iteration'] == 0
    rows = {p['name']: p for p in summary['parameters']}
    assert rows['branch.weight']['iterations_unused'] == 3
    assert rows['dead.bias']['iterations_unused'] == 6
    assert rows['dead.weight']['shape'] == [16, 16]
    assert rows['dead.weight']['module_type'] == 'Linear'
    assert osp.getsize(osp.join(tmp_path, 'unused_params_summary.png')) > 1000
    with open(osp.join(tmp_path, 'unused_params_table.json')) as f:
        assert len(json.load(f)) == 10


def test_no_unused_parameters_means_plain_ddp_would_work(tmp_path):
    result = train_toy_runner(0, 1, str(tmp_path), 'none')
    assert all(line['unused_per_rank'] == [[]] for line in result['lines'])
    with open(osp.join(tmp_path, 'unused_params_summary.json')) as f:
        verdict = json.load(f)['verdict']
    assert verdict['plain_ddp_fails'] is False


def test_statistics_survive_checkpoint_and_resume(tmp_path):
    whole = train_toy_runner(0, 1, str(tmp_path / 'whole'), 'skip_odd', max_iters=8)
    resumed_dir = str(tmp_path / 'resumed')
    # Iterations 0-4 run; the checkpoint holds 0-3, so line 4 is written twice: once before
    # the "crash", once after the resume.
    train_toy_runner(0, 1, resumed_dir, 'skip_odd', max_iters=5, checkpoint_interval=4)
    resumed = train_toy_runner(0, 1, resumed_dir, 'skip_odd', max_iters=8, resume=True,
                               checkpoint_interval=4)
    assert [line['iter'] for line in resumed['lines']] == list(range(8))
    assert resumed['lines'] == [dict(line) for line in whole['lines']]
    assert resumed['statistics'] == whole['statistics']
    with open(osp.join(resumed_dir, 'unused_params_summary.json')) as f:
        summary = json.load(f)
    assert summary['iterations_seen'] == 8
    assert {p['name']: p['iterations_unused'] for p in summary['parameters']} == {
        'branch.weight': 4, 'branch.bias': 4, 'dead.weight': 8, 'dead.bias': 8}


@pytest.mark.parametrize('kwargs, error, words', [
    (dict(interval=0), ValueError, 'interval must be a positive integer'),
    (dict(interval=-5), ValueError, 'interval must be a positive integer'),
    (dict(interval=2.5), ValueError, 'interval must be a positive integer'),
    (dict(max_modules_in_log=0), ValueError, 'max_modules_in_log must be a positive'),
    (dict(intervall=5), TypeError, r"unknown option\(s\) \['intervall'\]"),
])
def test_bad_options_are_named(kwargs, error, words):
    from mmdet3d_ddp_guard import UnusedParamsHook
    with pytest.raises(error, match=words):
        UnusedParamsHook(**kwargs)


def test_unwritable_out_dir_is_named(tmp_path):
    blocker = tmp_path / 'a_file'
    blocker.write_text('not a folder')
    with pytest.raises(OSError, match="out_dir='.*a_file/sub'"):
        train_toy_runner(0, 1, str(tmp_path / 'work'), 'skip_odd',
                         custom_hooks=[dict(type='UnusedParamsHook',
                                            out_dir=str(blocker / 'sub'))])


@pytest.mark.timeout(200)
def test_under_plain_ddp_fast_path_it_stops_clearly_instead_of_hanging(tmp_path):
    """Gathering across ranks would wait behind DDP's unfinished bucket all-reduce."""
    with pytest.raises(DistributedRunError) as raised:
        run_distributed(train_toy_runner, str(tmp_path), 'rank_dependent',
                        dict(type='CPUCompatibleMMDDP', find_unused_parameters=False),
                        timeout=150)
    text = str(raised.value)
    assert 'UnusedParametersError' in text and 'dead.weight' in text
    assert 'timeout' not in text.split('\n')[0]


@pytest.mark.timeout(300)
def test_the_file_holds_the_iteration_that_stopped_the_run(tmp_path):
    """The strict stop's timing with the hook attached: the hook asks the wrapper for the
    resolved iterations after the optimizer step and is handed the stop with them; it writes
    them, then raises the stop, in the same iteration's after_train_iter (runner.iter is
    still 0: the next forward never ran). Users need the file to hold the iteration that
    stopped the run, which ``summarize`` and the summary then name."""
    results = run_distributed(strict_stop_in_a_runner, str(tmp_path), 'skip_odd')
    for result in results:
        assert result['error'] is not None, result
        # The toy's dead layer is unused from the first iteration on.
        assert result['stopped_at'] == 0, result['error']
        assert result['runner_iter'] == 0, result
    assert results[0]['file_iterations'] == [0]
    assert results[0]['last_line']['ranks_left_unreached'] == 2
