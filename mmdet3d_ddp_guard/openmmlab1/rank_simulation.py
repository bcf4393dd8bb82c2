"""mmcv-full 1.x's half of ``check --world-size N``: N ranks of DDP training (mmdet 2.x,
mmdet3d 0.x), simulated in one process.

The 1.x twin of :mod:`..openmmlab2.rank_simulation`, sharing its framework-free half
(:class:`~..rank_simulation.simulated_ranks.SimulatedRanks`).
Each simulated iteration takes the N batches that the training's ``build_dataloader`` hands
ranks 0..N-1 of N (:mod:`.training_loaders`: the codebase's own where the config's plugin
package, imported as the BEV codebases' ``tools/train.py`` imports it (:func:`plugin_module`),
has one, else mmdet's), with the seed ``tools/train.py`` sets as ``cfg.seed``: its ``--seed``,
0 by default in the BEV codebases, whatever the config's own ``seed`` says. It collates them
with ``mmcv.parallel.collate``, unwraps the
DataContainers as one GPU receives them (:func:`~.cpu_launch.unwrap_for_one_device`),
runs the model's own ``train_step(data, optimizer)``, back-propagates its ``loss`` and,
after every rank, takes one step of the config's optimizer on the rank-averaged gradient
(clipped by ``optimizer_config.grad_clip`` as ``OptimizerHook`` clips it).

What it cannot see, besides what the MMEngine simulation cannot (code branching on the
rank, per-rank augmentation randomness, batch-norm synchronisation, and a rank's own
memory between iterations: the simulated ranks share one model instance, so a streaming
model's memory, StreamPETR's memory queue or Sparse4D's instance bank, holds the previous
simulated rank's state, see :mod:`..rank_simulation.simulated_ranks`): learning-rate and
momentum hooks (the optimizer keeps the config's lr), fp16 and gradient-accumulation
optimizer hooks (one plain step per iteration), and layers that need CUDA (the model runs on
the CPU).
"""
import os
from typing import Optional, Tuple

from mmcv import Config
from mmcv.runner import OptimizerHook, build_optimizer
from mmdet.apis import set_random_seed

from ..rank_simulation.simulated_ranks import (SimulatedIteration, SimulatedRanks,
                                               SimulationError, endless_batches,
                                               import_codebase_module)
from .cpu_launch import unwrap_for_one_device
from .training_loaders import training_loaders

#: ``tools/train.py --seed``'s default in BEVFormer, UniAD, StreamPETR and PETR (and
#: mmdet3d 0.17.1's): ``default=0``, then ``cfg.seed = args.seed`` over the config's ``seed``.
#: mmdet 2.28's own draws a random seed (``init_random_seed``).
DEFAULT_SEED = 0
#: The train scripts whose plugin import :func:`plugin_module` follows (the same code in each).
PLUGIN_SCRIPTS = "the tools/train.py of BEVFormer, UniAD, StreamPETR and PETR"


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
        self.loaders = training_loaders(cfg, self.dataset, self.plugin, self.seed, world_size)
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
