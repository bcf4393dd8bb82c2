"""Running MMEngine's ``launcher='pytorch'`` under torchrun on a machine without CUDA.

Two obstacles, both in MMEngine's Runner, neither in the model.

MMEngine's ``init_dist`` calls ``torch.cuda.set_device`` before creating the process group,
which raises on a CPU-only torch. When a process group already exists, the Runner skips
``init_dist``. So, when this package is imported (``custom_imports`` imports it while the
config is read, before the Runner exists) in a torchrun worker on a machine without CUDA,
it creates the gloo process group itself. On a machine with CUDA it does nothing.
"""
import atexit
import os

import torch
import torch.distributed as dist
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import MODEL_WRAPPERS

TORCHRUN_VARIABLES = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')


def init_cpu_process_group_if_needed() -> bool:
    """Creates the gloo group for a CPU torchrun worker; returns whether it did."""
    if torch.cuda.is_available() or not dist.is_available() or dist.is_initialized():
        return False
    if not all(name in os.environ for name in TORCHRUN_VARIABLES):
        return False
    dist.init_process_group(backend='gloo')
    # Gloo ranks that exit without destroying the group sometimes abort with
    # "terminate called without an active exception".
    atexit.register(_destroy_process_group)
    print_log(f'mmdet3d_ddp_guard: no CUDA here; created the gloo process group for rank '
              f'{dist.get_rank()} of {dist.get_world_size()} so that MMEngine\'s '
              "launcher='pytorch' skips its CUDA-only init_dist.", logger='current')
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
