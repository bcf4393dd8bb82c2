"""mmdet3d_ddp_guard: multi-GPU training of 3D detectors that unused parameters cannot kill.

Importing the package (``custom_imports=dict(imports=['mmdet3d_ddp_guard'])``) registers
:class:`GuardedDDP` in MMEngine's root ``MODEL_WRAPPERS`` and :class:`UnusedParamsHook` in
its root ``HOOKS``, lets MMEngine's ``launcher='pytorch'`` start on a machine without
CUDA (see :mod:`mmdet3d_ddp_guard.cpu_launch`), and lets torch >= 2.6 load MMEngine's own
checkpoints (``--resume``, ``load_from``) with ``weights_only=True`` (see
:mod:`mmdet3d_ddp_guard.checkpoint_safe_globals`).
"""
from .checkpoint_safe_globals import allow_mmengine_checkpoint_globals
from .cpu_launch import CPUCompatibleMMDDP, allow_cpu_init_dist
from .decision_policy import Decision
from .errors import StaticGraphChangedError, UnusedParametersError
from .guarded_ddp import GuardedDDP
from .hooks import UnusedParamsHook
from .usage_record import IterationUsage, ParamUsageRecord
from .version import __version__

allow_cpu_init_dist()
allow_mmengine_checkpoint_globals()

__all__ = [
    'GuardedDDP', 'UnusedParamsHook', 'CPUCompatibleMMDDP', 'Decision', 'ParamUsageRecord',
    'IterationUsage', 'UnusedParametersError', 'StaticGraphChangedError', '__version__'
]
