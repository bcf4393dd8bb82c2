"""The plugin's ``DistributedGroupSampler``: same name and arguments as BEVFormer's and
mmdet's, and a different order, so that the tests can tell whose sampler a loader holds.

mmdet's permutes with one ``torch.Generator`` and deals the batches out to the ranks by a
second permutation; this one permutes each aspect-ratio group with
``numpy.random.RandomState(seed + epoch)`` and gives rank r the r-th contiguous block, as
BEVFormer's ``DistributedSampler`` shards. Each batch still holds one group: every group is
padded to a multiple of ``samples_per_gpu * num_replicas``.
"""
import math

import numpy as np
from torch.utils.data import Sampler

from .sampler import SAMPLER


@SAMPLER.register_module()
class DistributedGroupSampler(Sampler):

    def __init__(self, dataset, samples_per_gpu, num_replicas, rank, seed=None):
        self.flag = dataset.flag
        self.num_replicas = num_replicas
        self.rank = rank
        self.seed = 0 if seed is None else seed
        self.epoch = 0
        self.block = samples_per_gpu * num_replicas
        self.num_samples = sum(math.ceil(size / self.block) * samples_per_gpu
                               for size in np.bincount(self.flag) if size)

    def __iter__(self):
        rng = np.random.RandomState(self.seed + self.epoch)
        indices = []
        for group in np.unique(self.flag):
            members = rng.permutation(np.flatnonzero(self.flag == group)).tolist()
            padded = math.ceil(len(members) / self.block) * self.block
            indices += (members * math.ceil(padded / len(members)))[:padded]
        return iter(indices[self.rank * self.num_samples:(self.rank + 1) * self.num_samples])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        self.epoch = epoch
