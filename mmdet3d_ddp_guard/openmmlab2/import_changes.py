"""Everything that importing the MMEngine adapter changes outside this package, in one place.

``import mmdet3d_ddp_guard`` (the config's ``custom_imports``) with MMEngine installed makes
these changes and no others (README, "What importing it changes";
tests/test_import_changes.py compares a fresh process before and after the import):

1. ``mmengine.registry.MODEL_WRAPPERS``: ``GuardedDDP`` and ``CPUCompatibleMMDDP``.
2. ``mmengine.registry.HOOKS``: ``UnusedParamsHook`` and ``StallPhaseHook``.
3. ``mmengine.dist.utils._init_dist_pytorch``, only where ``torch.cuda.is_available()`` is
   False at the import: wrapped to create a gloo group.
4. ``mmengine.runner.checkpoint.CheckpointLoader.load_checkpoint``, only on torch >= 2.6:
   wrapped to load within ``torch.serialization.safe_globals`` (MMEngine's checkpoint
   globals allowed during that call only; torch's allowlist is as it was after it).

Nothing is registered in ``MODELS`` or ``DATASETS``. The registrations (1, 2) are made by
the classes' own ``register_module()`` decorators, where they are defined (guarded_ddp.py,
cpu_launch.py, hooks/), when the adapter imports them; :func:`apply` makes the patches (3,
4). Each is explained where it is made below.
"""
import torch

from .checkpoint_safe_globals import allow_mmengine_checkpoint_globals
from .cpu_launch import allow_cpu_init_dist

#: The objects changed, by their dotted names, as the README lists them: the registries at
#: every import; the launch without CUDA, the checkpoint loader on torch >= 2.6.
CHANGED = ('mmengine.registry.MODEL_WRAPPERS', 'mmengine.registry.HOOKS',
           'mmengine.dist.utils._init_dist_pytorch',
           'mmengine.runner.checkpoint.CheckpointLoader.load_checkpoint')


def apply() -> None:
    """Makes the patches of the module docstring (3 and 4) where they are needed; called
    once by the adapter's ``__init__``, and idempotent."""
    # 1, 2. MODEL_WRAPPERS and HOOKS. Why: the config names the wrapper and the hooks by
    # these keys (model_wrapper_cfg=dict(type='GuardedDDP'), custom_hooks), so registering
    # them is the feature. Each name is the package's own and a registry refuses a second
    # one, so no entry of MMEngine's is replaced. To avoid: leave the package out of
    # custom_imports (nothing else reaches the registries).

    # 3. mmengine.dist.utils._init_dist_pytorch. Why: MMEngine's launcher='pytorch' calls
    # torch.cuda.set_device before creating the process group, which fails without CUDA;
    # the wrapper creates a gloo group instead (cpu_launch.py), so that the demo, the tests
    # and a laptop train under torchrun. Not needed for training on GPUs, so not made where
    # CUDA is available at the import. To avoid it without CUDA: a launcher other than
    # 'pytorch' never reaches it, and the wrapper hands any init_backend but 'torch' to
    # MMEngine's own; to undo it, rebind mmengine.dist.utils._init_dist_pytorch to its
    # __wrapped__.
    if not torch.cuda.is_available():
        allow_cpu_init_dist()

    # 4. CheckpointLoader.load_checkpoint. Why: on torch >= 2.6, torch.load defaults to
    # weights_only=True and refuses the HistoryBuffer and numpy values in every checkpoint
    # MMEngine's Runner saves, so --resume and load_from fail. The wrapper allows exactly
    # those globals while MMEngine loads a checkpoint, and torch's allowlist is as it was
    # after (checkpoint_safe_globals.py: why not process-wide with add_safe_globals). Not
    # made on an older torch, which loads with weights_only=False. It changes no load but
    # MMEngine's checkpoint loads; to undo it, set CheckpointLoader.load_checkpoint to
    # classmethod(CheckpointLoader.load_checkpoint.__func__.__wrapped__).
    allow_mmengine_checkpoint_globals()
