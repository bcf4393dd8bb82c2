"""The DDP contract's plain PyTorch adapter: ``mmdet3d_ddp_guard.pytorch.GuardedDDP``
against torch's own ``DistributedDataParallel`` with the same arguments, each trained by a
loop as users write it (the wrapper's forward returns the loss, ``loss.backward()``, the
optimizer's step), ``no_sync`` around all but the last micro-step of an accumulation window,
the loss divided by the window's length."""
import contextlib

import torch
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.pytorch import GuardedDDP
from tests.ddp_contract import ContractModel, sgd_param_groups


class PlainAdapter:

    def model(self, net):
        return ContractModel(net)

    def wrap(self, model, guarded: bool, mode, **kwargs):
        """``mode``: the guard's ``find_unused_parameters`` ('auto': not written), or for
        torch's DDP whether to run its graph search."""
        if guarded:
            if mode != 'auto':
                kwargs['find_unused_parameters'] = mode
            return GuardedDDP(model, **kwargs)
        return DistributedDataParallel(model, find_unused_parameters=mode, **kwargs)

    def optimizer(self, ddp, accumulate: int, momentum: float):
        return torch.optim.SGD(sgd_param_groups(ddp, momentum), lr=0.05)

    def optimizer_state(self, optimizer):
        return optimizer.state_dict()

    def step(self, ddp, optimizer, batch, iteration: int, accumulate: int):
        last = (iteration + 1) % accumulate == 0
        with contextlib.nullcontext() if last else ddp.no_sync():
            (ddp(**batch) / accumulate).backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()

    def val(self, ddp, batch):
        with torch.no_grad():
            return ddp(**batch)

    def forward(self, ddp, batch):
        """A train-mode forward through the wrapper that nobody back-propagates."""
        return ddp(**batch)
