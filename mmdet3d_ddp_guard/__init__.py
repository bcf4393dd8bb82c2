"""mmdet3d_ddp_guard: multi-GPU training of 3D detectors that unused parameters cannot kill.

Importing the package (``custom_imports=dict(imports=['mmdet3d_ddp_guard'])``) registers
:class:`GuardedDDP` in MMEngine's root ``MODEL_WRAPPERS`` and :class:`UnusedParamsHook` in
its root ``HOOKS``, lets MMEngine's ``launcher='pytorch'`` start on a machine without
CUDA (see :mod:`mmdet3d_ddp_guard.cpu_launch`), lets MMEngine read ``mmdet3d_ddp_guard::``
config paths (:mod:`mmdet3d_ddp_guard.config_scope`), and lets torch >= 2.6 load MMEngine's
own checkpoints (``--resume``, ``load_from``) with ``weights_only=True`` (see
:mod:`mmdet3d_ddp_guard.checkpoint_safe_globals`).

The supported torch, MMEngine and Python are checked first (:mod:`.versions`): torch is not an
install requirement, so that installing this package never replaces a user's CUDA build.
"""
import mmengine
import torch

from .versions import check_versions

# Before the modules below, so that an unsupported torch gets this message, not theirs.
check_versions(torch.__version__, mmengine.__version__)

from . import config_scope, registry  # noqa: F401 (registry: the package's MMEngine scope)
from .checkpoint_safe_globals import allow_mmengine_checkpoint_globals
from .cpu_launch import CPUCompatibleMMDDP, allow_cpu_init_dist
from .decision_policy import Decision
from .errors import StaticGraphChangedError, UnusedParametersError
from .guarded_ddp import GuardedDDP
from .hooks import StallPhaseHook, UnusedParamsHook
from .usage_record import IterationUsage, ParamUsageRecord
from .version import __version__

allow_cpu_init_dist()
config_scope.install()
allow_mmengine_checkpoint_globals()

__all__ = [
    'GuardedDDP', 'UnusedParamsHook', 'StallPhaseHook', 'CPUCompatibleMMDDP', 'Decision',
    'ParamUsageRecord', 'IterationUsage', 'UnusedParametersError', 'StaticGraphChangedError',
    '__version__'
]
