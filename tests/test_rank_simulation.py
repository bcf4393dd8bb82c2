"""The simulated ranks get the shards that real ranks get from the same sampler config."""
import itertools

import pytest

from mmdet3d_ddp_guard.openmmlab2.rank_simulation import build_sampler_as_rank
from tests.dist_utils import run_distributed

SAMPLERS = [dict(type='DefaultSampler', shuffle=True, seed=3),
            dict(type='DefaultSampler', shuffle=False),
            dict(type='InfiniteSampler', shuffle=True, seed=5)]
DATASET = list(range(10))  # not a multiple of 4: DefaultSampler pads the last round


def _first_indices(sampler, count: int = 12):
    if hasattr(sampler, 'set_epoch'):
        sampler.set_epoch(1)
    return list(itertools.islice(iter(sampler), count))


def _real_shards(rank: int, world_size: int):
    from mmengine.registry import DATA_SAMPLERS
    return [_first_indices(DATA_SAMPLERS.build(cfg, default_args=dict(dataset=DATASET,
                                                                       seed=0)))
            for cfg in SAMPLERS]


@pytest.mark.timeout(120)
def test_simulated_shards_are_the_real_ranks_shards():
    real = run_distributed(_real_shards, world_size=4, timeout=100)
    world_size = len(real)
    for index, cfg in enumerate(SAMPLERS):
        simulated = [_first_indices(build_sampler_as_rank(cfg, DATASET, 0, rank, world_size))
                     for rank in range(world_size)]
        assert simulated == [shards[index] for shards in real], cfg
