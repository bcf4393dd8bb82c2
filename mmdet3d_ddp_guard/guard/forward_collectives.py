"""Layers that run a collective in their forward (SyncBatchNorm and the like).

Such a layer all-reduces batch statistics across ranks in every training forward. When a
branch holding it runs on some ranks and not on others, the ranks that ran it wait for
partners that never come: the job hangs before any backward, whatever DDP's options. This
module finds those layers by class (for GuardedDDP's build-time warning), counts their calls
per simulated rank (for ``check --world-size N``) and points at the config key that built
them. It imports no framework: the callers log. The stall guard does not use this list: it
records every collective a rank issues, and names the issuing module whatever its class
(:mod:`.stall_guard.collective_log`).
"""
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch.nn as nn

#: (module of the class, class name) of layers with a collective in their training forward,
#: besides ``torch.nn.SyncBatchNorm`` and its subclasses (mmcv's ``'SyncBN'`` is torch's).
_COLLECTIVE_CLASSES = {
    ('mmcv.ops.sync_bn', 'SyncBatchNorm'),  # mmcv's 'MMSyncBN'
    ('mmdet3d.models.layers.norm', 'NaiveSyncBatchNorm1d'),  # mmdet3d's 'naiveSyncBN1d'
    ('mmdet3d.models.layers.norm', 'NaiveSyncBatchNorm2d'),  # mmdet3d's 'naiveSyncBN2d'
    ('mmdet3d.ops.norm', 'NaiveSyncBatchNorm1d'),  # the same in mmdet3d 0.x and 1.0.0rc
    ('mmdet3d.ops.norm', 'NaiveSyncBatchNorm2d'),
}
#: ``norm_cfg`` types that build one of them, as registered by mmcv and mmdet3d.
SYNC_NORM_CFG_TYPES = ('SyncBN', 'MMSyncBN', 'naiveSyncBN1d', 'naiveSyncBN2d')


def has_forward_collective(module: nn.Module) -> bool:
    if isinstance(module, nn.SyncBatchNorm):
        return True
    return any((cls.__module__, cls.__name__) in _COLLECTIVE_CLASSES
               for cls in type(module).__mro__)


def forward_collective_modules(model: nn.Module) -> List[Tuple[str, nn.Module]]:
    """``(name, module)`` of every layer of ``model`` with a collective in its forward."""
    return [(name, module) for name, module in model.named_modules()
            if has_forward_collective(module)]


def forward_collectives_warning(model: nn.Module, wrapper: str,
                                limit: int = 12) -> Optional[str]:
    """The build-time warning naming the SyncBN-type layers of ``model``; None without any.

    Args:
        model (nn.Module): The unwrapped model.
        wrapper (str): The guarded wrapper as its user knows it (ConfigLines.wrapper).
        limit (int): At most this many layers are named.
    """
    found = forward_collective_modules(model)
    if not found:
        return None
    names = ', '.join(f'{name} ({type(module).__name__})' for name, module in found[:limit])
    more = f' and {len(found) - limit} more' if len(found) > limit else ''
    message = (
        f'{wrapper}: the model holds {len(found)} layer(s) that run a collective in their '
        f'forward: {names}{more}. If a branch holding one is skipped on some ranks and not '
        'on others in the same iteration, every rank waits in that collective before any '
        'backward (plain DDP hangs); no DDP option can make that train, and the guard\'s '
        "stall watchdog ends the run with the layer's name. Use BN or GN in branches that can "
        'be skipped, or run them on every rank; '
        '`python -m mmdet3d_ddp_guard check CONFIG --world-size N` predicts it.')
    return message


class ForwardCollectiveCounter:
    """Counts training-mode forward calls of every SyncBN-type layer, per simulated rank.

    Args:
        model (nn.Module): The model (one copy, run once per simulated rank).
    """

    def __init__(self, model: nn.Module):
        self.types: Dict[str, str] = {}
        self._calls: Dict[str, int] = {}
        self._handles = []
        for name, module in forward_collective_modules(model):
            self.types[name] = type(module).__name__
            self._handles.append(module.register_forward_pre_hook(self._counter(name)))

    def _counter(self, name: str):
        def count(module, args):
            # In eval mode these layers use running statistics: no collective.
            if module.training:
                self._calls[name] = self._calls.get(name, 0) + 1
        return count

    def start_rank(self) -> None:
        self._calls = {}

    def calls(self) -> Dict[str, int]:
        """Calls per layer since :meth:`start_rank` (every layer listed, 0 when not run)."""
        return {name: self._calls.get(name, 0) for name in self.types}

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def sync_norm_cfg_keys(model_cfg: Any, prefix: str = 'model') -> List[str]:
    """Dotted config keys (``model.refiner_norm_cfg``) whose dict builds a SyncBN-type layer."""
    keys = []
    if isinstance(model_cfg, dict):
        # 'mmdet3d.naiveSyncBN1d' names the registry scope first.
        if str(model_cfg.get('type')).rpartition('.')[2] in SYNC_NORM_CFG_TYPES:
            keys.append(prefix)
        for key, value in model_cfg.items():
            keys += sync_norm_cfg_keys(value, f'{prefix}.{key}')
    elif isinstance(model_cfg, (list, tuple)):
        for index, value in enumerate(model_cfg):
            keys += sync_norm_cfg_keys(value, f'{prefix}.{index}')
    return keys


def config_key_of(module_name: str, keys: Sequence[str]) -> Optional[str]:
    """The key of ``keys`` whose path shares most leading parts with ``module_name``
    (``pts_bbox_head.shared_conv.bn`` -> ``model.pts_bbox_head.norm_cfg``); the only key
    when there is one; None when nothing matches."""
    parts = module_name.split('.')

    def shared(key: str) -> int:
        count = 0
        for mine, theirs in zip(parts, key.split('.')[1:]):
            if mine != theirs:
                break
            count += 1
        return count

    scored = sorted(((shared(key), key) for key in keys), reverse=True)
    if not scored:
        return None
    if scored[0][0] > 0 or len(scored) == 1:
        return scored[0][1]
    return None
