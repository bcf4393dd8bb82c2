"""Runs a function on N real gloo ranks in fresh processes, with a hard timeout.

A hang (the failure mode of DDP with rank-dependent unused parameters) fails the test with
the ranks' last output instead of blocking CI.

The ranks are forked from a multiprocessing fork server that has imported torch, MMEngine,
MMDetection3D and this package once for the whole session. Spawned ranks would each import
them again: seconds per rank on a quiet machine, over a minute on a loaded 2-core CI machine,
and the suite starts a few hundred ranks. The fork server has run no torch operation, so its
children start with no thread pool or process group to inherit; they take the test's
environment variables with their arguments, since a fork server keeps those of its own start.
Nor has it initialised CUDA (:mod:`tests.fork_server_start`, imported first), so that its
children can use the GPU (``tests/test_harness_cuda_safe.py`` holds it on a CPU machine).

On a GPU machine the same tests run on CUDA: ``DDP_GUARD_TEST_BACKEND=nccl`` and
``DDP_GUARD_TEST_WORLD_SIZE=1`` select NCCL at world size 1 (default: gloo, 2 ranks, which
share the one GPU when there is one).
"""
import faulthandler
import gc
import inspect
import io
import os
import queue as queue_module
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from demo.launch import free_port, process_tree
from tests.timeouts import scaled


# Imported once in the fork server. mmdet3d's models and datasets join them only when the
# session has imported mmdet3d itself (a test collected that needs it): the fork server
# survives only an ImportError, and mmdet/mmdet3d refuse an mmcv they do not accept with an
# AssertionError.
#: The fork server's first import: it keeps the CUDA runtime untouched by the imports after it.
FORK_SERVER_START = 'tests.fork_server_start'
PRELOADED = ['torch', 'torch.distributed', 'torch.nn.parallel', 'mmengine.runner',
             'mmdet3d_ddp_guard', 'tests.scenarios']
PRELOADED_WITH_MMDET3D = ['mmdet3d.models', 'mmdet3d.datasets']


def _join_group(rank: int, world_size: int, port: int, environment: dict,
                backend: str) -> None:
    os.environ.clear()
    os.environ.update(environment)
    # Ranks beyond the GPU count share GPUs; MMEngine's logger indexes the visible GPUs
    # with LOCAL_RANK, so it must name a GPU that exists.
    gpus = torch.cuda.device_count()
    if gpus and torch.cuda._is_in_bad_fork():
        raise RuntimeError(
            'this rank cannot use CUDA: its fork server initialised the CUDA runtime '
            f'before forking it, although {FORK_SERVER_START} asked torch to use NVML '
            'instead (is libnvidia-ml.so.1 missing?); tests/test_harness_cuda_safe.py '
            'names the import that does it')
    local_rank = rank % gpus if gpus else rank
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size))
    dist.init_process_group(backend, rank=rank, world_size=world_size)


def fork_server_preload() -> List[str]:
    """What the fork server imports, in order, before it forks the first rank."""
    return ([FORK_SERVER_START] + PRELOADED
            + (PRELOADED_WITH_MMDET3D if 'mmdet3d' in sys.modules else []))


def _forkserver():
    context = mp.get_context('forkserver')
    context.set_forkserver_preload(fork_server_preload())
    return context


def _worker(rank: int, world_size: int, port: int, fn: Callable, args: tuple, kwargs: dict,
            queue, environment: dict, stacks_dir: str) -> None:
    # Where a hang is: the parent asks for every thread's stack before it kills the rank.
    stacks = open(os.path.join(stacks_dir, f'{rank}.txt'), 'w')
    faulthandler.register(STACKS_SIGNAL, file=stacks, all_threads=True)
    try:
        _join_group(rank, world_size, port, environment,
                    environment.get('DDP_GUARD_TEST_BACKEND', 'gloo'))
        result = fn(rank, world_size, *args, **kwargs)
        # Bytes, not tensors: tensors travel through shared memory that dies with us.
        buffer = io.BytesIO()
        torch.save(result, buffer)
        queue.put((rank, 'ok', buffer.getvalue()))
    except BaseException:  # noqa: B902 - every failure must reach the parent test
        queue.put((rank, 'error', traceback.format_exc()))
    finally:
        # The result leaves before the group is destroyed, which may never return: torch 2.0
        # to 2.7 destroy a gloo group holding the GIL while they wait for gloo's worker
        # threads, and a worker that still holds the last reference to a collective's tensor
        # waits for the GIL to let it go (pytorch/pytorch#154976, fixed in 2.8; gdb showed
        # both, once in about 60 launches on torch 2.1.2 here). The queue's feeder thread,
        # which sends the result, then never ran either; the parent kills such a rank once
        # every result is in.
        queue.close()
        queue.join_thread()
        if dist.is_initialized():
            dist.destroy_process_group()


#: torch.load's arguments for files the tests wrote themselves: torch >= 2.6 defaults to
#: weights_only=True, and torch < 1.13 has no such argument.
TRUSTED_LOAD = (dict(weights_only=False)
                if 'weights_only' in inspect.signature(torch.load).parameters else {})


