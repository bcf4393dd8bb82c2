"""N ranks of mmcv-full 1.x DDP training (mmdet 2.x, mmdet3d 0.x), simulated in one process.

The 1.x twin of :mod:`mmdet3d_ddp_guard.openmmlab2.rank_simulation`, sharing its
framework-free half (:class:`~mmdet3d_ddp_guard.core.simulated_ranks.SimulatedRanks`).
Each simulated iteration takes the N batches that mmdet's ``build_dataloader`` hands ranks
0..N-1 of N (``dist=True``, with the config's ``runner`` type, ``shuffle``, seed and
``samples_per_gpu``, and ``data.train_dataloader`` over those, as ``train_detector``
merges them): ``InfiniteGroupBatchSampler`` / ``InfiniteBatchSampler`` for an
``IterBasedRunner``, ``DistributedGroupSampler`` / ``DistributedSampler`` for an
``EpochBasedRunner``. It collates them with ``mmcv.parallel.collate``, unwraps the
DataContainers to CPU as ``MMDataParallel`` does without GPUs (``scatter`` to ``[-1]``),
runs the model's own ``train_step(data, optimizer)``, back-propagates its ``loss`` and,
after every rank, takes one step of the config's optimizer on the rank-averaged gradient
(clipped by ``optimizer_config.grad_clip`` as ``OptimizerHook`` clips it).

What it cannot see, besides what the MMEngine simulation cannot (code branching on the
rank, per-rank augmentation randomness, batch-norm synchronisation): learning-rate and
momentum hooks (the optimizer keeps the config's lr), fp16 and gradient-accumulation
optimizer hooks (one plain step per iteration), and layers that need CUDA (the model runs
on the CPU).
"""
import importlib
import os
import os.path as osp
from typing import Dict, List, Optional

import numpy as np
from mmcv import Config
from mmcv.parallel import scatter_kwargs
from mmcv.runner import OptimizerHook, build_optimizer
from mmdet.apis import set_random_seed
from mmdet.datasets import builder

from ..core.simulated_ranks import (SimulatedIteration, SimulatedRanks, SimulationError,
                                    dist_info_of, endless_batches)

#: ``train_detector``'s defaults under ``data.train_dataloader`` (mmdet 2.x apis/train.py).
LOADER_DEFAULTS = dict(samples_per_gpu=2, workers_per_gpu=2, persistent_workers=False)
RUNNERS = ('IterBasedRunner', 'EpochBasedRunner')


class RankSimulation(SimulatedRanks):
    """Builds the config's model, optimizer and per-rank data as mmdet 2.x's
    ``tools/train.py`` and ``train_detector`` build them, and runs iterations.

    Args:
        cfg (Config): The training config (``mmcv.Config``, custom imports done).
        world_size (int): Number of simulated ranks.
    """

    def __init__(self, cfg: Config, world_size: int):
        for key, where in (('model', 'model'), ('data', 'data'), ('optimizer', 'optimizer')):
            if not cfg.get(key):
                raise SimulationError(f'the config has no {where}; the simulation builds the '
                                      "config's own model, data and optimizer.")
        if not cfg.data.get('train'):
            raise SimulationError('the config has no data.train; the simulation builds the '
                                  "config's own training dataset.")
        _import_plugin(cfg)
        build_model, build_dataset = _builders()
        # tools/train.py: cfg.seed from --seed, else one random draw that rank 0 broadcasts.
        self.seed_given = cfg.get('seed') is not None
        self.seed = int(cfg.seed) if self.seed_given else int(np.random.randint(2**31))
        set_random_seed(self.seed)
        self.model = build_model(cfg.model, train_cfg=cfg.get('train_cfg'),
                                 test_cfg=cfg.get('test_cfg'))
        self.model.init_weights()
        self.dataset = build_dataset(cfg.data.train)
        # As tools/train.py does: some heads read the class names from the model.
        self.model.CLASSES = getattr(self.dataset, 'CLASSES', None)
        self.model.cpu()
        self.optimizer = build_optimizer(self.model, cfg.optimizer)
        grad_clip = (cfg.get('optimizer_config') or {}).get('grad_clip')
        self._clipper = OptimizerHook(grad_clip=grad_clip) if grad_clip else None
        super().__init__(self.model, world_size)
        self.loaders = rank_dataloaders(self.dataset, loader_args(cfg, self.seed),
                                        world_size)
        self._batches = [endless_batches(loader) for loader in self.loaders]

    def step(self, iteration: int) -> SimulatedIteration:
        """Simulates iteration ``iteration`` on every rank and takes the optimizer step."""
        model, optimizer = self.model, self.optimizer
        model.train()

        def run_rank(batch):
            # What MMDataParallel.train_step does without device ids.
            inputs, kwargs = scatter_kwargs((batch, optimizer), {}, [-1])
            outputs = model.train_step(*inputs[0], **kwargs[0])
            # DDP averages gradients over ranks: each rank contributes 1/N of its own.
            (outputs['loss'] / self.world_size).backward()

        simulated = self.run_iteration(iteration, self._batches, run_rank)
        if self._clipper is not None:
            self._clipper.clip_grads(model.parameters())
        optimizer.step()
        optimizer.zero_grad()
        return simulated


