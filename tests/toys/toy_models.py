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
import torch.utils.checkpoint
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
    'output_logged_not_in_loss': "the same auxiliary output, returned in the losses dict "
                                 "under a name without 'loss' (logged, not summed: an "
                                 "accuracy with its graph), so that DDP's forward returns it",
    'undefined_grad': 'a custom autograd Function that returns no gradient (None) for a '
                      'gate weight on every rank (PyTorch\'s own DDP parity test case)',
    'undefined_grad_rank_dependent': 'the same gate, its gradient defined on even ranks '
                                     'and undefined on odd ranks',
    'undefined_grad_only': "the gate of 'undefined_grad_rank_dependent' and nothing else "
                           'unused (the otherwise dead layer reaches the loss): plain DDP '
                           'trains it, reducing the undefined gradients as zeros',
    'frozen_shared_detached': 'a frozen layer (requires_grad=False, as frozen_stages '
                              'leaves a backbone stage), a weight shared by two paths of '
                              'which one is skipped on odd iterations, the branch of '
                              "'rank_dependent', and the auxiliary output detached before "
                              'the loss on odd ranks',
    'one_gate_per_rank': 'four gated layers; rank r skips gate (iteration + r) % 4, so 4 '
                         'ranks leave four different sets unused in the same iteration',
}

