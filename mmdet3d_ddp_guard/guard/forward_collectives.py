"""Layers that run a collective in their forward (SyncBatchNorm and the like).

Such a layer all-reduces batch statistics across ranks in every training forward. When a
branch holding it runs on some ranks and not on others, the ranks that ran it wait for
partners that never come: the job hangs before any backward, whatever DDP's options. This
module finds those layers by class, for GuardedDDP's build-time warning; ``check
--world-size N`` counts their calls per simulated rank from the same list
(:mod:`..rank_simulation.forward_collective_counts`). It imports no framework: the callers
log. The stall guard does not use this list: it records every collective a rank issues, and
names the issuing module whatever its class (:mod:`..stall_guard.collective_log`).
"""
from typing import List, Optional, Tuple

import torch.nn as nn

from ..environment.framework_table import FRAMEWORKS
from ..messages.build_warnings import forward_collectives_message

#: (module of the class, class name) of layers with a collective in their training forward,
#: besides ``torch.nn.SyncBatchNorm`` and its subclasses: every framework's, from its row.
_COLLECTIVE_CLASSES = {pair for row in FRAMEWORKS for pair in row.sync_norm_classes}


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
    return forward_collectives_message(
        wrapper, [f'{name} ({type(module).__name__})' for name, module in found[:limit]],
        len(found))
