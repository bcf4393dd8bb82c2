"""Run by torchrun in test_cpu_launch.py: a few DDP steps on a gloo group that MMEngine's
``init_dist`` created through this package, then a plain exit."""
import torch
from mmengine.dist import init_dist
from torch.nn.parallel import DistributedDataParallel

import mmdet3d_ddp_guard  # noqa: F401  (what custom_imports does in a config)

init_dist('pytorch', backend='gloo')
# Small buckets: many all-reduces issued inside each backward.
model = DistributedDataParallel(torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)]),
                                bucket_cap_mb=0.01)
for _ in range(3):
    model(torch.randn(4, 64)).sum().backward()
