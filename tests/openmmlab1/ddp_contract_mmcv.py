"""The DDP contract's mmcv 1.x adapter: ``MMDistributedDataParallel(...)`` built as the 1.x
training scripts build it (``broadcast_buffers=False``, ``find_unused_parameters`` from the
config found on the call stack), guarded by the import or, with ``ddp_guard.enabled=False``,
mmcv's own; a step as mmcv's ``OptimizerHook`` runs it (zero_grad, the wrapper's
``train_step``, ``loss.backward()``, step), ``no_sync`` around all but the last micro-step
of an accumulation window."""
import contextlib
import logging

import torch
from mmcv.parallel import MMDistributedDataParallel
from mmcv.utils import Config

import mmdet3d_ddp_guard  # noqa: F401 - guards MMDistributedDataParallel, as custom_imports does
from tests.ddp_contract import ContractModel, sgd_param_groups


class StepContractModel(ContractModel):

    def train_step(self, data, optimizer):
        loss = self(**data)
        return dict(loss=loss, log_vars=dict(loss=loss.item()), num_samples=len(data['tokens']))

    def val_step(self, data, optimizer=None):
        return self(**data).detach()


class MMCVAdapter:

    def model(self, net):
        return StepContractModel(net)

    def wrap(self, model, guarded: bool, mode, **kwargs):
        """``mode``: the config's ``find_unused_parameters`` ('auto': not written)."""
        options = dict(ddp_guard=dict(enabled=guarded))
        if mode != 'auto':
            options['find_unused_parameters'] = mode
        cfg = Config(options)  # read from the call stack, as from train_detector's
        kwargs.setdefault('broadcast_buffers', False)
        return MMDistributedDataParallel(
            model, find_unused_parameters=cfg.get('find_unused_parameters', False), **kwargs)

    def optimizer(self, ddp, accumulate: int, momentum: float):
        return torch.optim.SGD(sgd_param_groups(ddp, momentum), lr=0.05)

    def optimizer_state(self, optimizer):
        return optimizer.state_dict()

    def step(self, ddp, optimizer, batch, iteration: int, accumulate: int):
        last = (iteration + 1) % accumulate == 0
        if iteration % accumulate == 0:
            optimizer.zero_grad()
        with contextlib.nullcontext() if last else ddp.no_sync():
            outputs = ddp.train_step(batch, optimizer)
            outputs['loss'].backward()
        if last:
            optimizer.step()

    def val(self, ddp, batch):
        return ddp.val_step(batch)

    def forward(self, ddp, batch):
        """A train-mode forward through the wrapper that nobody back-propagates."""
        return ddp(**batch)

    def runner_with_report_hook(self, ddp, optimizer, batches, work_dir: str,
                                accumulate: int = 1):
        """A real IterBasedRunner that trains ``ddp`` on ``batches`` (one per iteration)
        with UnusedParamsHook, mmcv's OptimizerHook (GradientCumulativeOptimizerHook with
        ``accumulate``) and a TextLoggerHook every 2 iterations; ``run(runner)`` trains."""
        from mmcv.runner import IterBasedRunner
        from mmdet3d_ddp_guard.openmmlab1.unused_params_hook import UnusedParamsHook
        runner = IterBasedRunner(ddp, optimizer=optimizer, work_dir=work_dir,
                                 logger=logging.getLogger(f'one_way.{id(ddp)}'),
                                 max_iters=len(batches), meta=dict())
        runner.register_optimizer_hook(
            dict(grad_clip=None) if accumulate == 1 else
            dict(type='GradientCumulativeOptimizerHook', cumulative_iters=accumulate,
                 grad_clip=None))
        runner.register_logger_hooks(dict(interval=2, hooks=[dict(type='TextLoggerHook')]))
        runner.register_hook(UnusedParamsHook(interval=2), priority='NORMAL')
        # IterLoader asks the sampler for set_epoch only once the list is exhausted.
        runner.batches = batches + batches[-1:]
        return runner

    @staticmethod
    def run(runner):
        runner.run([runner.batches], [('train', len(runner.batches) - 1)])
