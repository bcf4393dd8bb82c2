"""The MMEngine adapter (mmdet3d >= 1.1): GuardedDDP, the hooks and the Runner wiring.

Importing it registers :class:`GuardedDDP` (and the CPU baseline ``CPUCompatibleMMDDP``) in
MMEngine's root ``MODEL_WRAPPERS`` and :class:`UnusedParamsHook` and :class:`StallPhaseHook`
in its root ``HOOKS``; without CUDA, lets MMEngine's ``launcher='pytorch'`` start
(:mod:`.cpu_launch`); and on torch >= 2.6 lets MMEngine's checkpoint loading (``--resume``,
``load_from``) read MMEngine's own checkpoints with ``weights_only=True``
(:mod:`.checkpoint_safe_globals`). :mod:`.import_changes` lists every such change, with its
reason, and makes the patches. ``check``'s MMEngine half (:mod:`.rank_simulation`,
:mod:`.config_reading`) is imported by the command only.
"""
import mmengine

from ..environment.framework_table import MMENGINE, framework
from ..environment.versions import check_framework

# Before the modules below, so that an unsupported MMEngine gets this message, not theirs.
check_framework(framework(MMENGINE), mmengine)

from . import import_changes  # noqa: E402
from .cpu_launch import CPUCompatibleMMDDP  # noqa: E402
from .guarded_ddp import GuardedDDP  # noqa: E402
from .hooks import StallPhaseHook, UnusedParamsHook  # noqa: E402

import_changes.apply()

__all__ = ['GuardedDDP', 'UnusedParamsHook', 'StallPhaseHook', 'CPUCompatibleMMDDP']
