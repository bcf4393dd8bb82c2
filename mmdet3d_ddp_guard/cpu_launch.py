"""Running MMEngine's ``launcher='pytorch'`` under torchrun on a machine without CUDA.

Two obstacles, both in MMEngine's Runner, neither in the model:

- ``mmengine.dist.init_dist`` calls ``torch.cuda.set_device`` before it creates the process
  group, which raises on a CPU-only torch. :func:`allow_cpu_init_dist` (called when this
  package is imported, i.e. by ``custom_imports`` while the config is read, before the
  Runner exists) makes that step create a gloo group instead when there is no CUDA, and
  leaves it untouched otherwise.
- ``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to every DDP subclass, which DDP
  refuses for a CPU module: see :func:`drop_device_ids_for_cpu_module`.

A gloo rank must also not abort on its way out: see :func:`_leave_gloo_cleanly`, installed
by :func:`leave_gloo_cleanly_at_exit` for every gloo group GuardedDDP trains on, whoever
created it (this package's launch path, or the user's own ``dist.init_process_group``).
"""
import atexit
import functools
import os
import time
from typing import List

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
        leave_gloo_cleanly_at_exit()
        print_log(f'mmdet3d_ddp_guard: no CUDA here; rank {dist.get_rank()} of '
                  f'{dist.get_world_size()} uses a gloo process group (the config asked '
                  f'for {backend!r}).', logger='current')

    init_dist_pytorch.ddp_guard_cpu_aware = True
    mmengine_dist._init_dist_pytorch = init_dist_pytorch
    return True


GLOO_WORKER_THREAD_NAME = 'pt_gloo_runloop'


@functools.lru_cache(maxsize=None)
def leave_gloo_cleanly_at_exit() -> None:
    """Registers :func:`_leave_gloo_cleanly` to run at exit, once per process."""
    atexit.register(_leave_gloo_cleanly)


def _leave_gloo_cleanly(timeout: float = 2.0) -> None:
    """Destroys the group and waits, at most ``timeout`` seconds, until gloo's worker threads
    are idle, so that a rank that trained does not abort at exit.

    Why (torch 2.13, pytorch/pytorch#190489): every collective issued inside a backward (DDP's
    bucket all-reduces) captures the thread-local state, which holds a Python object that
    ``torch.autograd`` stashes for the backward. The gloo worker thread that ran it often
    holds the last reference; when the interpreter is already finalizing as it lets go, the
    thread needs the GIL to release the Python object, Python ends the thread, and C++ calls
    ``std::terminate``: "terminate called without an active exception", SIGABRT, and torchrun
    reports a failed run after every iteration finished (on 4 gloo ranks sharing 2 cores: 6
    of 40 runs of the toy detector, 12 of 15 runs of a bare DDP script; none of 50 and 15
    with this wait). ``destroy_process_group`` does not help by itself: gloo's
    ``shutdown`` does nothing and DDP's reducer keeps the group alive. Atexit callbacks run
    before finalization begins, so waiting here, with the GIL free, lets the threads drop the
    work while that is still safe.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
    deadline = time.monotonic() + timeout
    asleep_in_a_row = 0
    # No collective follows training, so a worker that stays asleep waits for work that will
    # not come. Asleep once is not enough: a worker may be waiting for the GIL, to release
    # the Python object; sleeping hands the GIL over (and Python forces the switch while this
    # loop runs), so three asleep polls 10 ms apart mean it is done.
    while asleep_in_a_row < 3 and time.monotonic() < deadline:
        asleep = all(state in ('S', 'D') for state in gloo_worker_states())
        asleep_in_a_row = asleep_in_a_row + 1 if asleep else 0
        time.sleep(0.01)


def gloo_worker_states() -> List[str]:
    """The Linux task states ('R' running or runnable, 'S' asleep, ...) of this process's gloo
    worker threads, found by the name torch gives them; empty where ``/proc`` is not there."""
    try:
        tasks = os.listdir('/proc/self/task')
    except OSError:
        return []
    states = []
    for task in tasks:
        try:
            with open(f'/proc/self/task/{task}/stat') as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        # "tid (name) state ...": the name may hold spaces and parentheses.
        head, _, tail = stat.rpartition(')')
        if head.partition('(')[2] == GLOO_WORKER_THREAD_NAME:
            states.append(tail.split()[0])
    return states


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
