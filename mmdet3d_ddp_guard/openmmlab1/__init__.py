"""The mmcv-full 1.x adapter (mmdet 2.x, mmdet3d 0.x and 1.0.0rc, the BEV codebases).

Importing it (``custom_imports = dict(imports=['mmdet3d_ddp_guard'])``) guards every
``mmcv.parallel.MMDistributedDataParallel`` built afterwards
(:class:`GuardedMMDistributedDataParallel`), registers :class:`UnusedParamsHook` in mmcv's
``HOOKS``, and lets ``launcher='pytorch'`` train on a machine without CUDA
(:mod:`.cpu_launch`).
"""
import mmcv

from ..environment.versions import check_mmcv_full

# Before the modules below, so that an unsupported mmcv-full gets this message, not theirs.
check_mmcv_full(mmcv.__version__)

from .cpu_launch import allow_cpu_training  # noqa: E402
from .guarded_mmcv_ddp import GuardedMMDistributedDataParallel, guard_mmcv_ddp  # noqa: E402
from .unused_params_hook import UnusedParamsHook  # noqa: E402

guard_mmcv_ddp()
allow_cpu_training()

__all__ = ['GuardedMMDistributedDataParallel', 'UnusedParamsHook']
