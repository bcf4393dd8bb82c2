"""``BranchRetinaNet``: mmdet 2.x's RetinaNet with a branch that some batches skip.

The detector adds ``refiner`` (``nn.Sequential(Conv2d, BatchNorm2d, ReLU)`` on the first FPN
level) and runs it only when the batch holds a ground-truth box of label ``branch_label``
(default 1, ``pedestrian`` in ``tests.openmmlab1.tiny_coco``); then it adds
``loss_refine``. A batch without label 1 never calls the refiner, so autograd never reaches
its 3 parameters (``REFINER_PARAMS``: conv weight, BN weight, BN bias): under plain
DDP those get no gradient on the ranks whose batch skips the branch, and one on the others.

Which batches skip it, with the tiny data (``make_tiny_coco``: image ``i`` holds a pedestrian
exactly when ``i`` is even) and the configs in ``tests/openmmlab1/configs`` (IterBasedRunner,
``data.train_dataloader = dict(shuffle=False)``, so mmdet's ``InfiniteBatchSampler`` hands rank
``r`` of ``W`` the dataset indices ``r, r+W, r+2W, ...`` cut into batches of
``samples_per_gpu``, in order, wrapping around the dataset):

* one process, ``samples_per_gpu=1``: iterations 0, 2, 4, ... run the branch (images 0, 2,
  4, ...); iterations 1, 3, 5, ... skip it.
* two ranks, ``samples_per_gpu=1`` or 2 (any even number of images): rank 0 reads only even
  images, so it runs the branch at EVERY iteration; rank 1 reads only odd images and skips
  it at EVERY iteration.
* one process, ``samples_per_gpu=2``: every batch is [2k, 2k+1], so it never skips.

Both keys ``loss_refine`` (a constant 0 unconnected to any parameter when skipped) and
``refine_ran`` (1.0 or 0.0; no ``loss`` in its name so it is only logged) are always present,
because mmdet's ``_parse_losses`` asserts all ranks log the same keys. Each training forward
prints ``[branch] rank=R call=N ran=0|1 files=...`` and appends ``(ran, files)`` to
``self.branch_history``.
"""
import torch.nn as nn
from mmcv.runner import get_dist_info
from mmdet.models import DETECTORS
from mmdet.models.detectors import RetinaNet, SingleStageDetector

REFINER_PARAMS = ('refiner.0.weight', 'refiner.1.weight', 'refiner.1.bias')


@DETECTORS.register_module(force=True)
class BranchRetinaNet(RetinaNet):
    """RetinaNet plus a ``refiner`` that runs only on batches with a box of ``branch_label``."""

    def __init__(self, *args, refiner_channels=32, branch_label=1, refine_weight=0.1,
                 fail_rank=None, fail_call=None, **kwargs):
        super(BranchRetinaNet, self).__init__(*args, **kwargs)
        # A rank whose forward raises at one call, while the others go on (the stall guard).
        self.fail_rank, self.fail_call = fail_rank, fail_call
        self.branch_label = branch_label
        self.refine_weight = refine_weight
        self.refiner = nn.Sequential(
            nn.Conv2d(refiner_channels, refiner_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(refiner_channels),
            nn.ReLU(inplace=True))
        self.branch_history = []

    def forward_train(self, img, img_metas, gt_bboxes, gt_labels, gt_bboxes_ignore=None):
        rank, _ = get_dist_info()
        if rank == self.fail_rank and len(self.branch_history) == self.fail_call:
            raise ValueError(f'rank {rank} cannot read its batch')
        # What SingleStageDetector.forward_train does, keeping the features for the branch.
        super(SingleStageDetector, self).forward_train(img, img_metas)
        x = self.extract_feat(img)
        losses = self.bbox_head.forward_train(x, img_metas, gt_bboxes, gt_labels,
                                              gt_bboxes_ignore)
        ran = any(bool((labels == self.branch_label).any()) for labels in gt_labels)
        if ran:
            losses['loss_refine'] = self.refiner(x[0]).pow(2).mean() * self.refine_weight
        else:
            losses['loss_refine'] = x[0].new_zeros(())
        losses['refine_ran'] = x[0].new_tensor(float(ran))
        files = [meta.get('ori_filename', meta.get('filename')) for meta in img_metas]
        self.branch_history.append((ran, files))
        print('[branch] rank=%d call=%d ran=%d files=%s'
              % (rank, len(self.branch_history) - 1, int(ran), ','.join(files)), flush=True)
        return losses
