"""``SyncBNBranchRetinaNet``: ``BranchRetinaNet`` (tests/openmmlab1/branch_detector.py) whose
refiner normalises with mmdet3d 0.x's own ``NaiveSyncBatchNorm2d`` (``mmdet3d.ops.norm``,
registered in mmcv's ``NORM_LAYERS`` as ``naiveSyncBN2d``), the synchronised BN of its
configs, which all-gathers its statistics in every training forward of a process group of
more than one rank.

With the tiny data and 2 ranks, rank 0 runs the refiner in every iteration and rank 1 never
(branch_detector.py's docstring): rank 0's all-gather has no partner, rank 1 goes on to the
all-reduce of mmdet's ``_parse_losses``. Needs mmdet3d 0.x (tools/mmdet3d_0x.sh)."""
from mmcv.cnn import build_norm_layer
from mmdet.models import DETECTORS

import mmdet3d.ops.norm  # noqa: F401  (registers naiveSyncBN2d)
from tests.openmmlab1.branch_detector import BranchRetinaNet


@DETECTORS.register_module(force=True)
class SyncBNBranchRetinaNet(BranchRetinaNet):
    """The refiner's ``BatchNorm2d`` replaced by mmdet3d's ``naiveSyncBN2d``."""

    def __init__(self, *args, refiner_channels=32, **kwargs):
        super(SyncBNBranchRetinaNet, self).__init__(
            *args, refiner_channels=refiner_channels, **kwargs)
        self.refiner[1] = build_norm_layer(dict(type='naiveSyncBN2d'), refiner_channels)[1]
