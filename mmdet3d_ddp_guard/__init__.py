"""mmdet3d_ddp_guard: multi-GPU training of 3D detectors that unused parameters cannot kill.

One line in a config, ``custom_imports = dict(imports=['mmdet3d_ddp_guard'])``, brings the
guard to the framework that is installed:

- MMEngine (mmdet3d >= 1.1): :mod:`.openmmlab2` registers :class:`GuardedDDP` and the hooks;
  the config picks the wrapper with ``model_wrapper_cfg`` (or inherits
  ``mmdet3d_ddp_guard::_base_/ddp_guard.py``).
- mmcv-full 1.x (mmdet 2.x, mmdet3d 0.x and 1.0.0rc, the BEV codebases): :mod:`.openmmlab1`
  guards ``mmcv.parallel.MMDistributedDataParallel`` itself, since no config line there picks
  the DDP wrapper.

Where both are installed both adapters load; neither imports the other's framework. What
does not depend on a framework (the usage record, the comm hook that carries the counts, the
completion, the decision policy, the errors, the stall guard) is in :mod:`.core`, and the
files and summaries in :mod:`.reporting`.

The supported torch and Python are checked first (:mod:`.core.versions`): torch is not an
install requirement, so that installing this package never replaces a user's CUDA build.
"""
import torch

from .environment.versions import check_torch

# Before the modules below, so that an unsupported torch gets this message, not theirs.
check_torch(torch.__version__)

from .guard.decision_policy import Decision  # noqa: E402
from .guard.errors import StaticGraphChangedError, UnusedParametersError  # noqa: E402
from .environment.frameworks import MMCV1, MMENGINE, installed_frameworks  # noqa: E402
from .guard.usage_record import IterationUsage, ParamUsageRecord  # noqa: E402
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
