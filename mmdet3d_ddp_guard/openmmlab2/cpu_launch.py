"""Running MMEngine's ``launcher='pytorch'`` under torchrun on a machine without CUDA.

Two obstacles, both in MMEngine's Runner, neither in the model:

- ``mmengine.dist.init_dist`` calls ``torch.cuda.set_device`` before it creates the process
  group, which raises on a CPU-only torch. :func:`allow_cpu_init_dist` (called by
  :mod:`.import_changes` when this package is imported without CUDA, i.e. by
  ``custom_imports`` while the config is read, before the Runner exists) makes that step
  create a gloo group instead. Where CUDA is available it is not called, and MMEngine's
  function stays as it is.
- ``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to every DDP subclass, which DDP
  refuses for a CPU module: see :func:`log_dropped_device_ids`.

A gloo rank must also not abort on its way out: see
:func:`mmdet3d_ddp_guard.environment.cpu_ddp.leave_gloo_cleanly_at_exit`, installed for every
gloo group GuardedDDP trains on, whoever created it (this package's launch path, or the
user's own ``dist.init_process_group``).
"""
import functools

import torch
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import MODEL_WRAPPERS

from ..environment.cpu_ddp import drop_device_ids_for_cpu_module, init_gloo_group


def allow_cpu_init_dist() -> bool:
    """Wraps MMEngine's private ``_init_dist_pytorch`` (checked on mmengine 0.10.x) so that
    on a machine without CUDA it creates a gloo group; returns whether it did wrap it. The
    wrapper checks CUDA again when called, so that a caller that wraps it where CUDA is
    available (a test) still gets MMEngine's own launch there."""
    import mmengine.dist.utils as mmengine_dist
    original = getattr(mmengine_dist, '_init_dist_pytorch', None)
    if original is None or getattr(original, 'ddp_guard_cpu_aware', False):
        return False

    @functools.wraps(original)
    def init_dist_pytorch(backend, init_backend='torch', **kwargs):
        if torch.cuda.is_available() or init_backend != 'torch':
            return original(backend, init_backend=init_backend, **kwargs)
        print_log(init_gloo_group(backend, **kwargs), logger='current')

    init_dist_pytorch.ddp_guard_cpu_aware = True
    mmengine_dist._init_dist_pytorch = init_dist_pytorch
    return True


@MODEL_WRAPPERS.register_module()
class CPUCompatibleMMDDP(MMDistributedDataParallel):
    """Plain ``MMDistributedDataParallel``, unchanged, except that a CPU module gets no
    ``device_ids``: the baseline that the demo and the benchmarks compare against on CPU,
    where MMEngine's Runner cannot build the plain wrapper at all."""

    def __init__(self, module, **kwargs):
        log_dropped_device_ids(module, kwargs)
        super().__init__(module=module, **kwargs)


def log_dropped_device_ids(module, kwargs: dict) -> None:
    """:func:`drop_device_ids_for_cpu_module`, said in MMEngine's log."""
    message = drop_device_ids_for_cpu_module(module, kwargs)
    if message is not None:
        print_log(message, logger='current')
