"""What DDP on the CPU needs, whatever the framework: a gloo rank that leaves cleanly at
exit, and no ``device_ids`` for a CPU module (DDP refuses them, and the frameworks' launch
paths pass them to every wrapper)."""
import atexit
import functools
import os
import time
from typing import List, Optional

import torch.distributed as dist

GLOO_WORKER_THREAD_NAME = 'pt_gloo_runloop'


@functools.lru_cache(maxsize=None)
def leave_gloo_cleanly_at_exit() -> None:
    """Registers :func:`leave_gloo_cleanly` to run at exit, once per process."""
    atexit.register(leave_gloo_cleanly)


def leave_gloo_cleanly(timeout: float = 2.0) -> None:
    """Destroys the group and waits, at most ``timeout`` seconds, until gloo's worker threads
    are idle (they have let go of their last collective), so that a rank that trained neither
    aborts at exit nor deadlocks when its DDP wrapper is freed. At exit (registered by
    :func:`leave_gloo_cleanly_at_exit`), and in place of ``destroy_process_group()`` at the
    end of a script whose wrapper outlives its group (the test and benchmark scripts). Where
    torch leaves gloo's threads unnamed (before 2.2), or the group is not gloo, it only
    destroys the group.

    Why at exit (torch 2.13, pytorch/pytorch#190489): every collective issued inside a
    backward (DDP's bucket all-reduces) captures the thread-local state, which holds a Python
    object that ``torch.autograd`` stashes for the backward. The gloo worker thread that ran
    it often holds the last reference; when the interpreter is already finalizing as it lets
    go, the thread needs the GIL to release the Python object, Python ends the thread, and
    C++ calls ``std::terminate``: "terminate called without an active exception", SIGABRT,
    and torchrun reports a failed run after every iteration finished (on 4 gloo ranks sharing
    2 cores: 6 of 40 runs of the toy detector, 12 of 15 runs of a bare DDP script; none of 50
    and 15 with this wait). ``destroy_process_group`` does not help by itself: gloo's
    ``shutdown`` does nothing and DDP's reducer keeps the group alive. Atexit callbacks run
    before finalization begins, so waiting here, with the GIL free, lets the threads drop the
    work while that is still safe.

    Why at a script's end: a wrapper freed after the group (as its function returns) holds
    the group's last reference; its reducer destroys the group holding the GIL and joins
    gloo's worker threads, while a worker still letting go of the last collective waits for
    the GIL (gdb showed both on torch 2.13: a hang of ``tests/pytorch/torchrun_loop.py`` in a
    fresh CI run). Idle workers need nothing.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
    deadline = time.monotonic() + timeout
    asleep_in_a_row = 0
    # No collective follows, so a worker that stays asleep waits for work that will not
    # come. Asleep once is not enough: a worker may be waiting for the GIL, to release the
    # Python object; sleeping hands the GIL over (and Python forces the switch while this
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


def init_gloo_group(asked_backend: str, **kwargs) -> str:
    """The default group, on gloo where the config asked for ``asked_backend`` (NCCL, which
    needs CUDA), leaving cleanly at exit; returns what to log."""
    dist.init_process_group(backend='gloo', **kwargs)
    leave_gloo_cleanly_at_exit()
    return (f'mmdet3d_ddp_guard: no CUDA here; rank {dist.get_rank()} of '
            f'{dist.get_world_size()} uses a gloo process group (the config asked for '
            f'{asked_backend!r}).')


def drop_device_ids_for_cpu_module(module, kwargs: dict) -> Optional[str]:
    """Removes ``device_ids`` (and ``output_device``) from DDP's ``kwargs``, in place, when
    the module is on the CPU; returns what to log then, None when nothing was removed."""
    if kwargs.get('device_ids') is None:
        return None
    if not all(p.device.type == 'cpu' for p in module.parameters()):
        return None
    device_ids = kwargs['device_ids']
    kwargs['device_ids'] = None
    kwargs.pop('output_device', None)
    return (f'{type(module).__name__} is on the CPU; ignoring device_ids={device_ids} (DDP '
            'accepts them only for GPU modules).')
