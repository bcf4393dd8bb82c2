"""N ranks of mmcv-full 1.x DDP training (mmdet 2.x, mmdet3d 0.x), simulated in one process.

The 1.x twin of :mod:`mmdet3d_ddp_guard.rank_simulation.mmengine_ranks`, sharing its
framework-free half (:class:`~mmdet3d_ddp_guard.rank_simulation.simulated_ranks.SimulatedRanks`).
Each simulated iteration takes the N batches that the training's ``build_dataloader`` hands
ranks 0..N-1 of N (``dist=True``, with the seed ``tools/train.py`` sets as ``cfg.seed``: its
``--seed``, 0 by default in the BEV codebases, whatever the config's own ``seed`` says), each
builder given only the arguments its signature names (:func:`taken_args`):

- the codebase's own, where the config's plugin package (``plugin=True``, ``plugin_dir``,
  imported as the BEV codebases' ``tools/train.py`` imports it: :func:`plugin_module`) has
  one in ``<plugin>.datasets.builder`` or ``<plugin>.datasets``
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
rank, per-rank augmentation randomness, batch-norm synchronisation, and a rank's own
memory between iterations: the simulated ranks share one model instance, so a streaming
model's memory, StreamPETR's memory queue or Sparse4D's instance bank, holds the previous
simulated rank's state, see :mod:`~mmdet3d_ddp_guard.rank_simulation.simulated_ranks`): learning-rate and
momentum hooks (the optimizer keeps the config's lr), fp16 and gradient-accumulation
optimizer hooks (one plain step per iteration), and layers that need CUDA (the model runs
on the CPU).
"""
import importlib
import inspect
import os
import sys
from typing import Callable, Dict, List, Optional, Set, Tuple

from mmcv import Config
from mmcv.runner import OptimizerHook, build_optimizer
from mmdet.apis import set_random_seed
from mmdet.datasets import builder

from .simulated_ranks import (SimulatedIteration, SimulatedRanks, SimulationError,
                                    dist_info_of, endless_batches, import_codebase_module)
from ..openmmlab1.cpu_launch import unwrap_for_one_device

#: ``train_detector``'s defaults under ``data.train_dataloader`` (mmdet 2.x apis/train.py).
LOADER_DEFAULTS = dict(samples_per_gpu=2, workers_per_gpu=2, persistent_workers=False)
RUNNERS = ('IterBasedRunner', 'EpochBasedRunner')
#: ``tools/train.py --seed``'s default in BEVFormer, UniAD, StreamPETR and PETR (and
#: mmdet3d 0.17.1's): ``default=0``, then ``cfg.seed = args.seed`` over the config's ``seed``.
#: mmdet 2.28's own draws a random seed (``init_random_seed``).
DEFAULT_SEED = 0
#: The train scripts whose plugin import :func:`plugin_module` follows (the same code in each).
PLUGIN_SCRIPTS = "the tools/train.py of BEVFormer, UniAD, StreamPETR and PETR"
#: Where the BEV codebases keep their own ``build_dataloader`` in the plugin package.
CODEBASE_LOADER_MODULES = ('{plugin}.datasets.builder', '{plugin}.datasets')


