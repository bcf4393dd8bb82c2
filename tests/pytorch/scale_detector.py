"""A detector shaped like the Ultralytics report (ultralytics #24536): a backbone, a neck that
makes three scales, and a head per scale whose loss term is left out when the batch has no
target at that scale, so that head's parameters get no gradient there. Which scales have a
target is decided by each rank's data, per iteration, as a real data loader decides it.

By default the model computes its loss in ``forward`` (as YOLO's ``DetectionModel`` does for
a training batch), so DDP's graph search starts from the loss and finds the left-out head
unreachable: that is what ``find_unused_parameters=True`` trains, and what GuardedDDP must
match. With another ``output`` (:data:`OUTPUTS`) it returns its predictions and the loop
computes the loss (:func:`scale_loss`), as most plain loops do: the left-out head's
prediction is then a returned tensor that no backward goes through. Both ways compute the
same numbers, operation for operation, so that the loss-in-forward model under
``find_unused_parameters=True`` is an independent reference wherever torch's DDP cannot
train the other shape.
"""
from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.nn as nn

SCALES = 3

#: Per iteration, per rank: the scales whose targets the batch holds. Rank 1 has no target
#: at scale 2 in iteration 1 (the ranks then differ: plain DDP fails or hangs; accumulated
#: in pairs, a parameter used in the window's first micro-step only, pytorch#69031), no
#: rank has one at scale 0 in iterations 2 and 3 (grad None on every rank, also over a
#: window of two: AdamW must skip that head), and rank 0 has none at scale 1 in iteration 4.
TARGETS = [
    [(0, 1, 2), (0, 1, 2)],
    [(0, 1, 2), (0, 1)],
    [(1, 2), (1, 2)],
    [(1, 2), (1, 2)],
    [(0, 2), (0, 1, 2)],
    [(0, 1, 2), (0, 1, 2)],
]


#: What the forward returns: the loss; the per-scale predictions as a list, a dict, a
#: dataclass; or DETR's way, the last scale's prediction with the others as auxiliary outputs.
OUTPUTS = ('loss', 'list', 'dict', 'dataclass', 'aux')


@dataclass
class ScalePredictions:
    """The per-scale predictions as a detector's output record (a dataclass)."""
    small: torch.Tensor
    medium: torch.Tensor
    large: torch.Tensor


def packed(predictions: List[torch.Tensor], output: str):
    """``predictions`` (per scale) in the shape that ``output`` names."""
    if output == 'list':
        return predictions
    if output == 'dict':
        return {f'scale{scale}': p for scale, p in enumerate(predictions)}
    if output == 'dataclass':
        return ScalePredictions(*predictions)
    if output == 'aux':
        return dict(pred_boxes=predictions[-1],
                    aux_outputs=[dict(pred_boxes=p) for p in predictions[:-1]])
    raise ValueError(f'unknown output {output!r}; one of {OUTPUTS}')


def unpacked(output_value, output: str) -> List[torch.Tensor]:
    """The per-scale predictions of what :func:`packed` returned."""
    if output == 'list':
        return list(output_value)
    if output == 'dict':
        return [output_value[f'scale{scale}'] for scale in range(SCALES)]
    if output == 'dataclass':
        return [output_value.small, output_value.medium, output_value.large]
    return [aux['pred_boxes'] for aux in output_value['aux_outputs']] + \
        [output_value['pred_boxes']]


def scale_loss(predictions: List[torch.Tensor], targets: List[Optional[torch.Tensor]]):
    """The sum over the scales that have a target of the squared error's mean: the loop's
    criterion, the same operations as the loss-in-forward model's."""
    loss = torch.zeros((), device=predictions[0].device)
    for prediction, target in zip(predictions, targets):
        if target is not None:
            loss = loss + (prediction - target).pow(2).mean()
    return loss


class ScaleDetector(nn.Module):
    """``output``: what the forward returns (:data:`OUTPUTS`)."""

    def __init__(self, channels: int = 8, output: str = 'loss'):
        super().__init__()
        if output not in OUTPUTS:
            raise ValueError(f'unknown output {output!r}; one of {OUTPUTS}')
        self.output = output
        self.backbone = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1),
                                      nn.BatchNorm2d(channels), nn.ReLU())
        self.necks = nn.ModuleList(
            nn.Conv2d(channels, channels, 3, stride=2 ** scale, padding=1)
            for scale in range(SCALES))
        self.heads = nn.ModuleList(nn.Conv2d(channels, 5, 1) for _ in range(SCALES))

    def forward(self, images: torch.Tensor, targets=None):
        """``targets``: per scale, a ``(N, 5, H, W)`` map, or None where the batch has no
        target at that scale (its head's term is left out of the loss); read only where the
        forward returns the loss."""
        features = self.backbone(images)
        predictions = [head(neck(features)) for neck, head in zip(self.necks, self.heads)]
        if self.output == 'loss':
            return scale_loss(predictions, targets)
        return packed(predictions, self.output)


def batch(rank: int, iteration: int, size: int = 16):
    """Rank ``rank``'s batch of ``iteration``: images and per-scale targets (None where
    :data:`TARGETS` says the batch has none), the same in every run."""
    generator = torch.Generator().manual_seed(1000 * rank + iteration)
    images = torch.randn(2, 3, size, size, generator=generator)
    present = TARGETS[iteration % len(TARGETS)][rank % 2]
    targets = [torch.randn(2, 5, (size + 2 ** scale - 1) // 2 ** scale,
                           (size + 2 ** scale - 1) // 2 ** scale, generator=generator)
               if scale in present else None for scale in range(SCALES)]
    return images, targets


def unused_names(rank: int, iteration: int):
    """The parameters left without a gradient in ``iteration`` on ``rank``: the neck and the
    head of each scale without a target."""
    present = TARGETS[iteration % len(TARGETS)][rank % 2]
    return sorted(f'{part}.{scale}.{name}' for scale in range(SCALES) if scale not in present
                  for part in ('necks', 'heads') for name in ('weight', 'bias'))