def loader_args(cfg: Config, seed: int) -> Dict:
    """The keyword arguments of mmdet's ``build_dataloader`` for the training loader, as
    ``train_detector`` merges them (its defaults, the deprecated ``data.samples_per_gpu``
    and friends, then ``data.train_dataloader``), with the runner type and ``seed``.

    Args:
        cfg (Config): The training config.
        seed (int): The seed ``tools/train.py`` would set as ``cfg.seed``.
    """
    runner = cfg.get('runner') or {}
    runner_type = runner.get('type', 'EpochBasedRunner')
    if runner_type not in RUNNERS:
        raise SimulationError(f'runner.type={runner_type!r}: the simulation builds the data '
                              f'of {" or ".join(RUNNERS)} (mmdet build_dataloader\'s '
                              'runner_type).')
    args = dict(LOADER_DEFAULTS, seed=seed, runner_type=runner_type)
    args.update({key: cfg.data[key] for key in LOADER_DEFAULTS if key in cfg.data})
    args.update(cfg.data.get('train_dataloader') or {})
    if args.get('seed') is None:
        args['seed'] = seed
    return args


def rank_dataloaders(dataset, args: Dict, world_size: int) -> List:
    """One mmdet ``build_dataloader`` loader per simulated rank, built as that rank of
    ``world_size`` (``dist=True``; workers off: the order does not depend on them).

    Args:
        dataset (Dataset): The training dataset (one object serves every rank).
        args (dict): :func:`loader_args`.
        world_size (int): Number of simulated ranks.
    """
    args = dict(args, dist=True, workers_per_gpu=0, persistent_workers=False)
    # num_gpus only counts without dist; the simulation is the distributed case.
    args.pop('num_gpus', None)
    loaders = []
    for rank in range(world_size):
        # build_dataloader reads its rank from get_dist_info in its own module and passes
        # it to the samplers it builds.
        with dist_info_of(builder, rank, world_size):
            loader = builder.build_dataloader(dataset, **args)
        _check_rank(loader, rank, world_size)
        loaders.append(loader)
    return loaders


def _check_rank(loader, rank: int, world_size: int) -> None:
    # The sampler that shards (the batch sampler of an IterBasedRunner, else the sampler)
    # must have taken the simulated rank, or every simulated rank would read one shard.
    for sampler in (loader.batch_sampler, loader.sampler):
        if hasattr(sampler, 'rank'):
            taken = (sampler.rank, getattr(sampler, 'world_size',
                                           getattr(sampler, 'num_replicas', world_size)))
            if taken != (rank, world_size):
                raise SimulationError(
                    f'the train sampler {type(sampler).__name__} was built as rank '
                    f'{taken[0]} of {taken[1]}, not {rank} of {world_size}; its shard per '
                    'rank cannot be simulated.')
            return


def _builders():
    """mmdet3d's model and dataset builders where mmdet3d 0.x is installed (they fall back
    to mmdet's registries), else mmdet's."""
    try:
        from mmdet3d.datasets import build_dataset
        from mmdet3d.models import build_model
    except ImportError:
        from mmdet.datasets import build_dataset
        from mmdet.models import build_detector as build_model
    return build_model, build_dataset


def _import_plugin(cfg: Config) -> Optional[str]:
    """Imports ``cfg.plugin_dir`` (``plugin=True``), as the BEV codebases' train scripts do
    after reading the config; returns the module name, or None."""
    if not cfg.get('plugin') or not cfg.get('plugin_dir'):
        return None
    name = '.'.join(osp.normpath(cfg.plugin_dir).split(os.sep))
    importlib.import_module(name)
    return name
