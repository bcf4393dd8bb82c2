"""What the stall-guard tests run on each rank: a small detector whose forward holds a
collective in a branch, a loss term reduced on some ranks only, or a rank that raises; and a
healthy Runner with a slow rank."""
import time
from typing import Sequence

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.optim import OptimWrapper
from mmengine.registry import HOOKS

from mmdet3d_ddp_guard import GuardedDDP

HANG_MARK = 'THE HANG STARTS AT'


try:
    from mmdet3d.models.layers.norm import NaiveSyncBatchNorm1d
except ImportError:  # the version matrix's venvs have no mmdet3d
    NaiveSyncBatchNorm1d = None
#: Where the ranks that did not take the branch wait, in the diagnosis's words.
OTHERS_WAIT_IN = ("refiner.1 (NaiveSyncBatchNorm1d)'s collective, call 1 of iteration 1"
                  if NaiveSyncBatchNorm1d else "DDP's gradient all-reduce (iteration 1")


class CollectiveBranchToy(BaseModel):
    """A stem, a refiner with mmdet3d's NaiveSyncBatchNorm1d (a plain BatchNorm1d where
    mmdet3d is missing) in a branch, a head. What the ranks that take the branch do, by
    ``pattern``: 'sync_bn_branch', run the refiner (the others skip it); 'loss_all_reduce',
    all-reduce the number of positives for the loss, as when a class has boxes;
    'raises', raise in the forward (the others wait in the refiner's collective)."""

    def __init__(self, pattern: str):
        super().__init__()
        if pattern == 'sync_bn_branch' and NaiveSyncBatchNorm1d is None:
            raise RuntimeError("the pattern 'sync_bn_branch' needs mmdet3d")
        norm = NaiveSyncBatchNorm1d or nn.BatchNorm1d
        self.pattern = pattern
        self.stem = nn.Linear(8, 16)
        self.refiner = nn.Sequential(nn.Linear(16, 16), norm(16))
        self.head = nn.Linear(16, 1)

    def forward(self, inputs, take_branch, mode='loss'):
        x = F.relu(self.stem(inputs))
        positives = torch.ones(())
        if take_branch and self.pattern == 'raises':
            raise ValueError('this rank cannot read its batch')
        if take_branch and self.pattern == 'loss_all_reduce':
            dist.all_reduce(positives)
        if take_branch or self.pattern != 'sync_bn_branch':
            x = x + self.refiner(x)
        return dict(loss_box=self.head(x).pow(2).mean() / positives)


def train_into_a_hang(rank: int, world_size: int, pattern: str, branch_ranks: Sequence[int],
                      stall_timeout: float, steps: int = 4, hang_iteration: int = 1) -> None:
    """Trains under GuardedDDP; in ``hang_iteration`` only ``branch_ranks`` take the
    branch of ``pattern`` (every rank takes it before, for the SyncBN pattern)."""
    torch.manual_seed(0)
    ddp = GuardedDDP(CollectiveBranchToy(pattern), stall_timeout=stall_timeout)
    optim_wrapper = OptimWrapper(torch.optim.SGD(ddp.parameters(), lr=0.01))
    for iteration in range(steps):
        hangs = iteration == hang_iteration
        if hangs:
            print(f'{HANG_MARK} {time.time()}', flush=True)
        take_branch = rank in branch_ranks if hangs else pattern == 'sync_bn_branch'
        ddp.train_step(dict(inputs=torch.randn(4, 8), take_branch=take_branch), optim_wrapper)


@HOOKS.register_module()
class SlowRankHook(Hook):
    """Makes one rank slow outside collectives: a data stall (before an iteration) or a
    slow checkpoint save (rank 0, as MMEngine saves on rank 0 alone)."""

    priority = 'LOWEST'

    def __init__(self, seconds: float, data_stall_rank: int, data_stall_iter: int):
        self.seconds = seconds
        self.data_stall_rank = data_stall_rank
        self.data_stall_iter = data_stall_iter

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        if runner.iter == self.data_stall_iter and runner.rank == self.data_stall_rank:
            time.sleep(self.seconds)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        if runner.rank == 0:
            time.sleep(self.seconds)


def train_with_a_slow_rank(rank: int, world_size: int, work_dir: str,
                           stall_timeout: float) -> None:
    """A healthy toy detector through a real Runner; rank 1 stalls in its data at iteration
    1 and rank 0 saves the checkpoint after iteration 3 slowly, each for 2.5 stall
    timeouts. StallPhaseHook is listed first, so the slow save is in its 'checkpoint'."""
    from mmengine.config import Config
    from mmengine.runner import Runner

    from tests.scenarios import toy_runner_cfg
    slow = dict(type='SlowRankHook', seconds=2.5 * stall_timeout, data_stall_rank=1,
                data_stall_iter=1)
    cfg = toy_runner_cfg(work_dir, 'none', dict(type='GuardedDDP', stall_timeout=stall_timeout),
                         max_iters=5, checkpoint_interval=3)
    cfg['custom_hooks'] += [dict(type='StallPhaseHook'), slow]
    Runner.from_cfg(Config(cfg)).train()
