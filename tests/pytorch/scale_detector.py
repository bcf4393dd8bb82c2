"""A detector shaped like the Ultralytics report (ultralytics #24536): a backbone, a neck that
makes three scales, and a head per scale whose loss term is left out when the batch has no
target at that scale, so that head's parameters get no gradient there. Which scales have a
target is decided by each rank's data, per iteration, as a real data loader decides it.

The model computes its loss in ``forward`` (as YOLO's ``DetectionModel`` does for a training
batch), so DDP's graph search starts from the loss and finds the left-out head unreachable:
that is what ``find_unused_parameters=True`` trains, and what GuardedDDP must match.
"""
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


class ScaleDetector(nn.Module):

    def __init__(self, channels: int = 8):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1),
                                      nn.BatchNorm2d(channels), nn.ReLU())
        self.necks = nn.ModuleList(
            nn.Conv2d(channels, channels, 3, stride=2 ** scale, padding=1)
            for scale in range(SCALES))
        self.heads = nn.ModuleList(nn.Conv2d(channels, 5, 1) for _ in range(SCALES))

    def forward(self, images: torch.Tensor, targets):
        """``targets``: per scale, a ``(N, 5, H, W)`` map, or None where the batch has no
        target at that scale (its head's term is left out of the loss)."""
        features = self.backbone(images)
        loss = images.new_zeros(())
        for neck, head, target in zip(self.necks, self.heads, targets):
            prediction = head(neck(features))
            if target is not None:
                loss = loss + (prediction - target).pow(2).mean()
        return loss


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
