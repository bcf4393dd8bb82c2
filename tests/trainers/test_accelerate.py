"""Hugging Face Accelerate with ``guard_ddp_builds()`` around ``accelerator.prepare``, against
Accelerate's own ``DistributedDataParallelKwargs(find_unused_parameters=True)``, on 2 gloo
ranks in one process group: the scale detector with its loss computed in the loop (a scale
left out where its batch has no target: rank 1 only in some steps, no rank in others), with
and without ``accelerator.accumulate``, bit for bit on every rank; and torch's DDP class is
back as it was after the block, also after one that raised. Run where Accelerate is
installed (the trainers leg of tools/version_matrix.sh)."""
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.pytorch import guard_ddp_builds
from tests.dist_utils import run_distributed
from tests.trainers.accelerate_runs import side_by_side
from tests.trainers.comparison import assert_each_case_trains_alike

pytest.importorskip('accelerate')

CASES = [dict(accumulate=1), dict(accumulate=2)]


def test_prepare_in_the_block_trains_as_accelerate_s_graph_search():
    results = run_distributed(side_by_side, CASES, timeout=240)
    assert_each_case_trains_alike(
        results, CASES, ('params', 'buffers', 'optimizer_state', 'none_grads', 'grads', 'losses'),
        ('BlockGuardedDDP', 'DistributedDataParallel'))
    # unwrap_model strips the guarded wrapper as it strips DDP; torch's class is back.
    assert all(runs['guarded']['unwrapped_is_detector']
               and runs['guarded']['ddp_class'] == 'DistributedDataParallel'
               for per_rank in results for runs in per_rank)


def test_the_block_puts_torch_s_class_back_also_when_it_raises():
    with pytest.raises(KeyError):
        with guard_ddp_builds():
            assert torch.nn.parallel.DistributedDataParallel is not DistributedDataParallel
            assert issubclass(torch.nn.parallel.DistributedDataParallel, DistributedDataParallel)
            raise KeyError('inside')
    assert torch.nn.parallel.DistributedDataParallel is DistributedDataParallel


def test_a_bad_mode_is_refused_before_anything_is_rebound():
    with pytest.raises(ValueError, match='find_unused_parameters'):
        with guard_ddp_builds(find_unused_parameters='yes'):
            pass
    assert torch.nn.parallel.DistributedDataParallel is DistributedDataParallel
