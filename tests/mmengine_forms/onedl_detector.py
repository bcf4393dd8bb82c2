"""The OneDL stack's own detector under the guard (issue 60, item 4; run by
``tools/onedl_stack.sh``, not in CI): mmdet 3.5.1's RetinaNet-R18 (onedl-mmdetection, built
from its own config) on 2 gloo ranks, 3 ``train_step`` iterations, rank 1's second image
without a box, under GuardedDDP and under MMEngine's ``MMDistributedDataParallel(
find_unused_parameters=True)``: prints whether every rank's parameters ended bit for bit
alike."""
import os.path as osp

import torch

from tests.dist_utils import run_distributed


def train(rank: int, world_size: int, wrapper: str):
    import mmdet
    from mmdet.registry import MODELS
    from mmdet.testing import demo_mm_inputs
    from mmengine.config import Config
    from mmengine.model import MMDistributedDataParallel
    from mmengine.optim import OptimWrapper
    from mmengine.registry import init_default_scope

    from mmdet3d_ddp_guard import GuardedDDP
    init_default_scope('mmdet')
    cfg = Config.fromfile(osp.join(osp.dirname(mmdet.__file__),
                                   '.mim/configs/retinanet/retinanet_r18_fpn_1x_coco.py'))
    cfg.model.backbone.init_cfg = None  # no download
    torch.manual_seed(0)
    model = MODELS.build(cfg.model)
    ddp = GuardedDDP(model) if wrapper == 'guarded' else \
        MMDistributedDataParallel(model, find_unused_parameters=True)
    optim_wrapper = OptimWrapper(torch.optim.SGD(ddp.parameters(), lr=1e-4, momentum=0.9))
    for iteration in range(3):
        torch.manual_seed(100 * rank + iteration)
        boxes = 0 if (iteration, rank) == (1, 1) else 3
        ddp.train_step(demo_mm_inputs(batch_size=1, image_shapes=[(3, 128, 128)],
                                      num_items=[boxes]), optim_wrapper)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


if __name__ == '__main__':
    guarded = run_distributed(train, 'guarded', timeout=600)
    reference = run_distributed(train, 'reference', timeout=600)
    print('ONEDL RETINANET bit for bit per rank:',
          [all(torch.equal(mine[name], theirs[name]) for name in theirs)
           for mine, theirs in zip(guarded, reference)],
          'NaN:', any(torch.isnan(p).any().item() for p in guarded[0].values()))
