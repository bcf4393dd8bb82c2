"""The mmcv-full 1.x adapter (mmdet 2.x, mmdet3d 0.x and 1.0.0rc, the BEV codebases).

Importing it (``custom_imports = dict(imports=['mmdet3d_ddp_guard'])``) guards every
``mmcv.parallel.MMDistributedDataParallel`` built afterwards
(:class:`GuardedMMDistributedDataParallel`), registers :class:`UnusedParamsHook` and
``StallPhaseHook`` in mmcv's ``HOOKS``, makes ``BaseRunner.load_checkpoint`` keep the loaded
checkpoint's meta for the hook, and, without CUDA, lets ``launcher='pytorch'`` train
(:mod:`.cpu_launch`). :mod:`.import_changes` lists every such change, with its reason, and
makes the patches. ``check``'s mmcv-full 1.x half (:mod:`.rank_simulation`,
:mod:`.training_loaders`, :mod:`.config_reading`) is imported by the command only.
"""
import mmcv

from ..environment.framework_table import MMCV1, framework
from ..environment.versions import check_framework

# Before the modules below, so that an unsupported mmcv-full gets this message, not theirs.
check_framework(framework(MMCV1), mmcv)

from . import import_changes  # noqa: E402
from .guarded_mmcv_ddp import GuardedMMDistributedDataParallel  # noqa: E402
from .unused_params_hook import UnusedParamsHook  # noqa: E402

import_changes.apply()

__all__ = ['GuardedMMDistributedDataParallel', 'UnusedParamsHook']
