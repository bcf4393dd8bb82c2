"""Run by torchrun in test_cpu_launch.py: a few DDP steps on a gloo group, then a plain exit.

``mmengine``: the group comes from MMEngine's ``init_dist`` through this package's CPU
launch path, under plain DDP. ``own_group``: the user's own code creates the group with
``dist.init_process_group('gloo')``, as many training scripts do, and trains GuardedDDP.
"""
import sys

import torch
import torch.distributed as dist
from mmengine.dist import init_dist
from mmengine.optim import OptimWrapper
from torch.nn.parallel import DistributedDataParallel

import mmdet3d_ddp_guard  # noqa: F401  (what custom_imports does in a config)
from tests.toys import ToyDetector, make_toy_batch

if sys.argv[1] == 'mmengine':
    init_dist('pytorch', backend='gloo')
    # Small buckets: many all-reduces issued inside each backward.
    model = DistributedDataParallel(
        torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)]), bucket_cap_mb=0.01)
    for _ in range(3):
        model(torch.randn(4, 64)).sum().backward()
else:
    dist.init_process_group('gloo')
    model = mmdet3d_ddp_guard.GuardedDDP(ToyDetector('rank_dependent', depth=8),
                                         bucket_cap_mb=0.01)
    optim_wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.01))
    for iteration in range(3):
        model.train_step(make_toy_batch(iteration, dist.get_rank()), optim_wrapper)
