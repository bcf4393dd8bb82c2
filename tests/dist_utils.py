"""Runs a function on N real gloo ranks in fresh processes, with a hard timeout.

A hang (the failure mode of DDP with rank-dependent unused parameters) fails the test with
the ranks' last output instead of blocking CI.

The ranks are forked from a multiprocessing fork server that has imported torch, MMEngine,
MMDetection3D and this package once for the whole session. Spawned ranks would each import
them again: seconds per rank on a quiet machine, over a minute on a loaded 2-core CI machine,
and the suite starts a few hundred ranks. The fork server has run no torch operation, so its
children start with no thread pool or process group to inherit; they take the test's
environment variables with their arguments, since a fork server keeps those of its own start.

On a GPU machine the same tests run on CUDA: ``DDP_GUARD_TEST_BACKEND=nccl`` and
``DDP_GUARD_TEST_WORLD_SIZE=1`` select NCCL at world size 1 (default: gloo, 2 ranks, which
share the one GPU when there is one).
"""
import inspect
import io
import os
import queue as queue_module
import sys
import traceback
from typing import Any, Callable, List

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from mmdet3d_ddp_guard.launch import free_port
from tests.timeouts import scaled


# Imported once in the fork server. mmdet3d's models and datasets join them only when the
# session has imported mmdet3d itself (a test collected that needs it): the fork server
# survives only an ImportError, and mmdet/mmdet3d refuse an mmcv they do not accept with an
# AssertionError.
PRELOADED = ['torch', 'torch.distributed', 'torch.nn.parallel', 'mmengine.runner',
             'mmdet3d_ddp_guard', 'tests.scenarios']
PRELOADED_WITH_MMDET3D = ['mmdet3d.models', 'mmdet3d.datasets']


def _worker(rank: int, world_size: int, port: int, fn: Callable, args: tuple, kwargs: dict,
            queue, environment: dict) -> None:
    os.environ.clear()
    os.environ.update(environment)
    # Ranks beyond the GPU count share GPUs; MMEngine's logger indexes the visible GPUs
    # with LOCAL_RANK, so it must name a GPU that exists.
    gpus = torch.cuda.device_count()
    local_rank = rank % gpus if gpus else rank
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size))
    try:
        backend = os.environ.get('DDP_GUARD_TEST_BACKEND', 'gloo')
        dist.init_process_group(backend, rank=rank, world_size=world_size)
        result = fn(rank, world_size, *args, **kwargs)
        # Bytes, not tensors: tensors travel through shared memory that dies with us.
        buffer = io.BytesIO()
        torch.save(result, buffer)
        queue.put((rank, 'ok', buffer.getvalue()))
    except BaseException:  # noqa: B902 - every failure must reach the parent test
        queue.put((rank, 'error', traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


#: torch.load's arguments for files the tests wrote themselves: torch >= 2.6 defaults to
#: weights_only=True, and torch < 1.13 has no such argument.
TRUSTED_LOAD = (dict(weights_only=False)
                if 'weights_only' in inspect.signature(torch.load).parameters else {})


class DistributedRunError(AssertionError):
    pass


def run_distributed(fn: Callable, *args, world_size: int = 2, timeout: float = 240,
                    **kwargs) -> List[Any]:
    """``fn(rank, world_size, *args, **kwargs)`` on every rank; returns the results by rank.

    Raises DistributedRunError with every failing rank's traceback when a rank raised, and
    when the ranks did not all finish within ``timeout`` seconds (a hang; written for a quiet
    machine and scaled to this one, tests/timeouts.py).
    """
    timeout = scaled(timeout)
    world_size = int(os.environ.get('DDP_GUARD_TEST_WORLD_SIZE', world_size))
    context = mp.get_context('forkserver')
    context.set_forkserver_preload(
        PRELOADED + (PRELOADED_WITH_MMDET3D if 'mmdet3d' in sys.modules else []))
    queue = context.Queue()
    port = free_port()
    processes = [context.Process(target=_worker, args=(rank, world_size, port, fn, args, kwargs,
                                                       queue, dict(os.environ)))
                 for rank in range(world_size)]
    for process in processes:
        process.start()
    results, errors = {}, {}
    try:
        for _ in range(world_size):
            rank, status, payload = queue.get(timeout=timeout)
            (results if status == 'ok' else errors)[rank] = payload
            if errors:
                break
    except queue_module.Empty:
        errors['timeout'] = (f'not all of {world_size} ranks finished within {timeout} s; '
                             f'finished: {sorted(results)}')
    finally:
        for process in processes:
            process.join(timeout=5 if errors else 30)
            if process.is_alive():
                process.kill()
                process.join()
    if errors:
        raise DistributedRunError('\n'.join(f'--- rank {rank} ---\n{text}'
                                            for rank, text in errors.items()))
    return [torch.load(io.BytesIO(results[rank]), **TRUSTED_LOAD) for rank in range(world_size)]