def collect_earlier_runs() -> None:
    """Collects what the earlier trainings of this process left (their wrappers, and the
    stall guard each holds), so that the next one starts clean. A full collection walks every
    object the imports made (about 260,000 with MMEngine: 140 ms, which the contract tests
    paid before each of their hundreds of trainings); so the first call freezes what exists
    then (the imports, the process group: nothing a training leaves), and later calls walk
    only what came after."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
    gc.collect()


#: The signal on which a rank writes every thread's Python stack (faulthandler).
STACKS_SIGNAL = signal.SIGUSR1


def _ask_for_stacks(processes) -> List[int]:
    """Has every rank still running write every thread's Python stack (where a hang is, which
    a timeout alone does not say) where its worker registered ``STACKS_SIGNAL``; returns those
    ranks."""
    left = [rank for rank, process in enumerate(processes) if process.is_alive()]
    _signal_each([processes[rank].pid for rank in left], STACKS_SIGNAL)
    time.sleep(2)  # faulthandler writes from its signal handler at once
    return left


def _stacks_of_the_ranks_left(processes, finished, stacks_dir: str) -> dict:
    """Every thread's Python stack in each rank that has not finished, by rank."""
    stacks = {}
    for rank in _ask_for_stacks(processes):
        if rank in finished:
            continue
        with open(os.path.join(stacks_dir, f'{rank}.txt')) as file:
            stacks[rank] = 'not finished; its threads:\n' + (file.read() or '(nothing written)')
    return stacks


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
    context = _forkserver()
    queue = context.Queue()
    port = free_port()
    stacks_dir = tempfile.mkdtemp(prefix='ddp_guard_stacks_')
    processes = [context.Process(target=_worker, args=(rank, world_size, port, fn, args, kwargs,
                                                       queue, dict(os.environ), stacks_dir))
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
        errors.update(_stacks_of_the_ranks_left(processes, results, stacks_dir))
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        shutil.rmtree(stacks_dir, ignore_errors=True)
    if errors:
        raise DistributedRunError('\n'.join(f'--- rank {rank} ---\n{text}'
                                            for rank, text in errors.items()))
    return [torch.load(io.BytesIO(results[rank]), **TRUSTED_LOAD) for rank in range(world_size)]


@dataclass
class RankExit:
    """How one rank of :func:`run_until_exit` ended."""
    exitcode: int
    output: str
    ended_at: float  # time.time() when the parent saw the process gone


def _exiting_worker(rank: int, world_size: int, port: int, fn: Callable, args: tuple,
                    kwargs: dict, output_path: str, environment: dict) -> None:
    # The rank's stdout and stderr, C++ included, go to its file: a rank that the stall
    # guard ends leaves through os._exit, with no result to send.
    with open(output_path, 'wb', buffering=0) as output:
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
    faulthandler.register(STACKS_SIGNAL, all_threads=True)  # into the file: see run_until_exit
    # gloo: a collective there blocks the host until it completes, as the guard expects.
    _join_group(rank, world_size, port, environment, 'gloo')
    try:
        fn(rank, world_size, *args, **kwargs)
    except BaseException:  # noqa: B902 - the traceback is what the test reads
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)


def run_until_exit(fn: Callable, *args, world_size: int = 2, timeout: float = 120,
                   **kwargs) -> List[RankExit]:
    """``fn(rank, world_size, *args, **kwargs)`` on every rank, for runs that may end by a
    rank's own exit (the stall guard's): every rank's exit code, output and end time.

    Raises DistributedRunError with the ranks' output, and the stacks of those still running,
    when they did not all end within ``timeout`` seconds (written for a quiet machine and
    scaled to this one).
    """
    timeout = scaled(timeout)
    context = _forkserver()
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        paths = [os.path.join(folder, f'rank{rank}.txt') for rank in range(world_size)]
        processes = [context.Process(target=_exiting_worker,
                                     args=(rank, world_size, port, fn, args, kwargs,
                                           paths[rank], dict(os.environ)))
                     for rank in range(world_size)]
        for process in processes:
            process.start()
        ended_at = [None] * world_size
        deadline = time.monotonic() + timeout
        while None in ended_at and time.monotonic() < deadline:
            for rank, process in enumerate(processes):
                if ended_at[rank] is None and process.exitcode is not None:
                    ended_at[rank] = time.time()
            time.sleep(0.05)
        if None in ended_at:
            _ask_for_stacks(processes)  # at the end of their output
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join()
        outputs = []
        for path in paths:
            with open(path, errors='replace') as output:
                outputs.append(output.read())
    if None in ended_at:
        raise DistributedRunError(
            f'not all of {world_size} ranks ended within {timeout} s; ended: '
            f'{[rank for rank, end in enumerate(ended_at) if end is not None]}\n'
            + '\n'.join(f'--- rank {rank} ---\n{text[-3000:]}'
                        for rank, text in enumerate(outputs)))
    return [RankExit(process.exitcode, output, end)
            for process, output, end in zip(processes, outputs, ended_at)]


def run_launcher(command: List[str], timeout: float, env: dict,
                 cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """``command`` (a launcher such as torchrun, which starts its workers in sessions of their
    own) with its output captured, for at most ``timeout`` seconds (written for a quiet machine
    and scaled to this one), from ``cwd``.

    At the timeout, the launcher and every process it started write every Python thread's
    stack into their stderr and end (faulthandler, on SIGABRT; ``PYTHONFAULTHANDLER`` is set
    for them), then are killed; DistributedRunError carries that output: where a hang is, and
    no worker left running after the test.
    """
    timeout = scaled(timeout)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=dict(env, PYTHONFAULTHANDLER='1'), cwd=cwd)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        left = process_tree(process.pid)
        _signal_each(left, signal.SIGABRT)
        time.sleep(2)  # faulthandler writes from its signal handler at once
        _signal_each(left, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise DistributedRunError(
            f'{" ".join(command[:4])} ... did not end within {timeout} s; its output, with '
            f'every Python thread\'s stack of it and its workers:\n{stdout[-3000:]}\n'
            f'{stderr[-12000:]}')
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _signal_each(pids: List[int], signal_number: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal_number)
        except ProcessLookupError:
            pass
