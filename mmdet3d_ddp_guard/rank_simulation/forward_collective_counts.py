"""The simulation's side of the layers that run a collective in their forward (SyncBN and the
like): their training-mode calls counted per simulated rank, and the config key that built
each, so that ``check`` names the ``norm_cfg`` to change.

Which layers those are is the guard's list (:mod:`..guard.forward_collectives`, which warns
about them at GuardedDDP's build); the ``norm_cfg`` types are the names the frameworks
register those classes under, from their rows of the framework table.
"""
from typing import Any, Dict, List, Optional, Sequence

import torch.nn as nn

from ..environment.framework_table import FRAMEWORKS
from ..guard.forward_collectives import forward_collective_modules

#: ``norm_cfg`` types that build one of the guard's layers with a collective in their
#: forward, every framework's.
SYNC_NORM_CFG_TYPES = tuple(sorted({kind for row in FRAMEWORKS
                                    for kind in row.sync_norm_cfg_types}))


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
