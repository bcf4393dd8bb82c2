"""The stall guard of the plain adapter: on by default, it names a hang that no DDP option
can avoid (a synchronised BN in a branch some ranks skip) and ends every rank with exit code
1; ``stall_timeout=None`` turns it off, as in the other adapters."""
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from mmdet3d_ddp_guard.pytorch import GuardedDDP
from tests.dist_utils import run_distributed, run_until_exit
from tests.timeouts import scaled

STALL_TIMEOUT = 3.0


class PluginSyncBN1d(nn.BatchNorm1d):
    """A codebase's own synchronised BN: its training forward all-gathers the statistics."""

    def forward(self, x):
        stats = torch.stack([x.mean(0), (x * x).mean(0)])
        gathered = [torch.empty_like(stats) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, stats.detach())
        mean, mean_of_squares = torch.stack(gathered).mean(0)
        return (x - mean) * torch.rsqrt(mean_of_squares - mean * mean + self.eps) \
            * self.weight + self.bias


class BranchWithSyncBN(nn.Module):

    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 16)
        self.refiner = nn.Sequential(nn.Linear(16, 16), PluginSyncBN1d(16))
        self.head = nn.Linear(16, 1)

    def forward(self, inputs, take_branch: bool):
        x = F.relu(self.stem(inputs))
        if take_branch:
            x = x + self.refiner(x)
        return self.head(x).pow(2).mean()


def _train_into_a_hang(rank: int, world_size: int, stall_timeout) -> None:
    torch.manual_seed(0)
    model = GuardedDDP(BranchWithSyncBN(), stall_timeout=stall_timeout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for iteration in range(3):
        # Iteration 1: only rank 1's batch takes the branch.
        model(torch.randn(4, 8), take_branch=iteration != 1 or rank == 1).backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.timeout(200)
def test_a_sync_bn_in_a_branch_some_ranks_skip_is_named_and_ends_every_rank():
    ranks = run_until_exit(_train_into_a_hang, STALL_TIMEOUT, timeout=120)
    for rank in ranks:
        assert rank.exitcode == 1, rank.output[-3000:]
        assert 'all_gather in refiner.1 (PluginSyncBN1d).forward' in rank.output, \
            rank.output[-3000:]
        # The fix in a plain loop's words: no config to check, no norm_cfg.
        assert 'Fix: log which batches take the branch, on which rank' in rank.output
        assert 'norm_cfg' not in rank.output and 'check CONFIG' not in rank.output


def _watchdog_of(rank: int, world_size: int, stall_timeout) -> bool:
    model = GuardedDDP(BranchWithSyncBN(), **({} if stall_timeout == 'default'
                                              else dict(stall_timeout=stall_timeout)))
    watching = model.stall_watchdog is not None
    if watching:
        model.stall_watchdog.stop()
    return watching


@pytest.mark.timeout(120)
def test_the_stall_guard_is_on_by_default_and_stall_timeout_none_turns_it_off():
    assert run_distributed(_watchdog_of, 'default') == [True, True]
    assert run_distributed(_watchdog_of, None) == [False, False]


@pytest.mark.parametrize('value', [0, -1, 'long', True])
def test_a_bad_stall_timeout_names_the_option_and_the_fix(value):
    with pytest.raises((TypeError, ValueError)) as error:
        GuardedDDP(BranchWithSyncBN(), stall_timeout=value)
    assert 'stall_timeout' in str(error.value)
    assert 'GuardedDDP(model, stall_timeout=' in str(error.value)
