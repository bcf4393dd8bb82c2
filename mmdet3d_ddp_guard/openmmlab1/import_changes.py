"""Everything that importing the mmcv-full 1.x adapter changes outside this package, in one
place.

``import mmdet3d_ddp_guard`` (the config's ``custom_imports``) with mmcv-full 1.x installed
makes these changes and no others (README, "What importing it changes";
tests/test_import_changes.py compares a fresh process before and after the import):

1. ``mmcv.runner.HOOKS``: ``UnusedParamsHook`` and ``StallPhaseHook``.
2. ``mmcv.parallel.MMDistributedDataParallel.__new__``: every ``MMDistributedDataParallel``
   built afterwards is a ``GuardedMMDistributedDataParallel``.
3. ``mmcv.runner.BaseRunner.load_checkpoint``: wrapped to keep the loaded checkpoint's
   ``meta`` on the runner.
4. Only where ``torch.cuda.is_available()`` is False at the import:
   ``mmcv.runner.dist_utils._init_dist_pytorch`` (a gloo group),
   ``mmdet.utils.util_distribution.build_ddp`` (a CPU model let through) and
   ``mmdet.core.utils.dist_utils.sync_random_seed`` (its broadcast on the CPU), the mmdet
   functions also where mmdet's modules imported them by name, and only where mmdet is
   installed.

Nothing is registered in a models' or datasets' registry. The registrations (1) are made
by the hooks' own ``register_module()`` decorators, where they are defined, when the adapter
imports them; :func:`apply` makes the patches (2 to 4). Each is explained where it is made
below.
"""
import torch

from .cpu_launch import allow_cpu_training
from .guarded_mmcv_ddp import guard_mmcv_ddp
from .unused_params_hook import keep_loaded_checkpoint_meta

#: The objects changed, by their dotted names, as the README lists them: at every import,
EVERY_IMPORT = ('mmcv.runner.HOOKS', 'mmcv.parallel.MMDistributedDataParallel.__new__',
                'mmcv.runner.BaseRunner.load_checkpoint')
#: and without CUDA only.
WITHOUT_CUDA = ('mmcv.runner.dist_utils._init_dist_pytorch',
                'mmdet.utils.util_distribution.build_ddp',
                'mmdet.core.utils.dist_utils.sync_random_seed')
CHANGED = EVERY_IMPORT + WITHOUT_CUDA


def apply() -> None:
    """Makes the patches of the module docstring (2 to 4) where they are needed; called
    once by the adapter's ``__init__``, and idempotent."""
    # 1. mmcv.runner.HOOKS. Why: custom_hooks = [dict(type='UnusedParamsHook')] names the
    # hook by this key, so registering it is the feature. Each name is the package's own
    # and mmcv's registry refuses a second one, so no entry of mmcv's is replaced. To
    # avoid: leave the package out of custom_imports.

    # 2. MMDistributedDataParallel.__new__. Why: OpenMMLab 1.x has no config line that
    # picks the DDP wrapper (train_detector, mmdet3d's and the research codebases' train
    # scripts call mmcv.parallel.MMDistributedDataParallel(...), a name they imported
    # before the config was read), so the class itself builds the guarded wrapper
    # (guarded_mmcv_ddp.py). This is what the README's line turns on. To avoid the guard
    # while keeping the import: ddp_guard = dict(enabled=False) in the config builds mmcv's
    # own wrapper (on a machine without CUDA, the same with no device_ids).
    guard_mmcv_ddp()

    # 3. BaseRunner.load_checkpoint. Why: UnusedParamsHook's statistics are saved in each
    # checkpoint's meta, and IterBasedRunner.resume drops the loaded meta; the wrapper keeps
    # it on the runner as ddp_guard_loaded_meta (unused_params_hook.py), an attribute no
    # mmcv code reads. It must be in place before train_detector calls runner.resume, so at
    # the import. The checkpoint and what load_checkpoint returns are unchanged; to undo
    # it, set BaseRunner.load_checkpoint to its __wrapped__ (the hook then reads
    # runner.meta, which IterBasedRunner's resume leaves without the statistics).
    keep_loaded_checkpoint_meta()

    # 4. The launch path on a machine without CUDA. Why: mmcv's init_dist calls
    # torch.cuda.set_device, mmdet 2.x's build_ddp asserts a CUDA device and its samplers
    # broadcast a CUDA tensor: each refuses the CPU (cpu_launch.py), so that the tests, CI
    # and a laptop train under torchrun. Not needed for training on GPUs, so not made where
    # CUDA is available at the import. To undo one, rebind it to its __wrapped__.
    if not torch.cuda.is_available():
        allow_cpu_training()
