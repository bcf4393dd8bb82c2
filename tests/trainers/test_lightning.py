"""PyTorch Lightning's Trainer with ``GuardedDDPStrategy()``, against the same Trainer with
Lightning's ``DDPStrategy(find_unused_parameters=True)``, on 2 gloo ranks in one process
group: the scale detector whose loss leaves a scale out where its batch has no target (rank 1
only in some steps, no rank in others), trained bit for bit alike on every rank (parameters,
buffers, AdamW state, the gradients of each optimizer step and which were None, the losses)
in the shapes Lightning users write: the loss returned, a dict with the predictions beside
it, gradient accumulation, manual optimization, and ``fit`` resumed from a checkpoint.
Run where Lightning is installed (the trainers leg of tools/version_matrix.sh)."""
import importlib.util

import pytest

from tests.dist_utils import DistributedRunError, run_distributed
from tests.equivalence import assert_state_equal
from tests.trainers.comparison import assert_each_case_trains_alike
from tests.trainers.lightning_runs import side_by_side

pytest.importorskip('pytorch_lightning')

#: Each case: what training_step does, with accumulation or a resume in the middle.
CASES = [dict(shape='loss'), dict(shape='dict'), dict(shape='manual'),
         dict(shape='loss', accumulate=2), dict(shape='dict', accumulate=2),
         dict(shape='dict', resume_at=3), dict(shape='manual', resume_at=3)]


def assert_same_training(results, cases):
    assert_each_case_trains_alike(
        results, cases, ('params', 'buffers', 'optimizer_state', 'none_grads', 'grads', 'losses',
                         'global_step'), ('LightningGuardedDDP', 'DistributedDataParallel'))
    for case_runs in zip(*results):
        assert_state_equal(case_runs[1]['guarded']['params'], case_runs[0]['guarded']['params'],
                           'rank 1 against rank 0')


def test_the_guarded_strategy_trains_as_lightning_s_graph_search(tmp_path):
    results = run_distributed(side_by_side, CASES, str(tmp_path), timeout=240)
    assert_same_training(results, CASES)
    # The decision and its revisions reach Lightning's own logger, from rank 0 only.
    rank0_lines = results[0][0]['guarded']['guard_lines']
    assert any(line.startswith('[rank 0] GuardedDDPStrategy decision') for line in rank0_lines)
    assert results[1][0]['guarded']['guard_lines'] == []


@pytest.mark.skipif(importlib.util.find_spec('lightning') is None,
                    reason='the unified lightning package is not installed')
def test_the_guarded_strategy_serves_lightning_pytorch_too(tmp_path):
    cases = [dict(shape='dict', package='lightning.pytorch'),
             dict(shape='manual', package='lightning.pytorch')]
    assert_same_training(run_distributed(side_by_side, cases, str(tmp_path), timeout=240),
                         cases)


def _strict(rank, world_size, root):
    from tests.trainers.lightning_runs import train
    return train(rank, world_size, 'guarded', shape='dict', root=root,
                 find_unused_parameters=False)


def test_strict_mode_stops_every_rank_with_the_parameters_and_the_fix(tmp_path):
    root = str(tmp_path)
    with pytest.raises(DistributedRunError) as error:
        run_distributed(_strict, root, timeout=240)
    text = str(error.value)
    assert 'UnusedParametersError' in text
    assert 'detector.necks.2.weight' in text
    assert "GuardedDDPStrategy(find_unused_parameters='auto')" in text or \
        'GuardedDDPStrategy()' in text


def test_an_unknown_argument_is_refused_with_what_the_strategy_takes():
    from mmdet3d_ddp_guard.lightning import GuardedDDPStrategy
    with pytest.raises(TypeError, match=r'GuardedDDPStrategy: unknown argument\(s\) '
                                        r'find_unused_params\. .*find_unused_parameters'):
        GuardedDDPStrategy(find_unused_params=True)
