"""An optimizer hook that runs the backward the ways the codebases' own hooks do, one per
iteration in turn (``STYLES``): the loss's own ``backward()``, ``torch.autograd.backward``
on it, and none at all (a hook that skips a non-finite loss, and its step; here every rank
skips the same iteration, as a loss that is NaN everywhere). mmcv's own DDP trains all three
without an error, so the guard must too."""
import torch
from mmcv.runner import HOOKS, OptimizerHook

STYLES = ('loss.backward', 'torch.autograd.backward', 'skipped')


@HOOKS.register_module()
class BackwardStylesOptimizerHook(OptimizerHook):

    def after_train_iter(self, runner):
        loss = runner.outputs['loss']
        style = STYLES[runner.iter % len(STYLES)]
        runner.optimizer.zero_grad()
        if style == 'skipped':
            return
        if style == 'loss.backward':
            loss.backward()
        else:
            torch.autograd.backward(loss)
        runner.optimizer.step()
