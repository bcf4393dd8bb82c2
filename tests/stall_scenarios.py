"""What the stall-guard tests run on each rank: a small detector whose forward holds a
collective in a branch, a loss term reduced on some ranks only, or a rank that raises; and a
healthy Runner with a slow rank."""
import time
from typing import Optional, Sequence

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
JUDGE_MARK = 'JUDGES ROUND'


try:
    from mmdet3d.models.layers.norm import NaiveSyncBatchNorm1d
except ImportError:  # the version matrix's venvs have no mmdet3d
    NaiveSyncBatchNorm1d = None


class PluginSyncBN1d(nn.BatchNorm1d):
    """A codebase's own synchronised BN, as ``projects/.../norm.py`` files write them: its
    training forward all-gathers the batch statistics, in a class that the guard's list of
    known layers does not hold."""

    def forward(self, x):
        if not self.training or dist.get_world_size() < 2:
            return super().forward(x)
        stats = torch.stack([x.mean(0), (x * x).mean(0)])
        gathered = [torch.empty_like(stats) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, stats.detach())
        mean, mean_of_squares = torch.stack(gathered).mean(0)
        scale = torch.rsqrt(mean_of_squares - mean * mean + self.eps)
        return (x - mean) * scale * self.weight + self.bias


#: The patterns whose branch holds a synchronised BN (the other ranks skip it).
SYNC_BN_PATTERNS = ('sync_bn_branch', 'plugin_sync_bn_branch')


class CollectiveBranchToy(BaseModel):
    """A stem, a refiner with a synchronised BN in a branch, a head. The BN is mmdet3d's
    NaiveSyncBatchNorm1d (a plain BatchNorm1d where mmdet3d is missing), or
    :class:`PluginSyncBN1d` for the 'plugin_' pattern. What the ranks that take the branch
    do, by ``pattern``: 'sync_bn_branch' and 'plugin_sync_bn_branch', run the refiner (the
    others skip it); 'loss_all_reduce', all-reduce the number of positives for the loss, as
    when a class has boxes; 'async_all_gather', all-gather a feature with
    ``async_op=True`` and wait for it later in the forward; 'raises', raise in the forward
    (the others wait in the refiner's collective)."""

    def __init__(self, pattern: str):
        super().__init__()
        if pattern == 'sync_bn_branch' and NaiveSyncBatchNorm1d is None:
            raise RuntimeError("the pattern 'sync_bn_branch' needs mmdet3d")
        norm = PluginSyncBN1d if pattern == 'plugin_sync_bn_branch' else \
            NaiveSyncBatchNorm1d or nn.BatchNorm1d
        self.pattern = pattern
        self.stem = nn.Linear(8, 16)
        self.refiner = nn.Sequential(nn.Linear(16, 16), norm(16))
        self.head = nn.Linear(16, 1)

    #: Seconds the forward sleeps before the async all-gather; where the waiting ranks block.
    pre_branch_delay = 0.0
    wait_in_helper = False

    def forward(self, inputs, take_branch, mode='loss'):
        x = F.relu(self.stem(inputs))
        positives = torch.ones(())
        if take_branch and self.pattern == 'raises':
            raise ValueError('this rank cannot read its batch')
        if take_branch and self.pattern == 'loss_all_reduce':
            dist.all_reduce(positives)
        gathered = None
        if take_branch and self.pattern == 'async_all_gather':
            time.sleep(self.pre_branch_delay)
            gathered = [torch.empty(16) for _ in range(dist.get_world_size())]
            work = dist.all_gather(gathered, x.detach().mean(0), async_op=True)
        if take_branch or self.pattern not in SYNC_BN_PATTERNS:
            x = x + self.refiner(x)
        if gathered is not None:
            _wait_elsewhere(work) if self.wait_in_helper else work.wait()
            x = x + torch.stack(gathered).mean(0)
        return dict(loss_box=self.head(x).pow(2).mean() / positives)


def _wait_elsewhere(work) -> None:
    work.wait()


