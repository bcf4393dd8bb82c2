"""The MMEngine adapter (mmdet3d >= 1.1): GuardedDDP, the hooks and the Runner wiring.

Importing it registers :class:`GuardedDDP` in MMEngine's root ``MODEL_WRAPPERS`` and
:class:`UnusedParamsHook` and :class:`StallPhaseHook` in its root ``HOOKS``, lets MMEngine's
``launcher='pytorch'`` start on a machine without CUDA (:mod:`.cpu_launch`), and lets torch >= 2.6 load
MMEngine's own checkpoints (``--resume``, ``load_from``) with ``weights_only=True``
(:mod:`.checkpoint_safe_globals`).
"""
import mmengine

from ..environment.versions import check_mmengine

# Before the modules below, so that an unsupported MMEngine gets this message, not theirs.
check_mmengine(mmengine.__version__)

from .checkpoint_safe_globals import allow_mmengine_checkpoint_globals  # noqa: E402
from .cpu_launch import CPUCompatibleMMDDP, allow_cpu_init_dist  # noqa: E402
from .guarded_ddp import GuardedDDP  # noqa: E402
from .hooks import StallPhaseHook, UnusedParamsHook  # noqa: E402

allow_cpu_init_dist()
allow_mmengine_checkpoint_globals()

__all__ = ['GuardedDDP', 'UnusedParamsHook', 'StallPhaseHook', 'CPUCompatibleMMDDP']
