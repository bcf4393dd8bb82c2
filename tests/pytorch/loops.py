"""Plain PyTorch training loops, as users write them around torch's DDP, run on each rank by
the tests of :mod:`tests.pytorch`: the same loop under GuardedDDP and under a reference
wrapper, side by side in one process group, so that every rank's weights, buffers, optimizer
state and ``None`` gradients can be compared bit for bit."""
import copy
from typing import Callable, Dict, List

import torch
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.pytorch import GuardedDDP
from tests.pytorch.scale_detector import ScaleDetector, batch


def fresh_model(seed: int = 0) -> ScaleDetector:
    torch.manual_seed(seed)
    return ScaleDetector()


def graph_search(model, **kwargs):
    return DistributedDataParallel(model, find_unused_parameters=True, **kwargs)


def guarded(model, **kwargs):
    return GuardedDDP(model, **kwargs)


class Run:
    """One wrapped model, its AdamW and what it recorded."""

    def __init__(self, wrap: Callable, **kwargs):
        self.model = wrap(fresh_model(), **kwargs)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=0.01,
                                           weight_decay=0.05)
        #: Per optimizer step, the names whose grad was None before it.
        self.none_grads: List[List[str]] = []

    def step(self, rank: int, iterations, accumulate: int = 1) -> None:
        """One optimizer step over ``accumulate`` micro-batches (``no_sync`` for all but the
        last), the loss divided as users do."""
        for micro, iteration in enumerate(iterations):
            images, targets = batch(rank, iteration)
            syncing = micro == accumulate - 1
            context = self.model.no_sync() if not syncing else _nothing()
            with context:
                loss = self.model(images, targets) / accumulate
                loss.backward()
        self.none_grads.append(sorted(name for name, p in self.model.module.named_parameters()
                                      if p.grad is None))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def state(self) -> Dict:
        module = self.model.module
        return dict(params={k: v.detach().clone() for k, v in module.named_parameters()},
                    buffers={k: v.clone() for k, v in module.named_buffers()},
                    optimizer_state=copy.deepcopy(self.optimizer.state_dict()['state']),
                    none_grads=self.none_grads)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def train_side_by_side(rank: int, world_size: int, accumulate: int = 1, steps: int = 6,
                       guarded_kwargs: Dict = None, reference: Callable = graph_search
                       ) -> Dict:
    """GuardedDDP(model, **guarded_kwargs) and ``reference(model)`` trained on the same
    batches, step by step; both runs' states and the guard's decision."""
    runs = dict(guarded=Run(guarded, **(guarded_kwargs or {})), reference=Run(reference))
    for step in range(steps):
        iterations = range(step * accumulate, (step + 1) * accumulate)
        for run in runs.values():
            run.step(rank, iterations, accumulate)
    result = {name: run.state() for name, run in runs.items()}
    result['decision'] = str(runs['guarded'].model.decision.mode)
    return result


def plain_ddp_steps(rank: int, world_size: int, steps: int = 6, **ddp_kwargs) -> int:
    """Torch's DDP(model, **ddp_kwargs) on the loop; returns the steps it finished (it is
    expected to raise before)."""
    run = Run(lambda model: DistributedDataParallel(model, **ddp_kwargs))
    for step in range(steps):
        run.step(rank, [step])
    return steps
