"""The DDP contract's MMEngine adapter: ``GuardedDDP`` against MMEngine's own
``MMDistributedDataParallel`` built as ``Runner.wrap_model`` builds it, each trained through
its ``train_step`` and an ``OptimWrapper`` (``accumulative_counts``: MMEngine's ``no_sync``)."""
import torch
from mmengine.model import BaseModel, MMDistributedDataParallel
from mmengine.optim import OptimWrapper

from mmdet3d_ddp_guard import GuardedDDP


class ContractModel(BaseModel):

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, tokens, use_branch=True, use_embedding=True, mode='loss'):
        output = self.net(tokens, use_branch, use_embedding)
        return dict(loss=output) if mode == 'loss' else [output.detach()]


class MMEngineAdapter:

    def model(self, net):
        return ContractModel(net)

    def wrap(self, model, guarded: bool, mode, **kwargs):
        """``mode``: the guard's ``find_unused_parameters`` ('auto': not written), or for
        MMEngine's own wrapper whether to run DDP's graph search."""
        if guarded:
            if mode != 'auto':
                kwargs['find_unused_parameters'] = mode
            return GuardedDDP(model, **kwargs)
        # Runner.wrap_model's arguments when the config has no model_wrapper_cfg.
        kwargs.setdefault('broadcast_buffers', False)
        return MMDistributedDataParallel(model, find_unused_parameters=mode, **kwargs)

    def optimizer(self, ddp, accumulate: int, momentum: float):
        return OptimWrapper(torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=momentum),
                            accumulative_counts=accumulate)

    def optimizer_state(self, optim_wrapper):
        return optim_wrapper.optimizer.state_dict()

    def step(self, ddp, optim_wrapper, batch, iteration: int, accumulate: int):
        ddp.train_step(batch, optim_wrapper)

    def val(self, ddp, batch):
        return ddp.val_step(batch)[0]

    def forward(self, ddp, batch):
        """A train-mode forward through the wrapper that nobody back-propagates."""
        return ddp(**batch, mode='loss')
