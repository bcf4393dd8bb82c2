"""The plugin's own ``build_dataloader``, shaped like BEVFormer's and UniAD's
(``projects/mmdet3d_plugin/datasets/builder.py``): their signature, the rank read from this
module's ``get_dist_info``, and the sampler built by the plugin's own registry from
``shuffler_sampler`` (``nonshuffler_sampler`` with ``shuffle=False``), which their train
modules pass from ``cfg.data``. Not mmdet's: mmdet's ``build_dataloader`` would build
mmdet's samplers and order the samples differently.
"""
from functools import partial

from mmcv.parallel import collate
from mmcv.runner import get_dist_info
from torch.utils.data import DataLoader

from .samplers import build_sampler


def build_dataloader(dataset, samples_per_gpu, workers_per_gpu, num_gpus=1, dist=True,
                     shuffle=True, seed=None, shuffler_sampler=None, nonshuffler_sampler=None,
                     **kwargs):
    # The codebases support only distributed training here; one process is rank 0 of 1.
    rank, world_size = get_dist_info() if dist else (0, 1)
    if shuffle:
        sampler = build_sampler(
            shuffler_sampler or dict(type='DistributedGroupSampler'),
            dict(dataset=dataset, samples_per_gpu=samples_per_gpu, num_replicas=world_size,
                 rank=rank, seed=seed))
    else:
        sampler = build_sampler(
            nonshuffler_sampler or dict(type='DistributedSampler'),
            dict(dataset=dataset, num_replicas=world_size, rank=rank, shuffle=False,
                 seed=seed))
    return DataLoader(dataset, batch_size=samples_per_gpu, sampler=sampler,
                      num_workers=workers_per_gpu,
                      collate_fn=partial(collate, samples_per_gpu=samples_per_gpu),
                      pin_memory=False, **kwargs)
