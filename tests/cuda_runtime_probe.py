"""Makes a CPU-only process look like a GPU machine's, and records every call that would
initialise the CUDA runtime there, with the stack that made it
(``tests/test_harness_cuda_safe.py`` imports it first in the harness's fork server).

What a GPU machine has, imitated: torch built with CUDA (``torch._C`` has the CUDA
runtime's entry points) and NVML answering one device. The entry points are recorders:
``_cuda_getDeviceCount`` (what ``torch.cuda.is_available()`` asks without NVML; torch
marks the process's future children unable to use CUDA when it is called) and
``_cuda_init`` (the lazy initialisation that any CUDA tensor, ``current_device()`` or
``get_device_properties()`` starts).
"""
import traceback
from typing import List

import torch

#: One entry per call: what was called, then the stack that called it.
calls: List[str] = []


def _recorder(name: str, answer):
    def record(*args, **kwargs):
        calls.append(f'{name}, called from:\n' + ''.join(traceback.format_stack()[:-1]))
        return answer
    return record


torch._C._cuda_getDeviceCount = _recorder('torch._C._cuda_getDeviceCount', 1)
torch._C._cuda_init = _recorder('torch._C._cuda_init', None)
torch.cuda._device_count_nvml = lambda: 1


def recorded_calls(rank: int, world_size: int) -> List[str]:
    """What the fork server recorded before it forked this rank (``run_distributed``'s
    function: the rank inherits the fork server's memory)."""
    return list(calls)
