"""Reentrant activation checkpointing (``torch.utils.checkpoint(use_reentrant=True)``, what
mmdet's ``with_cp=True`` backbones use) with parameters that go unused rank-dependently
inside and outside the checkpointed block.

DDP's graph search cannot train it: the parameters inside the block are not in the graph the
forward built, so DDP marks them unused, and then their gradients arrive during the
recomputing backward ("Expected to mark a variable ready only once"). GuardedDDP runs DDP's
fast path and completes only what autograd did not reach, so it trains it, with the result of
the non-reentrant run under DDP's graph search.
"""
import os.path as osp

import pytest

from demo.__main__ import REPO_CONFIGS, plain_ddp_options
from demo.launch import torchrun_train
from tests.dist_utils import DistributedRunError, run_distributed
from tests.equivalence import assert_trains_like_graph_search
from tests.scenarios import train_guarded_and_reference, train_toy
from tests.timeouts import scaled

# The toy's trunk (a block, used, and the branch, unused where iteration + rank is odd) is
# checkpointed; outside it the dead layer is unused everywhere and the aux head on rank 1.
PATTERN = 'frozen_shared_detached'
REENTRANT = dict(depth=1, checkpoint='reentrant')
NON_REENTRANT = dict(depth=1, checkpoint='non_reentrant')


@pytest.mark.timeout(200)
def test_ddp_graph_search_cannot_train_reentrant_checkpointing():
    with pytest.raises(DistributedRunError) as raised:
        run_distributed(train_toy, 'ddp_find_unused', PATTERN, 'sgd', steps=2,
                        model_kwargs=REENTRANT, timeout=150)
    assert 'Expected to mark a variable ready only once' in str(raised.value)


@pytest.mark.timeout(300)
@pytest.mark.parametrize('optimizer', ['sgd', 'adamw'])
def test_guarded_ddp_trains_it_like_the_graph_search_without_checkpointing(optimizer):
    results = run_distributed(train_guarded_and_reference, pattern=PATTERN,
                              optimizer=optimizer, model_kwargs=REENTRANT,
                              reference_model_kwargs=NON_REENTRANT)
    assert_trains_like_graph_search(results)
    usage = results[0]['guarded']['usage']
    # Inside the block (the branch) and outside it (the aux head), on different ranks.
    assert any('branch.weight' in ranks[0] for ranks in usage)
    assert any('branch.weight' in ranks[1] for ranks in usage)
    assert all('aux.weight' in ranks[1] for ranks in usage)


# mmdet3d's PGD (ResNet-101) with mmdet's with_cp=True backbone, through tools/train.py.
PGD_WITH_CP = osp.join(REPO_CONFIGS, 'pgd',
                       'pgd_r101-caffe_fpn_head-gn_with-cp_tiny-kitti-mono3d.py')


def _train_pgd(kitti_root, work_dir, *options):
    pytest.importorskip('mmdet3d')
    return torchrun_train(PGD_WITH_CP, str(work_dir), timeout=scaled(240), cfg_options=[
        f'train_dataloader.dataset.data_root={kitti_root}', *options])


@pytest.mark.timeout(300)
def test_mmdet_with_cp_backbone_trains_under_guarded_ddp(kitti_root, tmp_path):
    run = _train_pgd(kitti_root, tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert "mode='complete' (requested find_unused_parameters='auto', from default)" \
        in run.output
    assert 'Iter(train) [2/2]' in run.output


@pytest.mark.timeout(300)
def test_mmdet_with_cp_backbone_kills_ddp_graph_search(kitti_root, tmp_path):
    graph_search = [option.replace('=False', '=True') for option in plain_ddp_options()]
    run = _train_pgd(kitti_root, tmp_path, *graph_search)
    assert run.returncode != 0 and not run.timed_out
    assert 'Expected to mark a variable ready only once' in run.output
