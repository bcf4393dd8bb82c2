"""Training scenarios run inside the spawned ranks of the multi-process tests."""
import contextlib
from typing import Dict

import torch
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import AmpOptimWrapper, OptimWrapper

from mmdet3d_ddp_guard import GuardedDDP
from mmdet3d_ddp_guard.examples import ToyDetector, make_toy_batch


@contextlib.contextmanager
def _amp_allowed_on_cpu():
    """AmpOptimWrapper asserts a GPU at construction; on the CPU its loss scaling path is
    still real with torch's CPU GradScaler, which replaces the disabled CUDA one below."""
    import mmengine.optim.optimizer.amp_optimizer_wrapper as amp_module
    original = amp_module.is_cuda_available
    amp_module.is_cuda_available = lambda: True
    try:
        yield
    finally:
        amp_module.is_cuda_available = original


def build_optim_wrapper(model, optimizer: str, accumulative_counts: int = 1,
                        amp: bool = False):
    if optimizer == 'sgd':
        optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                weight_decay=1e-3)
    elif optimizer == 'adamw':
        optim = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    else:
        raise ValueError(optimizer)
    if not amp:
        return OptimWrapper(optim, accumulative_counts=accumulative_counts)
    if torch.cuda.is_available():
        return AmpOptimWrapper(optimizer=optim, accumulative_counts=accumulative_counts,
                               dtype='float16')
    with _amp_allowed_on_cpu():
        wrapper = AmpOptimWrapper(optimizer=optim, accumulative_counts=accumulative_counts,
                                  dtype='bfloat16', loss_scale=dict(init_scale=2.0**10))
    wrapper.loss_scaler = torch.amp.GradScaler('cpu', init_scale=2.0**10)
    return wrapper


def train_toy(rank: int, world_size: int, wrapper: str, pattern: str, optimizer: str,
              steps: int = 6, accumulative_counts: int = 1, amp: bool = False,
              wrapper_kwargs: Dict = None) -> Dict:
    """Trains a ToyDetector and returns its parameters, optimizer state and, for GuardedDDP,
    the per-iteration usage it recorded."""
    torch.manual_seed(0)
    device = torch.device('cuda', 0) if torch.cuda.is_available() else torch.device('cpu')
    model = ToyDetector(pattern).to(device)
    kwargs = dict(wrapper_kwargs or {})
    if wrapper == 'guarded':
        ddp = GuardedDDP(model, **kwargs)
    elif wrapper == 'ddp_find_unused':
        ddp = MMDistributedDataParallel(model, find_unused_parameters=True, **kwargs)
    elif wrapper == 'ddp_plain':
        ddp = MMDistributedDataParallel(model, find_unused_parameters=False, **kwargs)
    else:
        raise ValueError(wrapper)
    optim_wrapper = build_optim_wrapper(ddp, optimizer, accumulative_counts, amp)
    usage = []
    for iteration in range(steps):
        ddp.train_step(make_toy_batch(iteration, rank), optim_wrapper)
        if wrapper == 'guarded':
            last = ddp.usage_record.last
            usage.append([sorted(ddp.usage_record.table.names[i] for i in ids)
                          for ids in last.per_rank_unused])
    return dict(
        params={name: p.detach().cpu().clone() for name, p in model.named_parameters()},
        optimizer_state=optim_wrapper.optimizer.state_dict(),
        usage=usage,
        decision=ddp.decision.mode if wrapper == 'guarded' else None,
        expected=[[model.expected_unused(i, r) for r in range(world_size)]
                  for i in range(steps)])


def train_guarded_and_reference(rank: int, world_size: int, **case) -> Dict:
    """The same case under GuardedDDP('auto') and under DDP find_unused_parameters=True."""
    return dict(guarded=train_toy(rank, world_size, 'guarded', **case),
                reference=train_toy(rank, world_size, 'ddp_find_unused', **case))
