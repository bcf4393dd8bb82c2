"""The MMEngine adapter (mmdet3d >= 1.1): GuardedDDP, the hooks and the Runner wiring.

Importing it registers :class:`GuardedDDP` in MMEngine's root ``MODEL_WRAPPERS`` and
:class:`UnusedParamsHook` and :class:`StallPhaseHook` in its root ``HOOKS``, lets MMEngine's
``launcher='pytorch'`` start on a machine without CUDA (:mod:`.cpu_launch`), lets MMEngine
read ``mmdet3d_ddp_guard::`` config paths (:mod:`.config_scope`), and lets torch >= 2.6 load
MMEngine's own checkpoints (``--resume``, ``load_from``) with ``weights_only=True``
(:mod:`.checkpoint_safe_globals`).
"""
import mmengine

from ..core.versions import check_mmengine

# Before the modules below, so that an unsupported MMEngine gets this message, not theirs.
check_mmengine(mmengine.__version__)

from . import config_scope, registry  # noqa: F401,E402 (registry: the package's scope)
from .checkpoint_safe_globals import allow_mmengine_checkpoint_globals  # noqa: E402
from .cpu_launch import CPUCompatibleMMDDP, allow_cpu_init_dist  # noqa: E402
from .guarded_ddp import GuardedDDP  # noqa: E402
from .hooks import StallPhaseHook, UnusedParamsHook  # noqa: E402

allow_cpu_init_dist()
config_scope.install()
allow_mmengine_checkpoint_globals()

__all__ = ['GuardedDDP', 'UnusedParamsHook', 'StallPhaseHook', 'CPUCompatibleMMDDP']
