"""MMEngine's half of ``check --world-size N``: N ranks of DDP training, simulated in one
process, one model copy, no process group.

Each simulated iteration takes the N batches that the config's own sampler
(``DefaultSampler``, ``InfiniteSampler``, ... built as rank 0..N-1 of N, with the config's
seed and shuffle) hands the ranks, runs each through the model's real ``data_preprocessor``
and loss forward and backward, records which parameters autograd did not reach on that
rank (the :class:`ParamUsageRecord` that GuardedDDP and UnusedParamsHook read) and which
SyncBN-type layers ran, and then takes one optimizer step on the rank-averaged gradient, as
DDP (with the unused ranks counting zero, as under ``find_unused_parameters=True`` or
GuardedDDP) would. :mod:`..rank_simulation.ddp_prediction` turns the record into ok / fails /
hangs.

What it cannot see: code that branches on ``dist.get_rank()`` (here every rank is rank 0),
per-rank randomness of augmentation (one random stream feeds all simulated ranks), batch-norm
statistics synchronisation and DDP's buffer broadcast (one copy of the running statistics),
and a model that overrides ``train_step``.
"""
import copy
import sys
import time
from typing import Dict, List, Optional

from mmengine.config import Config
from mmengine.device import get_device
from mmengine.dist import sync_random_seed
from mmengine.logging import MessageHub
from mmengine.optim import build_optim_wrapper
from mmengine.registry import DATA_SAMPLERS, DATASETS, MODELS, init_default_scope
from mmengine.runner import Runner, set_random_seed

from ..rank_simulation.simulated_ranks import (SimulatedIteration, SimulatedRanks,
                                               SimulationError, dist_info_of, endless_batches)


class RankSimulation(SimulatedRanks):
    """Builds the config's model, optimizer and per-rank data, and runs iterations.

    The parts are built as MMEngine's Runner builds them (default scope, seed, model,
    ``init_weights``, optim wrapper) but without a Runner: out of a distributed run the
    Runner turns SyncBN layers into plain BN, and they are what a hang needs.

    Args:
        cfg (Config): The training config.
        world_size (int): Number of simulated ranks.
    """

    def __init__(self, cfg: Config, world_size: int):
        for key in ('model', 'train_dataloader', 'optim_wrapper'):
            if not cfg.get(key):
                raise SimulationError(f'the config has no {key}; the simulation builds the '
                                      "config's own model, data and optimizer.")
        init_default_scope(cfg.get('default_scope') or 'mmengine')
        randomness = dict(cfg.get('randomness') or {})
        self.seed_given = randomness.get('seed') is not None
        self.seed = set_random_seed(**randomness)
        # A fresh instance is the current one, which models read the iteration from.
        self.message_hub = MessageHub.get_instance(
            f'ddp_guard_rank_simulation_{time.time_ns()}')
        self.model = MODELS.build(cfg.model).to(get_device())
        # As Runner.train does before the first iteration.
        if hasattr(self.model, 'init_weights'):
            self.model.init_weights()
        self.optim_wrapper = build_optim_wrapper(self.model, copy.deepcopy(cfg.optim_wrapper))
        super().__init__(self.model, world_size)
        self.loaders = rank_dataloaders(cfg.train_dataloader, world_size, self.seed,
                                        randomness.get('diff_rank_seed', False))
        self._batches = [endless_batches(loader) for loader in self.loaders]

    def step(self, iteration: int) -> SimulatedIteration:
        """Simulates iteration ``iteration`` on every rank and takes the optimizer step."""
        model, optim_wrapper = self.model, self.optim_wrapper
        # Models that read the iteration (as runner.iter) find it where RuntimeInfoHook
        # puts it.
        self.message_hub.update_info('iter', iteration)
        model.train()

        def run_rank(batch):
            with optim_wrapper.optim_context(model):
                data = model.data_preprocessor(batch, True)
                losses = model._run_forward(data, mode='loss')
            loss, _ = model.parse_losses(losses)
            # DDP averages gradients over ranks: each rank contributes 1/N of its own.
            optim_wrapper.backward(loss / self.world_size)

        simulated = self.run_iteration(iteration, self._batches, run_rank)
        optim_wrapper.step()
        optim_wrapper.zero_grad()
        return simulated


def rank_dataloaders(dataloader_cfg: Dict, world_size: int, seed: int,
                     diff_rank_seed: bool) -> List:
    """One DataLoader per simulated rank over one dataset, each with the config's sampler
    built as that rank of ``world_size`` (workers off: the order does not depend on them)."""
    cfg = copy.deepcopy(dataloader_cfg)
    dataset = cfg.pop('dataset')
    if isinstance(dataset, dict):
        dataset = DATASETS.build(dataset)
        if hasattr(dataset, 'full_init'):
            dataset.full_init()
    sampler_cfg = cfg.pop('sampler', None)
    if not isinstance(sampler_cfg, dict):
        raise SimulationError(
            f'train_dataloader.sampler is {sampler_cfg!r}; the simulation builds the '
            "sampler of every rank from a config dict, e.g. sampler=dict(type='DefaultSampler', "
            'shuffle=True).')
    # Runner.build_dataloader's default seed; a sampler left with none draws one on rank 0
    # and broadcasts it (sync_random_seed): here one draw serves every rank.
    default_seed = None if diff_rank_seed else seed
    if sampler_cfg.get('seed', default_seed) is None:
        sampler_cfg = dict(sampler_cfg, seed=sync_random_seed())
    cfg.update(num_workers=0, persistent_workers=False)
    cfg.pop('prefetch_factor', None)
    loaders = []
    for rank in range(world_size):
        sampler = build_sampler_as_rank(sampler_cfg, dataset, default_seed, rank, world_size)
        loaders.append(Runner.build_dataloader(dict(cfg, dataset=dataset, sampler=sampler),
                                               seed=seed))
    return loaders


def build_sampler_as_rank(sampler_cfg: Dict, dataset, seed: Optional[int], rank: int,
                          world_size: int):
    """The config's sampler, built as ``rank`` of ``world_size``, with ``seed`` as the
    default seed (as ``Runner.build_dataloader`` passes it).

    MMEngine's samplers (and those of mmdet, mmdet3d) read their rank at construction from
    ``get_dist_info`` in their own module; that name is pointed at the simulated rank while
    the sampler is built, and the sampler is checked to have taken it.
    """
    sampler_type = DATA_SAMPLERS.get(sampler_cfg['type']) \
        if isinstance(sampler_cfg.get('type'), str) else sampler_cfg.get('type')
    if sampler_type is None:
        raise SimulationError(f'train_dataloader.sampler.type={sampler_cfg.get("type")!r} is '
                              'not a registered sampler; check the name and custom_imports.')
    module = sys.modules[sampler_type.__module__]
    if not callable(getattr(module, 'get_dist_info', None)):
        raise SimulationError(_unshardable(sampler_type))
    with dist_info_of(module, rank, world_size):
        sampler = DATA_SAMPLERS.build(sampler_cfg,
                                      default_args=dict(dataset=dataset, seed=seed))
    if (getattr(sampler, 'rank', None), getattr(sampler, 'world_size', None)) != (rank,
                                                                                 world_size):
        raise SimulationError(_unshardable(sampler_type))
    return sampler


def _unshardable(sampler_type) -> str:
    return (f'train_dataloader.sampler {sampler_type.__name__} does not take its rank from '
            "get_dist_info(), so its shard per rank cannot be simulated; use MMEngine's "
            "DefaultSampler or InfiniteSampler, e.g. sampler=dict(type='DefaultSampler', "
            'shuffle=True).')
