"""mmdet3d_ddp_guard: multi-GPU training of 3D detectors that unused parameters cannot kill.

One line in a config, ``custom_imports = dict(imports=['mmdet3d_ddp_guard'])``, brings the
guard to the OpenMMLab framework that is installed, and a plain PyTorch loop builds
:class:`mmdet3d_ddp_guard.pytorch.GuardedDDP` in place of torch's DDP:

- MMEngine (mmdet3d >= 1.1): :mod:`.openmmlab2` registers :class:`GuardedDDP` and the hooks;
  the config picks the wrapper with ``model_wrapper_cfg``.
- mmcv-full 1.x (mmdet 2.x, mmdet3d 0.x and 1.0.0rc, the BEV codebases): :mod:`.openmmlab1`
  guards ``mmcv.parallel.MMDistributedDataParallel`` itself, since no config line there picks
  the DDP wrapper.
- torch alone (a loop the user writes): :mod:`.pytorch`, imported by name; it changes
  nothing outside the package (its ``guard_ddp_builds()`` serves Accelerate and the Hugging
  Face Trainer, which build torch's DDP themselves).
- PyTorch Lightning: :mod:`.lightning` (``GuardedDDPStrategy``), imported by name only,
  never here: importing the package loads no trainer (its row's
  ``imported_by_the_package``).

Where several are installed each adapter loads; neither imports the other's framework. What
importing changes in each framework is listed in the README ("What importing it changes")
and done in one module per adapter. The folders, one concern each: :mod:`.guard` (the
mechanism), :mod:`.stall_guard`, :mod:`.rank_simulation` (``check``), :mod:`.reporting` (the
hook's files), :mod:`.messages`, :mod:`.environment`, the four adapters and :mod:`.cli`.

The supported torch and Python are checked first (:mod:`.environment.versions`): torch is
not an install requirement, so that installing this package never replaces a user's CUDA
build.
"""
import importlib

import torch

from .environment.versions import check_torch

# Before the modules below, so that an unsupported torch gets this message, not theirs.
check_torch(torch.__version__)

from .environment.framework_table import rows_of  # noqa: E402
from .environment.frameworks import installed_frameworks  # noqa: E402
from .guard.decision_policy import Decision  # noqa: E402
from .guard.errors import StaticGraphChangedError, UnusedParametersError  # noqa: E402
from .guard.iteration_usage import IterationUsage  # noqa: E402
from .guard.usage_record import ParamUsageRecord  # noqa: E402
from .version import __version__  # noqa: E402

__all__ = [
    'Decision', 'ParamUsageRecord', 'IterationUsage', 'UnusedParametersError',
    'StaticGraphChangedError', '__version__'
]

FRAMEWORKS = installed_frameworks()
# Each installed framework's adapter, imported (its import changes applied), and what the
# table says it exports (GuardedDDP and the hooks for MMEngine, the guarded
# MMDistributedDataParallel for mmcv 1.x) re-exported here.
for _framework in rows_of(FRAMEWORKS):
    if not _framework.imported_by_the_package:
        continue
    _adapter = importlib.import_module(f'.{_framework.adapter}', __name__)
    globals().update({name: getattr(_adapter, name) for name in _framework.exports})
    __all__ += list(_framework.exports)
del _framework, _adapter
