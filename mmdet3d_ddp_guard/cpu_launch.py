"""Running MMEngine's ``launcher='pytorch'`` under torchrun on a machine without CUDA.

Two obstacles, both in MMEngine's Runner, neither in the model:

- ``mmengine.dist.init_dist`` calls ``torch.cuda.set_device`` before it creates the process
  group, which raises on a CPU-only torch. :func:`allow_cpu_init_dist` (called when this
  package is imported, i.e. by ``custom_imports`` while the config is read, before the
  Runner exists) makes that step create a gloo group instead when there is no CUDA, and
  leaves it untouched otherwise.
- ``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to every DDP subclass, which DDP
  refuses for a CPU module: see :func:`drop_device_ids_for_cpu_module`.
"""
import atexit
import functools

import torch
import torch.distributed as dist
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import MODEL_WRAPPERS


def allow_cpu_init_dist() -> bool:
    """Wraps MMEngine's private ``_init_dist_pytorch`` (checked on mmengine 0.10.x) so that
    on a machine without CUDA it creates a gloo group; returns whether it did wrap it."""
    import mmengine.dist.utils as mmengine_dist
    original = getattr(mmengine_dist, '_init_dist_pytorch', None)
    if original is None or getattr(original, 'ddp_guard_cpu_aware', False):
        return False

    @functools.wraps(original)
    def init_dist_pytorch(backend, init_backend='torch', **kwargs):
        if torch.cuda.is_available() or init_backend != 'torch':
            return original(backend, init_backend=init_backend, **kwargs)
        dist.init_process_group(backend='gloo', **kwargs)
        # Gloo ranks that exit without destroying the group sometimes abort with
        # "terminate called without an active exception".
        atexit.register(_destroy_process_group)
        print_log(f'mmdet3d_ddp_guard: no CUDA here; rank {dist.get_rank()} of '
                  f'{dist.get_world_size()} uses a gloo process group (the config asked '
                  f'for {backend!r}).', logger='current')

    init_dist_pytorch.ddp_guard_cpu_aware = True
    mmengine_dist._init_dist_pytorch = init_dist_pytorch
    return True


def _destroy_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def drop_device_ids_for_cpu_module(module, kwargs: dict) -> None:
    """``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to every DDP subclass; DDP
    refuses them for a CPU module. Removes them (in place) when the module is on the CPU."""
    if kwargs.get('device_ids') is None:
        return
    if all(p.device.type == 'cpu' for p in module.parameters()):
        print_log(f'{type(module).__name__} is on the CPU; ignoring device_ids='
                  f'{kwargs["device_ids"]} (DDP accepts them only for GPU modules).',
                  logger='current')
        kwargs['device_ids'] = None
        kwargs.pop('output_device', None)


@MODEL_WRAPPERS.register_module()
class CPUCompatibleMMDDP(MMDistributedDataParallel):
    """Plain ``MMDistributedDataParallel``, unchanged, except that a CPU module gets no
    ``device_ids``: the baseline that the demo and the benchmarks compare against on CPU,
    where MMEngine's Runner cannot build the plain wrapper at all."""

    def __init__(self, module, **kwargs):
        drop_device_ids_for_cpu_module(module, kwargs)
        super().__init__(module=module, **kwargs)
