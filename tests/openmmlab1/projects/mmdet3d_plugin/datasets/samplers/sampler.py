"""The plugin's sampler registry, as BEVFormer's ``datasets/samplers/sampler.py``."""
from mmcv.utils import Registry, build_from_cfg
from torch.utils.data import DistributedSampler

SAMPLER = Registry('sampler')
# The codebases' nonshuffler_sampler: torch's, which shards without shuffling.
SAMPLER.register_module(module=DistributedSampler)


def build_sampler(cfg, default_args):
    return build_from_cfg(cfg, SAMPLER, default_args)
