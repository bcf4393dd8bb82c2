"""mmdet 2.14.0's ``build_dataloader`` (``mmdet/datasets/builder.py`` of its sdist; 2.14 is
BEVFormer's mmdet pin): its exact signature, and its body over the installed mmdet's samplers.

It names no ``runner_type`` or ``persistent_workers`` (later 2.x releases added them): like the
original, whatever its ``**kwargs`` catch-all gets goes on to torch's ``DataLoader``, which
fails on ``runner_type``. The tests put it in place of mmdet's
(``mmdet.datasets.builder.build_dataloader``) to run check as under mmdet 2.14.
"""
from functools import partial

from mmcv.parallel import collate
from mmcv.runner import get_dist_info
from mmdet.datasets.builder import worker_init_fn
from mmdet.datasets.samplers import DistributedGroupSampler, DistributedSampler, GroupSampler
from torch.utils.data import DataLoader


def build_dataloader(dataset, samples_per_gpu, workers_per_gpu, num_gpus=1, dist=True,
                     shuffle=True, seed=None, **kwargs):
    rank, world_size = get_dist_info()
    if dist:
        # 2.14 shuffles through the group sampler, so that each batch holds one group.
        if shuffle:
            sampler = DistributedGroupSampler(dataset, samples_per_gpu, world_size, rank,
                                              seed=seed)
        else:
            sampler = DistributedSampler(dataset, world_size, rank, shuffle=False, seed=seed)
        batch_size, num_workers = samples_per_gpu, workers_per_gpu
    else:
        sampler = GroupSampler(dataset, samples_per_gpu) if shuffle else None
        batch_size, num_workers = num_gpus * samples_per_gpu, num_gpus * workers_per_gpu
    init_fn = partial(worker_init_fn, num_workers=num_workers, rank=rank,
                      seed=seed) if seed is not None else None
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler,
                      num_workers=num_workers,
                      collate_fn=partial(collate, samples_per_gpu=samples_per_gpu),
                      pin_memory=False, worker_init_fn=init_fn, **kwargs)
