"""torch's own SyncBatchNorm on NCCL, through the stall guard's record (device_check.sh).

On NCCL, torch's SyncBatchNorm gathers its statistics with ``all_gather_single`` (torch 2.13
and 2.14), ``all_gather_into_tensor`` (2.1; 2.11 too, seen on the H200 on 2026-12-04) or
``_all_gather_base`` (1.12, 1.13), where
every gloo test takes the list ``all_gather``. Run under torchrun, one process per GPU:

- every world size: torch's SyncBatchNorm function (``torch.nn.modules._functions``, what
  ``nn.SyncBatchNorm`` calls in training) runs once on a CUDA tensor, with the record active;
  the script prints what the record holds and fails unless it holds the gather, placed at
  the caller of that function (called outside any module, the record names the innermost
  frame outside torch); on 1 GPU the group has one rank, which ``nn.SyncBatchNorm`` itself
  would skip; its function gathers all the same;
- 2 GPUs and more: GuardedDDP (stall_timeout 5 s) on a model whose SyncBatchNorm runs in a
  branch that only rank 1 takes in iteration 1; the guard must end every rank, naming the
  gather (the exit code is the stall guard's, 1; the words are in the log).

    python3 -m torch.distributed.run --nproc_per_node N benchmarks/nccl_sync_bn_record.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.modules._functions import SyncBatchNorm as SyncBatchNormFunction

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.stall_guard.process_stall_guard import PROCESS_STALL_GUARD
from mmdet3d_ddp_guard.stall_guard.collective_log import CollectiveLog

GATHERS = ('all_gather_single', 'all_gather_into_tensor', '_all_gather_base')


class BranchNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(4, 8, 3, padding=1)
        self.refiner = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.SyncBatchNorm(8))
        self.head = nn.Conv2d(8, 1, 1)

    def forward(self, x, take_branch):
        x = self.stem(x)
        if take_branch:
            x = self.refiner(x)
        return self.head(x).pow(2).mean()


def record_torch_sync_bn(device) -> None:
    bn = nn.BatchNorm2d(8).to(device)
    log = CollectiveLog(bn)
    PROCESS_STALL_GUARD.recording.activate(log)
    try:
        SyncBatchNormFunction.apply(torch.randn(4, 8, 6, 6, device=device), bn.weight,
                                    bn.bias, bn.running_mean, bn.running_var, bn.eps,
                                    bn.momentum, dist.group.WORLD, dist.get_world_size())
        torch.cuda.synchronize()
    finally:
        PROCESS_STALL_GUARD.recording.deactivate(log)
    entries = log.snapshot().get('world', dict(entries=[]))['entries']
    print(f'rank {dist.get_rank()}: torch {torch.__version__}, NCCL, world size '
          f'{dist.get_world_size()}: recorded {[(entry[1], entry[5]) for entry in entries]}',
          flush=True)
    gathers = [entry for entry in entries if entry[1] in GATHERS]
    # Called as a function, not through a module of a model, the gather is placed at the
    # innermost caller outside torch (CollectiveLog's issuer): this function.
    assert gathers and gathers[0][5][2] == 'record_torch_sync_bn', entries


def train_into_a_sync_bn_hang(device) -> None:
    torch.manual_seed(0)
    ddp = GuardedDDP(BranchNet().to(device), device_ids=[device.index], stall_timeout=5.0)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for iteration in range(4):
        take_branch = dist.get_rank() == 1 if iteration == 1 else True
        loss = ddp(torch.randn(2, 4, 16, 16, device=device), take_branch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f'rank {dist.get_rank()}: iteration {iteration} loss {loss.item():.4f}',
              flush=True)
    raise SystemExit('the SyncBatchNorm hang was not ended by the stall guard')


def main() -> None:
    local_rank = int(os.environ.get('LOCAL_RANK', 0))
    torch.cuda.set_device(local_rank)
    dist.init_process_group('nccl')
    device = torch.device('cuda', local_rank)
    record_torch_sync_bn(device)
    if dist.get_world_size() >= 2:
        train_into_a_sync_bn_hang(device)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