#: ``checkpoint`` option -> how the trunk (the ``blocks`` and the branch) is checkpointed
CHECKPOINT_MODES = {
    None: 'not checkpointed',
    'reentrant': 'torch.utils.checkpoint(use_reentrant=True), as mmdet\'s with_cp=True',
    'non_reentrant': 'torch.utils.checkpoint(use_reentrant=False)',
}
NUM_GATES = 4

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
        checkpoint (str, optional): One of :data:`CHECKPOINT_MODES`: activation
            checkpointing of the trunk, whose branch may go unused inside it.
    """

    def __init__(self, pattern: str = 'skip_odd', width: int = 16, depth: int = 0,
                 checkpoint: Optional[str] = None,
                 data_preprocessor: Optional[dict] = None):
        super().__init__(data_preprocessor=data_preprocessor)
        if pattern not in UNUSED_PATTERNS:
            raise ValueError(f'ToyDetector: pattern={pattern!r} is not one of '
                             f'{sorted(UNUSED_PATTERNS)}.')
        if checkpoint not in CHECKPOINT_MODES:
            raise ValueError(f'ToyDetector: checkpoint={checkpoint!r} is not one of '
                             f'{list(CHECKPOINT_MODES)}.')
        self.pattern = pattern
        self.checkpoint = checkpoint
        self.stem = nn.Linear(8, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.branch = nn.Linear(width, width)
        self.dead = nn.Linear(width, width)
        self.aux = nn.Linear(width, 4)
        self.box_head = nn.Linear(width, 1)
        if pattern.startswith('undefined_grad'):
            self.gate = nn.Parameter(torch.ones(width))
        # Built only for their patterns, after the others, so that the other patterns keep
        # their parameters and parameter order.
        if pattern == 'frozen_shared_detached':
            self.frozen = nn.Linear(width, width).requires_grad_(False)
            self.shared = nn.Linear(width, width)
        self.gates = nn.ModuleList(
            nn.Linear(width, width)
            for _ in range(NUM_GATES if pattern == 'one_gate_per_rank' else 0))
        self.forward_count = 0

    def expected_unused(self, iteration: int, rank: int,
                        grads_zeroed_in_place: bool = False) -> List[str]:
        """Parameter names autograd will not reach in ``iteration`` on ``rank``.

        ``grads_zeroed_in_place``: the optimizer zeroes gradients in place
        (``zero_grad(set_to_none=False)``, torch < 2.0's default). An undefined gradient
        that reaches a parameter holding a zeroed gradient then leaves a defined ``.grad``,
        which DDP's graph search counts as used, and so does the usage record: after the
        first iteration, the gate whose gradient some rank defines holds the reduced
        gradient on every rank.
        """
        unused = [] if self._dead_layer_runs() else list(DEAD_PARAMS)
        if not self._branch_runs(iteration, rank):
            unused += BRANCH_PARAMS
        if self._aux_out_of_loss(rank):
            unused += AUX_PARAMS
        gate_defined_somewhere = self.pattern != 'undefined_grad'
        if self._gate_grad_undefined(rank) and not (
                grads_zeroed_in_place and gate_defined_somewhere and iteration > 0):
            unused += GATE_PARAMS
        if self.gates:
            skipped = self._skipped_gate(iteration, rank)
            unused += [f'gates.{skipped}.weight', f'gates.{skipped}.bias']
        return sorted(unused)

    def _dead_layer_runs(self) -> bool:
        return self.pattern in ('none', 'undefined_grad_only')

    def _gate_grad_undefined(self, rank: int) -> bool:
        return (self.pattern == 'undefined_grad'
                or self.pattern in ('undefined_grad_rank_dependent', 'undefined_grad_only')
                and rank % 2 == 1)

    def _branch_runs(self, iteration: int, rank: int) -> bool:
        if self.pattern == 'skip_odd':
            return iteration % 2 == 0
        if self.pattern in ('rank_dependent', 'frozen_shared_detached'):
            return (iteration + rank) % 2 == 0
        return True

    def _aux_out_of_loss(self, rank: int) -> bool:
        return (self.pattern in ('output_not_in_loss', 'output_logged_not_in_loss')
                or self.pattern == 'frozen_shared_detached' and rank % 2 == 1)

    def _skipped_gate(self, iteration: int, rank: int) -> int:
        return (iteration + rank) % len(self.gates)

    def _iteration(self) -> int:
        """``runner.iter`` inside a Runner (so a resumed run continues the pattern), else a
        count of training forwards."""
        count, self.forward_count = self.forward_count, self.forward_count + 1
        runner_iter = MessageHub.get_current_instance().get_info('iter')
        return count if runner_iter is None else runner_iter

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor = None,
                mode: str = 'loss'):
        iteration, rank = self._iteration(), _rank()
        x = F.relu(self.stem(inputs))
        if self.pattern == 'frozen_shared_detached':
            x = x + torch.tanh(self.frozen(x))
        if self.checkpoint is None:
            x = self._trunk(x, iteration, rank)
        else:
            x = torch.utils.checkpoint.checkpoint(
                self._trunk, x, iteration, rank,
                use_reentrant=self.checkpoint == 'reentrant')
        if self._dead_layer_runs():
            # The otherwise dead layer reaches the loss too.
            x = x + 0.1 * torch.tanh(self.dead(x))
        if self._gate_grad_undefined(_rank()):
            x = _NoGradForWeight.apply(x, self.gate)
        elif self.pattern.startswith('undefined_grad'):
            x = x * self.gate
        if self.pattern == 'frozen_shared_detached':
            x = x + torch.tanh(self.shared(x))
            if iteration % 2 == 0:
                x = x + 0.5 * torch.tanh(self.shared(F.relu(-x)))
        for index, gate in enumerate(self.gates):
            if index != self._skipped_gate(iteration, rank):
                x = x + torch.tanh(gate(x))
        aux = self.aux(x)
        pred = self.box_head(x).squeeze(-1)
        if mode != 'loss':
            return pred
        losses = dict(loss_box=F.mse_loss(pred, targets))
        if self.pattern == 'frozen_shared_detached' and self._aux_out_of_loss(rank):
            # In the loss, but cut from the graph: autograd never reaches the aux head.
            losses['loss_aux'] = 0.1 * aux.detach().pow(2).mean()
        elif not self._aux_out_of_loss(rank):
            losses['loss_aux'] = 0.1 * aux.pow(2).mean()
        if self.pattern == 'output_logged_not_in_loss':
            losses['aux_energy'] = aux.pow(2).mean()
        return losses

    def _trunk(self, x: torch.Tensor, iteration: int, rank: int) -> torch.Tensor:
        """The blocks and the branch: the part that ``checkpoint`` checkpoints."""
        for block in self.blocks:
            x = x + F.relu(block(x))
        if self._branch_runs(iteration, rank):
            x = x + torch.tanh(self.branch(x))
        return x


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
