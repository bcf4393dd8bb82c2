"""A small detector whose refiner runs only for batches that hold a pedestrian, and data
where which rank sees one depends on the number of ranks: the case ``check --world-size N``
exists for.

:class:`ToyPedestrianDataset` puts a pedestrian in every sample except every
``absent_every``-th one (indices 0, 4, 8, ... by default). With batch size 2 and no shuffling,
every batch of one process and of 2 ranks holds a pedestrian, so a one-process check sees
nothing unused; with 4 ranks, MMEngine's ``DefaultSampler`` gives rank 0 the samples 0, 4, 8,
... and rank 0 never runs the refiner: plain DDP dies at iteration 0 on rank 0.

Importing this module needs mmcv (the refiner's norm layer is built from ``norm_cfg``
through ``mmcv.cnn.build_norm_layer``, as in mmdet3d's own layers).
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModel
from mmengine.registry import DATASETS, MODELS

PEDESTRIAN = 8  # nuScenes' label index, as in the CenterPoint example


@MODELS.register_module()
class ToyGatedRefinerDetector(BaseModel):
    """A stem, a refiner that runs only when the batch holds a ``gate_class`` label, a head.

    Args:
        width (int): Hidden width.
        gate_class (int): Label whose presence in the batch switches the refiner on.
        refiner_norm_cfg (dict): The refiner's norm layer (``dict(type='BN1d')``;
            ``dict(type='SyncBN')`` gives it a collective in the forward).
    """

    def __init__(self, width: int = 16, gate_class: int = PEDESTRIAN,
                 refiner_norm_cfg: Optional[dict] = None,
                 data_preprocessor: Optional[dict] = None):
        super().__init__(data_preprocessor=data_preprocessor)
        self.gate_class = gate_class
        self.stem = nn.Linear(8, width)
        _, norm = build_norm_layer(refiner_norm_cfg or dict(type='BN1d'), width)
        self.refiner = nn.Sequential(nn.Linear(width, width), norm, nn.ReLU())
        self.head = nn.Linear(width, 1)

    def forward(self, inputs: torch.Tensor, targets: torch.Tensor = None,
                labels: torch.Tensor = None, mode: str = 'loss'):
        x = F.relu(self.stem(inputs))
        if labels is not None and (labels == self.gate_class).any():
            x = x + self.refiner(x)
        pred = self.head(x).squeeze(-1)
        if mode != 'loss':
            return pred
        return dict(loss_box=F.mse_loss(pred, targets))


@DATASETS.register_module()
class ToyPedestrianDataset(torch.utils.data.Dataset):
    """Samples with a label each: a pedestrian except at every ``absent_every``-th index.

    Args:
        length (int): Number of samples.
        absent_every (int): Indices divisible by this hold no pedestrian.
    """

    def __init__(self, length: int = 64, absent_every: int = 4):
        if absent_every < 1:
            raise ValueError(f'ToyPedestrianDataset: absent_every must be >= 1, not '
                             f'{absent_every}.')
        self.length = length
        self.absent_every = absent_every
        self.metainfo = dict(classes=('car', 'pedestrian'))

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        inputs = torch.randn(8, generator=torch.Generator().manual_seed(index))
        label = 0 if index % self.absent_every == 0 else PEDESTRIAN
        return dict(inputs=inputs, targets=inputs.sum() * 0.5, labels=torch.tensor(label))
