"""A small detector-shaped model whose unused parameters follow a chosen, known pattern.

Every pattern is one that kills plain DDP in real 3D detectors; ``expected_unused`` states,
for each iteration and rank, exactly which parameters autograd will not reach, so tests can
compare the reports of GuardedDDP and UnusedParamsHook with the truth.
"""
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import MessageHub
from mmengine.model import BaseModel
from mmengine.registry import DATASETS, MODELS

#: pattern -> what it imitates
UNUSED_PATTERNS = {
    'none': 'every parameter used in every iteration',
    'dead_layer': 'a layer built in __init__ and never called (a leftover refinement head)',
    'skip_odd': 'a branch skipped on odd iterations (a loss skipped on an empty input)',
    'rank_dependent': 'a branch used only where (iteration + rank) is even, so ranks '
                      'disagree in the same iteration (a class with no box on one GPU)',
    'output_not_in_loss': 'an auxiliary output computed every iteration but left out of '
                          'the loss',
    'undefined_grad': 'a custom autograd Function that returns no gradient (None) for a '
                      'gate weight on every rank (PyTorch\'s own DDP parity test case)',
    'undefined_grad_rank_dependent': 'the same gate, its gradient defined on even ranks '
                                     'and undefined on odd ranks',
}

BRANCH_PARAMS = ('branch.weight', 'branch.bias')
DEAD_PARAMS = ('dead.weight', 'dead.bias')
AUX_PARAMS = ('aux.weight', 'aux.bias')
GATE_PARAMS = ('gate', )


class _NoGradForWeight(torch.autograd.Function):
    """``x * weight`` whose backward returns None for ``weight``: autograd reaches the
    weight, runs its hooks, and leaves its gradient undefined."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(weight)
        return x * weight

    @staticmethod
    def backward(ctx, grad):
        weight, = ctx.saved_tensors
        return grad * weight, None


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


@MODELS.register_module()
class ToyDetector(BaseModel):
    """A trunk, a box head, an optional branch, a dead layer and an auxiliary head.

    Args:
        pattern (str): One of :data:`UNUSED_PATTERNS`.
        width (int): Hidden width.
        depth (int): Number of extra trunk blocks (to give benchmarks a few hundred
            parameter tensors).
    """

    def __init__(self, pattern: str = 'skip_odd', width: int = 16, depth: int = 0,
                 data_preprocessor: Optional[dict] = None):
        super().__init__(data_preprocessor=data_preprocessor)
        if pattern not in UNUSED_PATTERNS:
            raise ValueError(f'ToyDetector: pattern={pattern!r} is not one of '
                             f'{sorted(UNUSED_PATTERNS)}.')
        self.pattern = pattern
        self.stem = nn.Linear(8, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.branch = nn.Linear(width, width)
        self.dead = nn.Linear(width, width)
        self.aux = nn.Linear(width, 4)
        self.box_head = nn.Linear(width, 1)
        if pattern.startswith('undefined_grad'):
            self.gate = nn.Parameter(torch.ones(width))
        self.forward_count = 0

    def expected_unused(self, iteration: int, rank: int) -> List[str]:
        """Parameter names autograd will not reach in ``iteration`` on ``rank``."""
        unused = list(DEAD_PARAMS)
        if not self._branch_runs(iteration, rank):
            unused += BRANCH_PARAMS
        if self.pattern == 'output_not_in_loss':
            unused += AUX_PARAMS
        if self._gate_grad_undefined(rank):
            unused += GATE_PARAMS
        return sorted(unused) if self.pattern != 'none' else []

    def _gate_grad_undefined(self, rank: int) -> bool:
        return (self.pattern == 'undefined_grad'
                or self.pattern == 'undefined_grad_rank_dependent' and rank % 2 == 1)

    def _branch_runs(self, iteration: int, rank: int) -> bool:
        if self.pattern == 'skip_odd':
            return iteration % 2 == 0
        if self.pattern == 'rank_dependent':
            return (iteration + rank) % 2 == 0
        return True

    def _iteration(self) -> int:
        """``runner.iter`` inside a Runner (so a resumed run continues the pattern), else a
        count of training forwards."""
        count, self.forward_count = self.forward_count, self.forward_count + 1
        runner_iter = MessageHub.get_current_instance().get_info('iter')
        return count if runner_iter is None else runner_iter

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor = None,
                mode: str = 'loss'):
        iteration = self._iteration()
        x = F.relu(self.stem(inputs))
        for block in self.blocks:
            x = x + F.relu(block(x))
        if self._branch_runs(iteration, _rank()):
            x = x + torch.tanh(self.branch(x))
        if self.pattern == 'none':
            # Every parameter, the otherwise dead one included, reaches the loss.
            x = x + 0.1 * torch.tanh(self.dead(x))
        if self._gate_grad_undefined(_rank()):
            x = _NoGradForWeight.apply(x, self.gate)
        elif self.pattern.startswith('undefined_grad'):
            x = x * self.gate
        aux = self.aux(x)
        pred = self.box_head(x).squeeze(-1)
        if mode != 'loss':
            return pred
        losses = dict(loss_box=F.mse_loss(pred, targets))
        if self.pattern != 'output_not_in_loss':
            losses['loss_aux'] = 0.1 * aux.pow(2).mean()
        return losses


def make_toy_batch(iteration: int, rank: int, batch_size: int = 4,
                   seed: int = 0) -> Dict[str, torch.Tensor]:
    """A deterministic batch that differs by iteration and rank."""
    generator = torch.Generator().manual_seed(seed * 100003 + iteration * 101 + rank)
    inputs = torch.randn(batch_size, 8, generator=generator)
    return dict(inputs=inputs, targets=_target_of(inputs))


def _target_of(inputs: torch.Tensor) -> torch.Tensor:
    return inputs.sum(dim=-1) * 0.5


@DATASETS.register_module()
class ToyDataset(torch.utils.data.Dataset):
    """Samples for :class:`ToyDetector` through a real Runner, sampler and collate.

    Args:
        length (int): Number of samples.
        seed (int): Seed of the deterministic samples.
    """

    def __init__(self, length: int = 64, seed: int = 0):
        self.length = length
        self.seed = seed
        self.metainfo = dict(classes=('box', ))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 100003 + index)
        inputs = torch.randn(8, generator=generator)
        return dict(inputs=inputs, targets=_target_of(inputs))
