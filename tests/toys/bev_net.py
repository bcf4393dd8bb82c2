"""A BEV conv net shaped like CenterPoint's: SECOND-style backbone, FPN-style neck, task heads.

Used by the benchmarks (CPU and GPU) as a model with a few hundred parameter tensors whose
unused set can be made to change between iterations the way CenterPoint's does.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModel
from mmengine.registry import DATASETS, MODELS


def _conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


@MODELS.register_module()
class BEVConvNet(BaseModel):
    """Backbone of 3 stages, a neck that upsamples and concatenates them, and
    ``num_tasks`` heads of ``branches_per_task`` small conv branches each.

    Args:
        in_channels (int): Channels of the BEV input.
        width (int): Channels of the first stage (doubled per stage).
        layers_per_stage (int): Convs per stage after the strided one.
        num_tasks (int): Task heads (CenterPoint nuScenes: 6).
        branches_per_task (int): Branches per head (CenterPoint: reg, height, dim, rot,
            vel, heatmap = 6).
        skip_task (str): ``'never'``; ``'odd'``: the last task head is skipped on odd
            iterations on every rank; ``'rank'``: skipped where (iteration + rank) is odd,
            so ranks disagree.
    """

    def __init__(self, in_channels: int = 64, width: int = 32, layers_per_stage: int = 3,
                 num_tasks: int = 6, branches_per_task: int = 6, skip_task: str = 'never'):
        super().__init__()
        if skip_task not in ('never', 'odd', 'rank'):
            raise ValueError(f"BEVConvNet: skip_task={skip_task!r} is not one of 'never', "
                             "'odd', 'rank'.")
        self.skip_task = skip_task
        stages, cin = [], in_channels
        for index in range(3):
            cout = width * 2**index
            stages.append(nn.Sequential(
                _conv_bn(cin, cout, stride=1 if index == 0 else 2),
                *[_conv_bn(cout, cout) for _ in range(layers_per_stage)]))
            cin = cout
        self.stages = nn.ModuleList(stages)
        self.lateral = nn.ModuleList(
            nn.Sequential(nn.Conv2d(width * 2**i, width, 1, bias=False), nn.BatchNorm2d(width))
            for i in range(3))
        neck_channels = 3 * width
        self.shared = _conv_bn(neck_channels, width)
        self.tasks = nn.ModuleList(
            nn.ModuleList(
                nn.Sequential(_conv_bn(width, width), nn.Conv2d(width, 2, 1))
                for _ in range(branches_per_task)) for _ in range(num_tasks))
        self.forward_count = 0

    def _task_runs(self, task: int, iteration: int) -> bool:
        if task != len(self.tasks) - 1 or self.skip_task == 'never':
            return True
        rank = dist.get_rank() if dist.is_initialized() else 0
        offset = rank if self.skip_task == 'rank' else 0
        return (iteration + offset) % 2 == 0

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor = None, mode='loss'):
        iteration, self.forward_count = self.forward_count, self.forward_count + 1
        features, x = [], inputs
        for stage in self.stages:
            x = stage(x)
            features.append(x)
        size = features[0].shape[-2:]
        neck = torch.cat([
            F.interpolate(lateral(f), size=size) if i else lateral(f)
            for i, (lateral, f) in enumerate(zip(self.lateral, features))
        ], dim=1)
        shared = self.shared(neck)
        loss = shared.new_zeros(())
        for task_index, branches in enumerate(self.tasks):
            if not self._task_runs(task_index, iteration):
                continue
            for branch in branches:
                loss = loss + F.smooth_l1_loss(branch(shared), targets)
        return dict(loss_heads=loss)


def make_bev_batch(batch_size: int, in_channels: int, size: int, device='cpu', seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batch_size, in_channels, size, size, generator=generator)
    targets = torch.randn(batch_size, 2, size, size, generator=generator)
    return dict(inputs=inputs.to(device), targets=targets.to(device))


@DATASETS.register_module()
class BEVNoiseDataset(torch.utils.data.Dataset):
    """Random BEV inputs and targets for :class:`BEVConvNet` through a real Runner.

    Args:
        length (int): Number of samples.
        in_channels (int): Channels of the input.
        size (int): Side of the BEV grid.
    """

    def __init__(self, length: int = 64, in_channels: int = 32, size: int = 64):
        self.length, self.in_channels, self.size = length, in_channels, size
        self.metainfo = dict(classes=('box', ))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        batch = make_bev_batch(1, self.in_channels, self.size, seed=index)
        return {key: value[0] for key, value in batch.items()}
