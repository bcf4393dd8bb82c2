"""N ranks of mmcv-full 1.x DDP training (mmdet 2.x, mmdet3d 0.x), simulated in one process.

The 1.x twin of :mod:`mmdet3d_ddp_guard.openmmlab2.rank_simulation`, sharing its
framework-free half (:class:`~mmdet3d_ddp_guard.core.simulated_ranks.SimulatedRanks`).
Each simulated iteration takes the N batches that the training's ``build_dataloader`` hands
ranks 0..N-1 of N (``dist=True``, with the seed ``tools/train.py`` sets as ``cfg.seed``):

- the codebase's own, where the config's plugin package (``plugin=True``,
  ``plugin_dir``) has one in ``<plugin>.datasets.builder`` or ``<plugin>.datasets``
  (BEVFormer, UniAD, StreamPETR: ``projects/mmdet3d_plugin/datasets/builder.py``), called as
  their ``custom_train_detector`` calls it: ``data.samples_per_gpu``, ``shuffle`` left True,
  ``data.shuffler_sampler`` / ``data.nonshuffler_sampler`` built from the codebase's own
  sampler registry;
- else mmdet's, with the config's ``runner`` type, ``shuffle`` and ``samples_per_gpu``, and
  ``data.train_dataloader`` over those, as ``train_detector`` merges them:
  ``InfiniteGroupBatchSampler`` / ``InfiniteBatchSampler`` for an ``IterBasedRunner``,
  ``DistributedGroupSampler`` / ``DistributedSampler`` for an ``EpochBasedRunner``.

It collates them with ``mmcv.parallel.collate``, unwraps the
DataContainers as one GPU receives them (:func:`~.cpu_launch.unwrap_for_one_device`),
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
import inspect
import os
import os.path as osp
import sys
from typing import Callable, Dict, List, Optional

from mmcv import Config
from mmcv.runner import OptimizerHook, build_optimizer
from mmdet.apis import set_random_seed
from mmdet.datasets import builder

from ..core.simulated_ranks import (SimulatedIteration, SimulatedRanks, SimulationError,
                                    dist_info_of, endless_batches)
from .cpu_launch import unwrap_for_one_device

#: ``train_detector``'s defaults under ``data.train_dataloader`` (mmdet 2.x apis/train.py).
LOADER_DEFAULTS = dict(samples_per_gpu=2, workers_per_gpu=2, persistent_workers=False)
RUNNERS = ('IterBasedRunner', 'EpochBasedRunner')
#: ``tools/train.py --seed``'s default in BEVFormer, UniAD, StreamPETR and PETR
#: (``default=0``, then ``cfg.seed = args.seed``); mmdet 2.x's own draws a random seed.
DEFAULT_SEED = 0
#: Where the BEV codebases keep their own ``build_dataloader`` in the plugin package.
CODEBASE_LOADER_MODULES = ('{plugin}.datasets.builder', '{plugin}.datasets')


class RankSimulation(SimulatedRanks):
    """Builds the config's model, optimizer and per-rank data as mmdet 2.x's
    ``tools/train.py`` and ``train_detector`` build them (the data as the codebase's
    ``custom_train_detector`` does where its plugin has a ``build_dataloader``), and runs
    iterations.

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
        plugin = _import_plugin(cfg)
        build_model, build_dataset = _builders()
        # tools/train.py sets cfg.seed from its --seed (check's --seed sets it the same way).
        self.seed_given = cfg.get('seed') is not None
        self.seed = int(cfg.seed) if self.seed_given else DEFAULT_SEED
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
        build_loader = codebase_build_dataloader(plugin)
        if build_loader is None:
            build_loader, args = builder.build_dataloader, loader_args(cfg, self.seed)
        else:
            args = codebase_loader_args(cfg, self.seed, build_loader)
        self.loaders = rank_dataloaders(self.dataset, args, world_size, build_loader)
        self._batches = [endless_batches(loader) for loader in self.loaders]

    def step(self, iteration: int) -> SimulatedIteration:
        """Simulates iteration ``iteration`` on every rank and takes the optimizer step."""
        model, optimizer = self.model, self.optimizer
        model.train()

        def run_rank(batch):
            # What one GPU's model receives (not mmcv's CPU scatter: see the function).
            outputs = model.train_step(unwrap_for_one_device(batch), optimizer)
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
    # The simulation runs no workers, so none can persist; and it is the distributed case,
    # where build_dataloader ignores num_gpus.
    args['persistent_workers'] = False
    args.pop('num_gpus', None)
    return args


