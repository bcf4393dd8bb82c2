"""When MMEngine's UnusedParamsHook exchanges the ranks' masks (``_exchange_due``), as
arithmetic on the Runner's counters, without a process group: at LoggerHook's log lines, at
CheckpointHook's iteration checkpoints, at the end of each epoch and of training; never
where none of these falls. The same iterations on every rank, since every rank has the same
counters."""
from types import SimpleNamespace

import pytest

pytest.importorskip('mmengine')
from mmengine.hooks import CheckpointHook, LoggerHook  # noqa: E402

from mmdet3d_ddp_guard.openmmlab2.hooks.unused_params_hook import UnusedParamsHook  # noqa: E402


def exchanges(hooks, max_iters: int, epoch_length: int):
    """The iterations (0-based ``runner.iter``) after which the hook exchanges."""
    hook = UnusedParamsHook()
    due = []
    for iteration in range(max_iters):
        runner = SimpleNamespace(iter=iteration, max_iters=max_iters, hooks=hooks,
                                 train_dataloader=list(range(epoch_length)))
        if hook._exchange_due(runner, iteration % epoch_length):
            due.append(iteration)
    return due


def test_only_at_the_end_of_training_without_log_lines_or_checkpoints():
    assert exchanges([], max_iters=12, epoch_length=100) == [11]


def test_at_each_log_line_and_the_end():
    assert exchanges([LoggerHook(interval=5)], max_iters=12, epoch_length=100) == [4, 9, 11]


def test_at_each_epoch_end():
    assert exchanges([], max_iters=12, epoch_length=4) == [3, 7, 11]


def test_log_lines_count_within_the_epoch_as_logger_hook_does():
    # LoggerHook logs every 5 iterations of the epoch (batch_idx) and every 5 of training.
    assert exchanges([LoggerHook(interval=5)], max_iters=14, epoch_length=7) == \
        [4, 6, 9, 11, 13]


def test_at_iteration_checkpoints_but_not_epoch_ones():
    by_iteration = CheckpointHook(interval=4, by_epoch=False)
    assert exchanges([by_iteration], max_iters=10, epoch_length=100) == [3, 7, 9]
    assert exchanges([CheckpointHook(interval=4, by_epoch=True)], max_iters=10,
                     epoch_length=100) == [9]


def test_a_checkpoint_hook_s_save_begin_is_followed():
    hook = CheckpointHook(interval=3, by_epoch=False)
    if not hasattr(hook, 'save_begin'):
        pytest.skip('this MMEngine has no save_begin')
    late = CheckpointHook(interval=3, by_epoch=False, save_begin=6)
    # As CheckpointHook counts: runner.iter + 1 - save_begin, a multiple of the interval.
    assert exchanges([late], max_iters=12, epoch_length=100) == [5, 8, 11]
