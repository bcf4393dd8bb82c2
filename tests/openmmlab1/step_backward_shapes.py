"""The backward shapes of real 1.x codebases, trained on a real mmcv ``IterBasedRunner`` by
every wrapper a user can get, one after the other in the same 2-rank process group, so that
each rank's weights can be compared bit for bit with plain mmcv DDP's (nothing unused) or
with DDP's graph search (something unused) of the same run.

A shape is a model (``train_step`` as mmdet 2.x's detectors write it) and the optimizer
hook (plus hooks) that back-propagates it:

- ``checkpoint_near_loss``: reentrant ``torch.utils.checkpoint`` around the decoder, the head
  and the loss itself, so that the step's first parameter gradients arrive in the nested
  backward (StreamPETR's ``with_cp`` decoder, a checkpointed head);
- ``with_cp_block_last``: mmdet's ResNet ``BasicBlock(with_cp=True)`` as the last layer,
  under a parameter-free head (global pooling), mmcv's stock ``OptimizerHook``;
- ``two_backwards``: two disjoint heads; the optimizer hook back-propagates ``loss_a`` and
  then ``loss_b``;
- ``probe_on_rank_0``: after the stock optimizer hook, a hook on rank 0 only runs a backward
  of its own (a gradient probe), outside the step;
- ``backward_styles``: a codebase's optimizer hook that calls ``loss.backward()``,
  ``torch.autograd.backward(loss)`` and no backward at all (a NaN skip) in turn
  (tests/openmmlab1/backward_styles.py);
- ``fp16_optimizer_hook``: mmcv's ``Fp16OptimizerHook`` (``fp16 = dict(loss_scale=512.)``):
  the scaled loss back-propagated; on the CPU its CUDA GradScaler turns itself off, and the
  model (no ``auto_fp16`` of its own) trains in float32, under mmcv's own DDP as guarded;
- ``ema_copies_the_wrapper``: BEVDet's ``MEGVIIEMAHook``, which deep-copies
  ``runner.model`` (the wrapper), updates the copy after every iteration and, here, saves
  the whole wrapper with ``torch.save`` at the end;
- ``frozen_after_warm_up``: a hook freezes the trunk (``requires_grad=False``) at
  iteration 1 and unfreezes it at iteration 3; mmcv's own DDP trains it with its graph
  search only (its fast path raises "Expected to have finished reduction");
- ``gradient_cumulative``: mmcv's ``GradientCumulativeOptimizerHook`` (``cumulative_iters=2``:
  the loss divided, DDP reducing every backward, a step every 2 iterations);
- ``raises_and_skipped``: at iteration 1 the backward raises before reaching a parameter (a
  hook on the loss, as an out-of-memory error would), and the optimizer hook skips the step;
  ``raises_after_reaching``: the same, raised after the heads' parameters were reached.

With ``unused=True`` rank 1 never runs the ``extra`` branch (rank-dependent unused
parameters), which plain DDP's fast path cannot train.
"""
import io
import logging
import os.path as osp

import torch
import torch.distributed as dist
import torch.nn as nn
from mmcv.parallel import MMDistributedDataParallel
from mmcv.runner import HOOKS, Hook, IterBasedRunner, OptimizerHook
from mmcv.utils import Config
from torch.utils.checkpoint import checkpoint

import mmdet3d_ddp_guard  # noqa: F401 - guards MMDistributedDataParallel, as custom_imports does
import tests.openmmlab1.backward_styles  # noqa: F401 - registers BackwardStylesOptimizerHook
from tests.ddp_contract import copy_for_ema, update_ema

ITERATIONS = 4
#: The config lines of each wrapper a user can get (``ddp_guard.stall_timeout=None``: the
#: stall guard changes no gradient; it is tested elsewhere).
WRAPPERS = {
    'plain': dict(find_unused_parameters=False, ddp_guard=dict(enabled=False)),
    'graph_search': dict(find_unused_parameters=True, ddp_guard=dict(enabled=False)),
    'auto': dict(ddp_guard=dict(stall_timeout=None)),
    'strict': dict(find_unused_parameters=False, ddp_guard=dict(stall_timeout=None)),
    'guarded_true': dict(find_unused_parameters=True, ddp_guard=dict(stall_timeout=None)),
}
# A simulated out-of-memory error inside the backward.
OUT_OF_MEMORY = 'CUDA out of memory (simulated inside the backward)'