def train_into_a_hang(rank: int, world_size: int, pattern: str, branch_ranks: Sequence[int],
                      stall_timeout: float, steps: int = 4, hang_iteration: int = 1,
                      caught: bool = False, judge: Optional[int] = None) -> None:
    """Trains under GuardedDDP; in ``hang_iteration`` only ``branch_ranks`` take the
    branch of ``pattern`` (every rank takes it before, for the SyncBN pattern). Prints
    whether the guard judges the collectives as blocking the host. ``caught``: a rank whose
    step raises catches the error and waits (a loop that retries later), so that the others
    wait for it instead of seeing its process end. ``judge``: the rank that judges (the
    others claim a round only once it has claimed it, or after a minute); every rank
    prints the rounds it judges."""
    torch.manual_seed(0)
    ddp = GuardedDDP(CollectiveBranchToy(pattern), stall_timeout=stall_timeout)
    _print_judged_rounds(ddp.stall_watchdog, claims_late=judge is not None and rank != judge)
    print(f'JUDGED AS BLOCKING {ddp.stall_watchdog.blocking}', flush=True)
    optim_wrapper = OptimWrapper(torch.optim.SGD(ddp.parameters(), lr=0.01))
    for iteration in range(steps):
        hangs = iteration == hang_iteration
        if hangs:
            print(f'{HANG_MARK} {time.time()}', flush=True)
        take_branch = rank in branch_ranks if hangs else pattern in SYNC_BN_PATTERNS
        try:
            ddp.train_step(dict(inputs=torch.randn(4, 8), take_branch=take_branch),
                           optim_wrapper)
        except ValueError:
            if not caught:
                raise
            time.sleep(120)  # not reached: the stall guard ends every rank


def _print_judged_rounds(watchdog, claims_late: bool) -> None:
    claim = watchdog.store.claim

    def claim_round(round_number: int) -> bool:
        # Waiting on the claim itself, not for a fixed time: a loaded machine that starves
        # the judge's thread cannot let another rank judge.
        deadline = time.monotonic() + 60
        while claims_late and time.monotonic() < deadline and \
                watchdog.store._add(f'judge/{round_number}', 0) == 0:
            time.sleep(0.05)
        won = claim(round_number)
        if won:
            print(f'{JUDGE_MARK} {round_number}: rank {watchdog.rank}', flush=True)
        return won
    watchdog.store.claim = claim_round


def train_through_a_wait(rank: int, world_size: int, case: str, stall_timeout: float,
                         slow_for: Optional[float] = None, steps: int = 4,
                         wait_iteration: int = 1) -> None:
    """Trains a healthy toy (every rank runs every collective) under GuardedDDP; in
    ``wait_iteration`` rank 0 takes ``slow_for`` seconds (2.5 stall timeouts), by ``case``:

    - 'slow_rank_syncs': in its forward, before the refiner's all-gather; the other ranks
      issue it with ``async_op=True`` and block at different places (odd ranks in
      ``work.wait()``, even ones in a helper that waits), as NCCL ranks block at different
      syncs;
    - 'evaluation': alone after the step, in the 'validation' phase (metrics computed on
      rank 0), while the others wait in ``broadcast_object_list`` for its result.

    Prints the stall watchdog's store operations, verdict reads and tick at the end."""
    slow_for = 2.5 * stall_timeout if slow_for is None else slow_for
    torch.manual_seed(0)
    ddp = GuardedDDP(CollectiveBranchToy('async_all_gather'), stall_timeout=stall_timeout)
    optim_wrapper = OptimWrapper(torch.optim.SGD(ddp.parameters(), lr=0.01))
    for iteration in range(steps):
        slow = iteration == wait_iteration and rank == 0
        if slow and case == 'slow_rank_syncs':
            ddp.module.pre_branch_delay = slow_for
        ddp.module.wait_in_helper = rank % 2 == 0
        ddp.train_step(dict(inputs=torch.randn(4, 8), take_branch=True), optim_wrapper)
        ddp.module.pre_branch_delay = 0.0
        if iteration == wait_iteration and case == 'evaluation':
            ddp.stall_position.enter('validation')
            if slow:
                time.sleep(slow_for)
            metrics = [dict(mAP=0.5)] if rank == 0 else [None]
            dist.broadcast_object_list(metrics, src=0)
            ddp.stall_position.enter('data')
    # Rank 0's process hosts the store: it must not leave while another rank still reads.
    dist.barrier()
    store = ddp.stall_watchdog.store
    print(f'STORE OPERATIONS {store.operations} VERDICT READS {store.verdict_reads} '
          f'TICK {ddp.stall_watchdog.tick}', flush=True)


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
