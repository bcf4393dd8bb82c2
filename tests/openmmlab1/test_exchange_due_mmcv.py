"""When mmcv 1.x's UnusedParamsHook exchanges the ranks' masks (``_exchange_due``), as
arithmetic on the runner's counters, without a process group: at the logger hooks' lines,
the iteration *before* CheckpointHook's iteration checkpoints (the hook's state is taken at
``before_train_iter``, so the one that a checkpoint saves must be resolved by then), at the
end of each epoch and of training."""
from types import SimpleNamespace

import pytest

pytest.importorskip('mmcv.runner')
from mmcv.runner import CheckpointHook, TextLoggerHook  # noqa: E402

from mmdet3d_ddp_guard.openmmlab1.unused_params_hook import UnusedParamsHook  # noqa: E402


def exchanges(hooks, max_iters: int, epoch_length: int):
    """The iterations (0-based ``runner.iter``) after which the hook exchanges."""
    hook = UnusedParamsHook()
    due = []
    for iteration in range(max_iters):
        runner = SimpleNamespace(iter=iteration, inner_iter=iteration % epoch_length,
                                 max_iters=max_iters, _max_iters=max_iters, hooks=hooks,
                                 data_loader=list(range(epoch_length)))
        if hook._exchange_due(runner):
            due.append(iteration)
    return due


def test_only_at_the_end_of_training_without_log_lines_or_checkpoints():
    assert exchanges([], max_iters=12, epoch_length=100) == [11]


def test_at_each_log_line_within_the_epoch_and_of_training():
    assert exchanges([TextLoggerHook(interval=5)], max_iters=14, epoch_length=7) == \
        [4, 6, 9, 11, 13]


def test_the_iteration_before_each_iteration_checkpoint():
    # mmcv saves after iterations 3 and 7 (every 4) and the last one (9): the exchange
    # comes one iteration earlier, and at the end.
    hook = CheckpointHook(interval=4, by_epoch=False, save_last=True)
    assert exchanges([hook], max_iters=10, epoch_length=100) == [2, 6, 8, 9]
    assert exchanges([CheckpointHook(interval=4, by_epoch=True)], max_iters=10,
                     epoch_length=100) == [9]