class ShapeModel(nn.Module):
    """Linear layers (and an mmdet block) laid out as ``shape`` needs; ``extra`` is a branch
    that rank 1 skips when ``unused``."""

    def __init__(self, shape: str, unused: bool):
        super().__init__()
        self.shape, self.unused = shape, unused
        self.extra = nn.Linear(6, 1)
        if shape == 'with_cp_block_last':
            from mmdet.models.backbones.resnet import BasicBlock
            self.stem = nn.Conv2d(2, 4, 3, padding=1)
            self.block = BasicBlock(4, 4, with_cp=True)
            return
        if shape != 'two_backwards':  # there, the two backwards share no parameter
            self.trunk = nn.Linear(6, 6)
        if shape == 'checkpoint_near_loss':
            self.decoder = nn.Linear(6, 6)
        self.head_a = nn.Linear(6, 1)
        self.head_b = nn.Linear(6, 1)

    def train_step(self, data, optimizer):
        x = data['x']
        # First, so that its nodes run last in the backward: the step's first parameter
        # gradients then come from the checkpointed block, where there is one.
        if self.unused and dist.get_rank() == 1:
            losses = dict(loss_extra=x.new_zeros(()))  # rank 1's batches never run it
        else:
            losses = dict(loss_extra=self.extra(x).pow(2).mean())
        features = x if self.shape == 'two_backwards' else None
        if self.shape == 'with_cp_block_last':
            image = x.view(-1, 2, 3, 1).expand(-1, 2, 3, 3).contiguous()
            losses['loss'] = self.block(self.stem(image)).pow(2).mean()
        elif self.shape == 'checkpoint_near_loss':
            losses['loss'] = checkpoint(self._decode_and_score, self.trunk(x).relu())
        else:
            features = features if features is not None else self.trunk(x).relu()
            losses.update(loss_a=self.head_a(features).pow(2).mean(),
                          loss_b=self.head_b(features).abs().mean())
        loss = sum(losses.values())
        log_vars = {name: value.item() for name, value in losses.items()}
        return dict(loss=loss, losses=losses, features=features, log_vars=log_vars,
                    num_samples=len(x))

    def _decode_and_score(self, features):
        decoded = self.decoder(features).relu()
        return self.head_a(decoded).pow(2).mean() + self.head_b(decoded).abs().mean()

    def probe(self, x):
        return self.head_a(self.trunk(x)).sum()


@HOOKS.register_module()
class TwoBackwardsOptimizerHook(OptimizerHook):
    """Back-propagates ``loss_a`` (and the extra branch), then ``loss_b``."""

    def after_train_iter(self, runner):
        runner.optimizer.zero_grad()
        losses = runner.outputs['losses']
        (losses['loss_a'] + losses['loss_extra']).backward()
        losses['loss_b'].backward()
        runner.optimizer.step()


