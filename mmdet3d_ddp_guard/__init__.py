"""mmdet3d_ddp_guard: multi-GPU training of 3D detectors that unused parameters cannot kill.

One line in a config, ``custom_imports = dict(imports=['mmdet3d_ddp_guard'])``, brings the
guard to the framework that is installed:

- MMEngine (mmdet3d >= 1.1): :mod:`.openmmlab2` registers :class:`GuardedDDP` and the hooks;
  the config picks the wrapper with ``model_wrapper_cfg``.
- mmcv-full 1.x (mmdet 2.x, mmdet3d 0.x and 1.0.0rc, the BEV codebases): :mod:`.openmmlab1`
  guards ``mmcv.parallel.MMDistributedDataParallel`` itself, since no config line there picks
  the DDP wrapper.

Where both are installed both adapters load; neither imports the other's framework. What
importing changes in each framework is listed in the README ("What importing it changes")
and done in one module per adapter. The folders, one concern each: :mod:`.guard` (the
mechanism), :mod:`.stall_guard`, :mod:`.rank_simulation` (``check``), :mod:`.reporting` (the
hook's files), :mod:`.messages`, :mod:`.environment`, the two adapters and :mod:`.cli`.

The supported torch and Python are checked first (:mod:`.environment.versions`): torch is
not an install requirement, so that installing this package never replaces a user's CUDA
build.
"""
import torch

from .environment.versions import check_torch

# Before the modules below, so that an unsupported torch gets this message, not theirs.
check_torch(torch.__version__)

from .environment.frameworks import installed_frameworks  # noqa: E402
from .guard.decision_policy import Decision  # noqa: E402
from .guard.errors import StaticGraphChangedError, UnusedParametersError  # noqa: E402
from .guard.iteration_usage import IterationUsage  # noqa: E402
from .guard.usage_record import ParamUsageRecord  # noqa: E402
from .messages.framework_names import MMCV1, MMENGINE  # noqa: E402
from .version import __version__  # noqa: E402

__all__ = [
    'Decision', 'ParamUsageRecord', 'IterationUsage', 'UnusedParametersError',
    'StaticGraphChangedError', '__version__'
]

FRAMEWORKS = installed_frameworks()
if MMENGINE in FRAMEWORKS:
    from .openmmlab2 import (CPUCompatibleMMDDP, GuardedDDP, StallPhaseHook,  # noqa: E402
                             UnusedParamsHook)
    __all__ += ['GuardedDDP', 'UnusedParamsHook', 'StallPhaseHook', 'CPUCompatibleMMDDP']
if MMCV1 in FRAMEWORKS:
    from .openmmlab1 import GuardedMMDistributedDataParallel  # noqa: E402
    __all__ += ['GuardedMMDistributedDataParallel']