class RankSimulation(SimulatedRanks):
    """Builds the config's model, optimizer and per-rank data as mmdet 2.x's
    ``tools/train.py`` and ``train_detector`` build them (the data as the codebase's
    ``custom_train_detector`` does where its plugin has a ``build_dataloader``), and runs
    iterations.

    Attributes:
        seed (int): The seed simulated, set as ``cfg.seed``.
        seed_given (bool): Whether it was given (``--seed``), not the default.
        config_seed: The ``seed`` the config wrote (None where none), which the train
            scripts replace with their ``--seed``.
        plugin (str): The plugin module imported (:func:`plugin_module`), or None.
        plugin_note (str): Where that is likely not the module meant, why; else None.

    Args:
        cfg (Config): The training config (``mmcv.Config``, custom imports done).
        world_size (int): Number of simulated ranks.
        seed (int): The training's ``tools/train.py --seed``; None: its default,
            :data:`DEFAULT_SEED`.
        config_path (str): The config's path as given to ``tools/train.py`` (a ``plugin=True``
            config without ``plugin_dir`` imports its folder); default ``cfg.filename``.
    """

    def __init__(self, cfg: Config, world_size: int, seed: Optional[int] = None,
                 config_path: Optional[str] = None):
        for key, where in (('model', 'model'), ('data', 'data'), ('optimizer', 'optimizer')):
            if not cfg.get(key):
                raise SimulationError(f'the config has no {where}; the simulation builds the '
                                      "config's own model, data and optimizer.")
        if not cfg.data.get('train'):
            raise SimulationError('the config has no data.train; the simulation builds the '
                                  "config's own training dataset.")
        config_path = cfg.filename if config_path is None else config_path
        self.plugin, self.plugin_note = plugin_module(cfg, config_path)
        if self.plugin is not None:
            try:
                import_codebase_module(self.plugin, _plugin_source(cfg, config_path))
            except SimulationError as error:
                raise SimulationError(' '.join(filter(None, (str(error), self.plugin_note)))) \
                    from error
        build_model, build_dataset = _builders()
        # No 1.x train script reads the config's own seed: they set cfg.seed = args.seed.
        self.config_seed = cfg.get('seed')
        self.seed_given = seed is not None
        self.seed = int(seed) if self.seed_given else DEFAULT_SEED
        cfg.seed = self.seed
        set_random_seed(self.seed)
        try:
            self.model = build_model(cfg.model, train_cfg=cfg.get('train_cfg'),
                                     test_cfg=cfg.get('test_cfg'))
            self.model.init_weights()
            self.dataset = build_dataset(cfg.data.train)
        except KeyError as error:
            # What an unregistered type says when the plugin imported is not the one meant.
            if self.plugin_note is None:
                raise
            raise SimulationError(f'{error.args[0] if error.args else error}. '
                                  f'{self.plugin_note}') from error
        # As tools/train.py does: some heads read the class names from the model.
        self.model.CLASSES = getattr(self.dataset, 'CLASSES', None)
        self.model.cpu()
        self.optimizer = build_optimizer(self.model, cfg.optimizer)
        grad_clip = (cfg.get('optimizer_config') or {}).get('grad_clip')
        self._clipper = OptimizerHook(grad_clip=grad_clip) if grad_clip else None
        super().__init__(self.model, world_size)
        build_loader = codebase_build_dataloader(self.plugin)
        if build_loader is None:
            build_loader = builder.build_dataloader
            args = loader_args(cfg, self.seed, build_loader)
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
    # A builder without runner_type builds the same loader for every runner.
    if runner_type not in RUNNERS and 'runner_type' in _parameter_names(build):
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
    return taken_args(build, args)


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


def plugin_module(cfg: Config, config_path: Optional[str]) -> Tuple[Optional[str],
                                                                     Optional[str]]:
    """The module that the BEV codebases' ``tools/train.py`` imports as the config's plugin,
    and a note where that is likely not the module meant; ``(None, None)`` without
    ``plugin``.

    Their code (BEVFormer's, UniAD's, StreamPETR's and PETR's alike), followed as it is:
    where ``cfg.plugin`` is set, the folders of ``os.path.dirname(cfg.plugin_dir)``, or,
    without a ``plugin_dir``, of ``os.path.dirname`` of the config's path as given to it,
    split at ``/`` and joined with dots. So ``'projects/mmdet3d_plugin/'`` imports
    ``projects.mmdet3d_plugin``, while ``'projects/mmdet3d_plugin'`` (no trailing slash)
    imports ``projects``: the training does too, and the note says so.

    Args:
        cfg (Config): The training config.
        config_path (str): The config's path as given to ``tools/train.py``.
    """
    if not (hasattr(cfg, 'plugin') and cfg.plugin):
        return None, None
    source = _plugin_source(cfg, config_path)
    path = cfg.plugin_dir if hasattr(cfg, 'plugin_dir') else config_path
    if not isinstance(path, str) or not path:
        raise SimulationError(f'{source}: {PLUGIN_SCRIPTS} take the plugin module from a '
                              "path there; write plugin_dir = 'projects/mmdet3d_plugin/' "
                              "(the plugin package's folder, from the codebase's root).")
    name = '.'.join(os.path.dirname(path).split('/'))
    if '' in name.split('.'):
        raise SimulationError(
            f'{source}: {PLUGIN_SCRIPTS} import os.path.dirname of it, its folders joined '
            f'by dots, as the module {name!r}, which Python cannot import: the training '
            'fails the same way. Give the path from the codebase\'s root, without a leading '
            "'./' or '/' (plugin_dir = 'projects/mmdet3d_plugin/').")
    note = None
    if hasattr(cfg, 'plugin_dir') and not path.endswith('/') and not path.endswith('.py'):
        meant = '.'.join(p for p in path.split('/') if p)
        note = (f"plugin_dir = {path!r} has no trailing '/': {PLUGIN_SCRIPTS} import "
                f'os.path.dirname of it, {name!r}, not {meant!r}, and so did check. If '
                f"{meant!r} is the plugin, write plugin_dir = '{path}/'.")
    return name, note


def _plugin_source(cfg: Config, config_path: Optional[str]) -> str:
    # What names the plugin module, in the words of the config.
    if hasattr(cfg, 'plugin_dir'):
        return f'plugin_dir = {cfg.plugin_dir!r}'
    return f"plugin = True without plugin_dir: the folder of the config {config_path!r}"
