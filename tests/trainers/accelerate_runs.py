"""The scale detector (tests.pytorch.scale_detector) trained with Hugging Face Accelerate on
each rank, its loss computed in the loop (Accelerate's own example loop: ``preds =
model(x); loss = criterion(preds, y); accelerator.backward(loss)``), a scale left out of the
loss where the batch has no target there: under ``guard_ddp_builds()`` around ``prepare``,
and under Accelerate's own ``DistributedDataParallelKwargs(find_unused_parameters=True)``,
side by side in one process group.
"""
from typing import Dict, List

import torch

from tests.pytorch.scale_detector import ScaleDetector, batch, scale_loss, unpacked


def train(rank: int, guarded: bool, accumulate: int = 1, steps: int = 6) -> Dict:
    """One Accelerate run on this rank: ``steps`` optimizer steps of ``accumulate``
    micro-batches (``accelerator.accumulate``)."""
    from accelerate import Accelerator, DistributedDataParallelKwargs

    from mmdet3d_ddp_guard.pytorch import guard_ddp_builds
    handlers = [] if guarded else [DistributedDataParallelKwargs(find_unused_parameters=True)]
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=accumulate,
                              kwargs_handlers=handlers)
    torch.manual_seed(0)
    detector = ScaleDetector(output='list')
    optimizer = torch.optim.AdamW(detector.parameters(), lr=0.01, weight_decay=0.05)
    if guarded:
        with guard_ddp_builds():
            model, optimizer = accelerator.prepare(detector, optimizer)
    else:
        model, optimizer = accelerator.prepare(detector, optimizer)
    none_grads, grads, losses = [], [], []
    for iteration in range(steps * accumulate):
        images, targets = batch(rank, iteration)
        with accelerator.accumulate(model):
            loss = scale_loss(unpacked(model(images), 'list'), targets)
            accelerator.backward(loss)
            losses.append(loss.item())
            if accelerator.sync_gradients:
                named = list(detector.named_parameters())
                none_grads.append(sorted(name for name, p in named if p.grad is None))
                grads.append({name: p.grad.clone() for name, p in named if p.grad is not None})
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    unwrapped = accelerator.unwrap_model(model)
    return dict(params={k: v.detach().clone() for k, v in unwrapped.named_parameters()},
                buffers={k: v.clone() for k, v in unwrapped.named_buffers()},
                optimizer_state={k: {n: (t.clone() if torch.is_tensor(t) else t)
                                     for n, t in v.items()}
                                 for k, v in optimizer.state_dict()['state'].items()},
                none_grads=none_grads, grads=grads, losses=losses,
                wrapper=type(model).__name__, unwrapped_is_detector=unwrapped is detector,
                ddp_class=torch.nn.parallel.DistributedDataParallel.__name__)


def side_by_side(rank: int, world_size: int, cases: List[Dict]) -> List[Dict]:
    """For each case (``train``'s keyword arguments), the guarded run and Accelerate's graph
    search, one after the other in one process group."""
    return [dict(guarded=train(rank, True, **case), reference=train(rank, False, **case))
            for case in cases]