def codebase_build_dataloader(plugin: Optional[str]) -> Optional[Callable]:
    """The ``build_dataloader`` of the plugin package ``plugin``, in one of
    :data:`CODEBASE_LOADER_MODULES`; None where it has none of its own (mmdet's, re-exported,
    is not its own).

    Args:
        plugin (str): The plugin's module name (:func:`_import_plugin`), or None.
    """
    if plugin is None:
        return None
    for template in CODEBASE_LOADER_MODULES:
        name = template.format(plugin=plugin)
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            # Only this module (or its package) missing means the plugin has no builder
            # there; a builder whose own imports fail would stop the codebase's training too.
            if error.name and (name == error.name or name.startswith(error.name + '.')):
                continue
            raise SimulationError(f"{name}, the plugin's data builder, cannot be imported "
                                  f'({error}); its training imports it too: install what it '
                                  'needs.') from error
        build = getattr(module, 'build_dataloader', None)
        if build is None or build is builder.build_dataloader:
            continue
        if not hasattr(sys.modules[build.__module__], 'get_dist_info'):
            raise SimulationError(
                f'{build.__module__}.build_dataloader does not read its rank from a '
                'get_dist_info of its own module (BEVFormer\'s imports it: from mmcv.runner '
                'import get_dist_info), so its loader per rank cannot be simulated.')
        return build
    return None


def codebase_loader_args(cfg: Config, seed: int, build: Callable) -> Dict:
    """The keyword arguments that the codebases' ``custom_train_detector`` (BEVFormer's and
    UniAD's ``apis/mmdet_train.py``) passes their own ``build_dataloader`` for training:
    ``data.samples_per_gpu``, ``seed``, ``data.shuffler_sampler`` and
    ``data.nonshuffler_sampler`` (None, the builder's default sampler, where unset), and the
    ``runner`` where the builder takes a ``runner_type`` (StreamPETR's). ``shuffle`` stays
    the builder's default (True) and ``data.train_dataloader`` unread, as there.

    Args:
        cfg (Config): The training config.
        seed (int): The seed ``tools/train.py`` sets as ``cfg.seed``.
        build (callable): The codebase's ``build_dataloader``
            (:func:`codebase_build_dataloader`).
    """
    if 'samples_per_gpu' not in cfg.data:
        raise SimulationError(f"the config has no data.samples_per_gpu: the codebase's "
                              f'training passes it to {build.__module__}.build_dataloader; '
                              'set it.')
    args = dict(samples_per_gpu=cfg.data.samples_per_gpu, seed=seed,
                shuffler_sampler=cfg.data.get('shuffler_sampler'),
                nonshuffler_sampler=cfg.data.get('nonshuffler_sampler'))
    if 'runner_type' in inspect.signature(build).parameters and cfg.get('runner'):
        args['runner_type'] = cfg.runner
    return args


def rank_dataloaders(dataset, args: Dict, world_size: int, build: Callable) -> List:
    """One ``build(dataset, **args)`` loader per simulated rank, built as that rank of
    ``world_size`` (``dist=True``; workers off: the order does not depend on them).

    Args:
        dataset (Dataset): The training dataset (one object serves every rank).
        args (dict): :func:`loader_args` for mmdet's ``build_dataloader``,
            :func:`codebase_loader_args` for a codebase's.
        world_size (int): Number of simulated ranks.
        build (callable): The ``build_dataloader`` of the training.
    """
    args = dict(args, dist=True, workers_per_gpu=0)
    # The builders read their rank from get_dist_info in their own module and pass it to
    # the samplers they build.
    module = sys.modules[build.__module__]
    loaders = []
    for rank in range(world_size):
        with dist_info_of(module, rank, world_size):
            loader = build(dataset, **args)
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
