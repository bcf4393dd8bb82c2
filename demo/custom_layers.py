"""The custom layer of the CenterPoint example: what users add, and what kills plain DDP.

Importing this module needs mmdet3d (it registers into mmdet3d's MODELS registry); the
example configs import it through ``custom_imports``.
"""
from typing import Dict, List

import torch.nn as nn
from mmdet3d.models.detectors import CenterPoint
from mmdet3d.registry import MODELS
from mmdet3d.structures import Det3DDataSample


@MODELS.register_module()
class CenterPointWithGatedRefiner(CenterPoint):
    """CenterPoint with a BEV refinement block that runs only for batches that contain a
    box of ``gate_class``.

    A typical user addition (extra capacity for a rare, small class such as pedestrians).
    On one GPU it trains. On several, any batch without such a box leaves the refiner's
    parameters without a gradient on that rank: plain DDP then fails with "Expected to have
    finished reduction in the prior iteration", or hangs when another rank did see the
    class.

    Args:
        gate_class (int): Label index whose presence switches the refiner on (nuScenes:
            8 = pedestrian).
        refiner_channels (int): Channels of the neck output (CenterPoint pillar: 384).
        **kwargs: CenterPoint's arguments.
    """

    def __init__(self, gate_class: int = 8, refiner_channels: int = 384, **kwargs):
        super().__init__(**kwargs)
        self.gate_class = gate_class
        self.refiner = nn.Sequential(
            nn.Conv2d(refiner_channels, refiner_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(refiner_channels), nn.ReLU(inplace=True))

    def batch_has_gate_class(self, batch_data_samples: List[Det3DDataSample]) -> bool:
        return any((sample.gt_instances_3d.labels_3d == self.gate_class).any()
                   for sample in batch_data_samples)

    def loss(self, batch_inputs_dict: Dict, batch_data_samples: List[Det3DDataSample],
             **kwargs) -> Dict:
        batch_input_metas = [item.metainfo for item in batch_data_samples]
        _, pts_feats = self.extract_feat(batch_inputs_dict, batch_input_metas)
        if self.batch_has_gate_class(batch_data_samples):
            pts_feats = [feat + self.refiner(feat) for feat in pts_feats]
        return self.pts_bbox_head.loss(pts_feats, batch_data_samples, **kwargs)