@HOOKS.register_module()
class SkipOnErrorOptimizerHook(OptimizerHook):
    """Skips the step whose backward raised (a fork's out-of-memory handling). At iteration
    1 the backward raises: with ``after_reaching=False`` from the loss, before it reaches any
    parameter; with True from the trunk's output, after the heads' parameters."""

    def __init__(self, after_reaching: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.after_reaching = after_reaching

    def after_train_iter(self, runner):
        runner.optimizer.zero_grad()
        loss = runner.outputs['loss']
        if runner.iter == 1:
            raising = runner.outputs['features'] if self.after_reaching else loss
            raising.register_hook(_raise_out_of_memory)
        try:
            loss.backward()
        except RuntimeError as error:
            if OUT_OF_MEMORY not in str(error):
                raise
            runner.optimizer.zero_grad()
            return
        runner.optimizer.step()


def _raise_out_of_memory(grad):
    raise RuntimeError(OUT_OF_MEMORY)


class ProbeOnRankZeroHook(Hook):
    """After the optimizer hook, rank 0 alone back-propagates a probe of its own."""

    def after_train_iter(self, runner):
        if dist.get_rank() == 0:
            model = runner.model.module
            model.probe(torch.ones(2, 6)).backward()


class CopyTheWrapperEMAHook(Hook):
    """BEVDet's MEGVIIEMAHook: every SyncBatchNorm's group set to None around
    ``deepcopy(runner.model)`` (the wrapper itself), the copy updated from
    ``runner.model.module.state_dict()`` after every iteration; at the end the whole wrapper
    saved with ``torch.save`` and loaded back."""

    def before_run(self, runner):
        self.ema = copy_for_ema(runner.model)

    def after_train_iter(self, runner):
        update_ema(self.ema, runner.model)

    def after_run(self, runner):
        buffer = io.BytesIO()
        torch.save(runner.model, buffer)
        buffer.seek(0)
        self.saved = torch.load(buffer)


class FreezeTrunkAfterWarmUpHook(Hook):

    def before_train_iter(self, runner):
        if runner.iter in (1, 3):
            for param in runner.model.module.trunk.parameters():
                param.requires_grad_(runner.iter == 3)


SHAPES = {
    'checkpoint_near_loss': [],
    'with_cp_block_last': [],
    'two_backwards': [dict(type='TwoBackwardsOptimizerHook')],
    'probe_on_rank_0': [ProbeOnRankZeroHook],
    'backward_styles': [dict(type='BackwardStylesOptimizerHook', grad_clip=None)],
    'ema_copies_the_wrapper': [CopyTheWrapperEMAHook],
    'frozen_after_warm_up': [FreezeTrunkAfterWarmUpHook],
    'fp16_optimizer_hook': [dict(type='Fp16OptimizerHook', loss_scale=512.0, grad_clip=None)],
    'gradient_cumulative': [dict(type='GradientCumulativeOptimizerHook', cumulative_iters=2,
                                 grad_clip=None)],
    'raises_and_skipped': [dict(type='SkipOnErrorOptimizerHook')],
    'raises_after_reaching': [dict(type='SkipOnErrorOptimizerHook', after_reaching=True)],
}


def _batches(rank: int):
    generator = torch.Generator().manual_seed(100 + rank)
    return [dict(x=torch.randn(4, 6, generator=generator)) for _ in range(ITERATIONS + 1)]


def train_shape(shape: str, wrapper: str, unused: bool, work_dir: str):
    """Trains ``shape`` for ``ITERATIONS`` on this rank under ``wrapper`` (a key of
    ``WRAPPERS``); returns its weights, buffers (batch norm's running statistics, which
    each rank keeps for itself: ``broadcast_buffers=False``, as mmdet's ``train_detector``
    builds DDP) and SGD momenta, or the error's text."""
    torch.manual_seed(0)
    model = ShapeModel(shape, unused)
    cfg = Config(WRAPPERS[wrapper])  # read from the call stack, as from train_detector's
    ddp = MMDistributedDataParallel(model, broadcast_buffers=False,
                                    find_unused_parameters=cfg.get('find_unused_parameters',
                                                                   False))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    logger = logging.getLogger(f'shape.{shape}.{wrapper}')
    runner = IterBasedRunner(ddp, optimizer=optimizer, work_dir=osp.join(work_dir, wrapper),
                             logger=logger, max_iters=ITERATIONS, meta=dict())
    hooks = SHAPES[shape]
    optimizer_hook = next((hook for hook in hooks if isinstance(hook, dict)),
                          dict(grad_clip=None))
    runner.register_optimizer_hook(optimizer_hook)
    for hook in hooks:
        if isinstance(hook, type):
            runner.register_hook(hook(), priority='LOW')
    try:
        runner.run([_batches(dist.get_rank())], [('train', ITERATIONS)])
    except Exception as error:  # noqa: B902 - the parent test reads it
        return dict(error=f'{type(error).__name__}: {error}')
    momenta = [optimizer.state[p].get('momentum_buffer') for p in model.parameters()]
    result = dict(weights={k: v.detach().clone() for k, v in model.named_parameters()},
                  buffers={k: v.clone() for k, v in model.named_buffers()},
                  momenta=[None if m is None else m.clone() for m in momenta])
    for hook in runner.hooks:
        if isinstance(hook, CopyTheWrapperEMAHook):
            result.update(ema=hook.ema.state_dict(), saved=hook.saved.state_dict(),
                          copies=[type(hook.ema).__name__, type(hook.saved).__name__],
                          copies_watchdogs=[getattr(copy_, 'stall_watchdog', None) is not None
                                            for copy_ in (hook.ema, hook.saved)])
    return result


def train_every_wrapper(rank, world_size, runs, work_dir):
    """``runs``: (shape, wrapper, unused) triples, trained in order on every rank."""
    return {run: train_shape(*run, osp.join(work_dir, '_'.join(map(str, run))))
            for run in runs}
