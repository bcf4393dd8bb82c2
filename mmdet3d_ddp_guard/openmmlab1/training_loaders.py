"""The training's data loader per simulated rank of ``check``, built as mmcv-full 1.x
training builds it.

:func:`training_loaders` builds the loaders that the training's ``build_dataloader`` hands
ranks 0..N-1 of N (``dist=True``, with the seed ``tools/train.py`` sets as ``cfg.seed``), each
builder given only the arguments its signature names (:func:`taken_args`):

- the codebase's own, where the config's plugin package (``plugin=True``, ``plugin_dir``,
  imported as the BEV codebases' ``tools/train.py`` imports it:
  :func:`~.rank_simulation.plugin_module`) has one in ``<plugin>.datasets.builder`` or
  ``<plugin>.datasets``
  (BEVFormer, UniAD, StreamPETR: ``projects/mmdet3d_plugin/datasets/builder.py``), called as
  their ``custom_train_detector`` calls it: ``data.samples_per_gpu``, ``shuffle`` left True,
  ``data.shuffler_sampler`` / ``data.nonshuffler_sampler`` built from the codebase's own
  sampler registry;
- else mmdet's, with the config's ``runner`` type, ``shuffle`` and ``samples_per_gpu``, and
  ``data.train_dataloader`` over those, as ``train_detector`` merges them:
  ``InfiniteGroupBatchSampler`` / ``InfiniteBatchSampler`` for an ``IterBasedRunner``,
  ``DistributedGroupSampler`` / ``DistributedSampler`` for an ``EpochBasedRunner``.
"""
import importlib
import inspect
import sys
from typing import Callable, Dict, List, Optional, Set

from mmcv import Config
from mmdet.datasets import builder

from ..environment.framework_table import MMCV1, framework
from ..rank_simulation.simulated_ranks import SimulationError, dist_info_of

#: ``train_detector``'s defaults under ``data.train_dataloader`` (mmdet 2.x apis/train.py).
LOADER_DEFAULTS = dict(samples_per_gpu=2, workers_per_gpu=2, persistent_workers=False)
#: Where the BEV codebases keep their own ``build_dataloader`` in the plugin package.
CODEBASE_LOADER_MODULES = ('{plugin}.datasets.builder', '{plugin}.datasets')


def training_loaders(cfg: Config, dataset, plugin: Optional[str], seed: int,
                     world_size: int) -> List:
    """The training's loader of ``dataset`` for each simulated rank: built by the plugin's
    own ``build_dataloader`` (:func:`codebase_build_dataloader`) as the codebase calls it,
    else by mmdet's as ``train_detector`` calls it.

    Args:
        cfg (Config): The training config.
        dataset (Dataset): The training dataset.
        plugin (str): The plugin's module name (:func:`~.rank_simulation.plugin_module`), or
            None.
        seed (int): The seed ``tools/train.py`` sets as ``cfg.seed``.
        world_size (int): Number of simulated ranks.
    """
    build = codebase_build_dataloader(plugin)
    if build is None:
        build = builder.build_dataloader
        args = loader_args(cfg, seed, build)
    else:
        args = codebase_loader_args(cfg, seed, build)
    return rank_dataloaders(dataset, args, world_size, build)


def taken_args(build: Callable, args: Dict) -> Dict:
    """The items of ``args`` whose keys ``build`` names as parameters.

    A ``**kwargs`` catch-all does not count: mmdet's ``build_dataloader`` and the codebases'
    copies of it hand it on to torch's ``DataLoader``, which fails on ``runner_type`` or a
    sampler key. mmdet 2.14's (the BEV codebases' pin) names no ``runner_type``; later 2.x
    releases added it, and ``persistent_workers``.

    Args:
        build (callable): A ``build_dataloader``.
        args (dict): The keyword arguments meant for it.
    """
    names = _parameter_names(build)
    return {key: value for key, value in args.items() if key in names}


def _parameter_names(build: Callable) -> Set[str]:
    return {name for name, param in inspect.signature(build).parameters.items()
            if param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY)}


def loader_args(cfg: Config, seed: int, build: Optional[Callable] = None) -> Dict:
    """The keyword arguments of mmdet's ``build_dataloader`` for the training loader, as
    ``train_detector`` merges them (its defaults, the deprecated ``data.samples_per_gpu``
    and friends, then ``data.train_dataloader``), with the runner type and ``seed``; those
    that ``build`` names (:func:`taken_args`).

    Args:
        cfg (Config): The training config.
        seed (int): The seed ``tools/train.py`` would set as ``cfg.seed``.
        build (callable): The installed mmdet's ``build_dataloader`` (default).
    """
    build = builder.build_dataloader if build is None else build
    runner = cfg.get('runner') or {}
    runner_type = runner.get('type', 'EpochBasedRunner')
    runner_types = framework(MMCV1).runner_types
    # A builder without runner_type builds the same loader for every runner.
    if runner_type not in runner_types and 'runner_type' in _parameter_names(build):
        raise SimulationError(f'runner.type={runner_type!r}: the simulation builds the data '
                              f'of {" or ".join(runner_types)} (mmdet build_dataloader\'s '
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
    return taken_args(build, args)


def codebase_build_dataloader(plugin: Optional[str]) -> Optional[Callable]:
    """The ``build_dataloader`` of the plugin package ``plugin``, in one of
    :data:`CODEBASE_LOADER_MODULES`; None where it has none of its own (mmdet's, re-exported,
    is not its own).

    Args:
        plugin (str): The plugin's module name (:func:`~.rank_simulation.plugin_module`), or
            None.
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
    ``runner`` as ``runner_type`` (StreamPETR's); those that the builder names
    (:func:`taken_args`). ``shuffle`` stays the builder's default (True) and
    ``data.train_dataloader`` unread, as there.

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
    if cfg.get('runner'):
        args['runner_type'] = cfg.runner
    return taken_args(build, args)


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
