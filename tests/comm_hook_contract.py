"""A user's DDP comm hook on a guarded wrapper, trained beside the framework's own wrapper
with DDP's graph search (``find_unused_parameters=True``) and the same hook with a fresh
state, on the same ranks: torch's hooks (``allreduce_hook``, ``fp16_compress_hook``,
``powerSGD_hook``, ``batched_powerSGD_hook``), DDP's built-in C++ ones and a user's own,
registered before the first step or after it, with ``no_sync`` accumulation, in strict mode
and with ``static_graph``. Each run returns every rank's weights, buffers, optimizer state,
the hook's own state (PowerSGD's iteration, error feedback, P and Q) and, under the guard,
which parameters each rank left unused in each iteration; tests/test_comm_hooks.py compares
them bit for bit.

Two things of DDP's own shape the runs:

- **The bucket layout.** DDP's graph search keeps the buckets it built, parameters in their
  registration order; its fast path, which the guard runs, rebuilds them after the first
  iteration in the order the gradients became ready. PowerSGD draws each compressed tensor's
  first Q in the bucket's order and keeps its state per bucket, so the two lay out alike,
  and PowerSGD trains alike, only where the ready order is the registration order:
  :class:`HookNet` registers ContractNet's layers in the reverse of the order its forward
  uses them. :func:`power_sgd_under_either_layout` measures what the layout does without
  the guard.
- **PowerSGD on gloo under the graph search.** The hook issues its P and Q all-reduces from
  its futures' callbacks, which gloo runs on its own thread, while DDP's graph search issues
  its used-map all-reduce from the training thread once the last bucket is launched: the
  ranks issue them in different orders and gloo aborts the process ("Received data size
  doesn't match expected size", 3 runs of 3 on torch 2.13). The graph search's runs of the
  PowerSGD hooks therefore wait for the hook's future inside the hook
  (:func:`finished_first`), which fixes the order and changes no arithmetic. The guard issues
  its one collective of its own (the counts) before the hook issues any.
"""
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple, Union

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from mmdet3d_ddp_guard.environment.ddp_compat import bucket_buffer, hook_result
from mmdet3d_ddp_guard.environment.version_numbers import major_minor
from mmdet3d_ddp_guard.guard.unused_counts_comm_hook import python_twin
from tests.ddp_contract import (ContractModel, ContractNet, contract_batch, dense_copy,
                                load_adapter, sgd_param_groups)
from tests.dist_utils import collect_earlier_runs

ITERATIONS = 6
#: The issue's PowerSGD: compression from the third iteration (the buckets rebuilt by then).
POWER_SGD = dict(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
#: DDP's two errors for a second hook, by the call made second.
SECOND_HOOK_ERRORS = ('RuntimeError: register_comm_hook or register_builtin_comm_hook can '
                      'only be called once.',
                      'RuntimeError: register_builtin_comm_hook or register_comm_hook can '
                      'only be called once.')


class HookNet(ContractNet):
    """ContractNet's layers registered last-used first, so that the graph search's bucket
    (registration order) and the fast path's rebuilt one (ready order) lay out alike; its
    linear layers have no bias, whose gradient is ready before the weight's, registered
    first."""

    def __init__(self):
        nn.Module.__init__(self)
        self.branch = nn.Linear(6, 1, bias=False)
        self.head = nn.Linear(6, 1, bias=False)
        self.shared = nn.Linear(6, 6, bias=False)
        self.norm = nn.BatchNorm1d(6)
        self.trunk = nn.Linear(6, 6, bias=False)
        self.embedding = nn.Embedding(8, 6)


def scaled_all_reduce(state, bucket):
    """A user's own hook: the bucket scaled by ``state['scale'] / world_size``, summed."""
    buffer = bucket_buffer(bucket)
    buffer.mul_(state['scale'] / dist.get_world_size())
    return dist.all_reduce(buffer, async_op=True).get_future().then(
        lambda fut: hook_result(fut.value()[0]))


def finished_first(hook: Callable) -> Callable:
    """``hook`` whose collectives have all finished when it returns (see the module's
    docstring: PowerSGD under the graph search on gloo)."""
    def waited(state, bucket):
        future = hook(state, bucket)
        future.wait()
        return future
    return waited


#: torch 1.9's built-in C++ hooks read their gloo work's result before it completes: the
#: first backward raises "Work needs to be completed before calling result()", crashes or
#: hangs, at random (measured on 1.9.1, under both frameworks' wrappers, without the guard).
BUILTIN_HOOKS_BROKEN_ON_GLOO = major_minor(torch.__version__) < (1, 10)


def _builtin(name: str):
    return getattr(dist.BuiltinCommHookType, name)


#: name: (state factory, hook); a hook given as a str is DDP's built-in C++ hook of that type.
HOOKS: Dict[str, Tuple[Callable, object]] = {
    'allreduce_hook': (lambda: None, default_hooks.allreduce_hook),
    'fp16_compress_hook': (lambda: None, default_hooks.fp16_compress_hook),
    'powerSGD_hook': (lambda: powerSGD_hook.PowerSGDState(**POWER_SGD),
                      powerSGD_hook.powerSGD_hook),
    'user_hook': (lambda: dict(scale=0.5), scaled_all_reduce),
    'builtin_ALLREDUCE': (lambda: None, 'ALLREDUCE'),
    'builtin_FP16_COMPRESS': (lambda: None, 'FP16_COMPRESS'),
    # Last: it fails, on every wrapper, inside a backward (torch 2.13 on gloo).
    'batched_powerSGD_hook': (lambda: powerSGD_hook.PowerSGDState(**POWER_SGD),
                              powerSGD_hook.batched_powerSGD_hook),
}


@dataclass
class Run:
    """One training: ``hook`` registered at iteration ``register_at`` (0: before the first
    step), ``accumulate`` micro-steps per optimizer step, the guard's ``mode``."""
    hook: str
    register_at: int = 0
    accumulate: int = 1
    mode: Union[str, bool] = 'auto'
    static_graph: bool = False

    def skips_branch(self, rank: int, iteration: int) -> bool:
        """Rank 1 leaves the branch unused in odd iterations (never under a static graph)."""
        return not self.static_graph and rank == 1 and iteration % 2 == 1


def register(ddp, hook_name: str, graph_search: bool, trains: bool = True):
    """Registers ``HOOKS[hook_name]`` with a fresh state; returns the state. ``trains``:
    the wrapper will run the hook (not only be asked to take it)."""
    make_state, hook = HOOKS[hook_name]
    state = make_state()
    if isinstance(hook, str) and graph_search and trains and BUILTIN_HOOKS_BROKEN_ON_GLOO:
        # The framework's wrapper trains with the C++ hook's Python twin instead: the
        # independent computation the guard is held to there.
        hook = python_twin(_builtin(hook))
    if isinstance(hook, str):
        ddp._register_builtin_comm_hook(_builtin(hook))
        return state
    if graph_search and 'powerSGD' in hook_name:
        hook = finished_first(hook)
    ddp.register_comm_hook(state, hook)
    return state


def hook_state(state) -> Optional[Dict]:
    if isinstance(state, powerSGD_hook.PowerSGDState):
        return dict(iter=state.iter, error=dense_copy(state.error_dict),
                    p=dense_copy(state.p_memory_dict), q=dense_copy(state.q_memory_dict))
    return dense_copy(state)


def train_with_hook(adapter, run: Run, guarded: bool) -> Dict:
    """Trains :class:`HookNet` under ``adapter``'s guarded wrapper or its framework's own
    with the graph search, the hook registered as ``run`` says; returns what the test
    compares (an error as its text and the iteration that raised it)."""
    collect_earlier_runs()
    torch.manual_seed(0)
    model = adapter.model(HookNet())
    kwargs = dict(static_graph=True) if run.static_graph else {}
    ddp = adapter.wrap(model, guarded, run.mode if guarded else not run.static_graph,
                       **kwargs)
    if guarded:
        ddp.keep_resolved_for_report()
    rank = dist.get_rank()
    optimizer = adapter.optimizer(ddp, run.accumulate, 0.9)
    state = None
    result: Dict = {}
    try:
        for iteration in range(ITERATIONS):
            if iteration == run.register_at:
                state = register(ddp, run.hook, graph_search=not guarded)
            batch = contract_batch(iteration, rank)
            batch['use_branch'] = not run.skips_branch(rank, iteration)
            adapter.step(ddp, optimizer, batch, iteration, run.accumulate)
    except Exception as error:  # noqa: B902 - the test reads it
        result.update(error=f'{type(error).__name__}: {error}'.splitlines()[0],
                      iteration=iteration)
    else:
        result.update(weights=dense_copy(dict(ddp.module.named_parameters())),
                      buffers=dense_copy(dict(ddp.module.named_buffers())),
                      optimizer=dense_copy(adapter.optimizer_state(optimizer)),
                      hook_state=hook_state(state))
        if guarded:
            result['unused'] = _unused_per_iteration(ddp)
    if getattr(ddp, 'stall_watchdog', None) is not None:
        ddp.stall_watchdog.stop()
    return result


def _unused_per_iteration(ddp):
    """Every resolved iteration's unused parameters, by rank, by name."""
    names = {id(param): name for name, param in ddp.module.named_parameters()}
    params = ddp.usage_record.table.params
    resolved, _ = ddp.resolved_for_report(exchange=False)
    return [(item.usage.iteration,
             [sorted(names[id(params[i])] for i in ids) for ids in item.usage.per_rank_unused])
            for item in resolved]


def second_registrations(adapter, guarded: bool, mode) -> Dict[str, str]:
    """What a second hook raises, after a Python hook and after a built-in one."""
    errors = {}
    for first, second in (('allreduce_hook', 'fp16_compress_hook'),
                          ('builtin_FP16_COMPRESS', 'allreduce_hook'),
                          ('allreduce_hook', 'builtin_ALLREDUCE')):
        collect_earlier_runs()
        ddp = adapter.wrap(adapter.model(HookNet()), guarded,
                           mode if guarded else True)
        register(ddp, first, graph_search=not guarded, trains=False)
        try:
            register(ddp, second, graph_search=not guarded, trains=False)
            errors[f'{first} then {second}'] = 'nothing raised'
        except Exception as error:  # noqa: B902 - the test reads it
            errors[f'{first} then {second}'] = f'{type(error).__name__}: {error}'
        if getattr(ddp, 'stall_watchdog', None) is not None:
            ddp.stall_watchdog.stop()
    return errors


#: The runs compared, by name.
RUNS = dict({name: Run(name) for name in HOOKS},
            registered_after_the_first_step=Run('powerSGD_hook', register_at=1),
            no_sync_accumulation=Run('user_hook', accumulate=2),
            strict_mode=Run('allreduce_hook', mode=False),
            static_graph=Run('fp16_compress_hook', static_graph=True))


def train_every_run(rank: int, world_size: int, adapter_name: str, runs) -> Dict:
    """Every run of ``runs`` under both wrappers, then the second registrations, in one
    launch."""
    adapter = load_adapter(adapter_name)
    results = {(name, guarded): train_with_hook(adapter, RUNS[name], guarded)
               for name in runs for guarded in (False, True)}
    results['second'] = {guarded: second_registrations(adapter, guarded, mode)
                         for guarded, mode in ((False, None), (True, 'auto'))}
    results['second_strict'] = second_registrations(adapter, True, False)
    return results


def power_sgd_under_either_layout(rank: int, world_size: int) -> Dict:
    """torch's DDP alone, fast path against graph search, PowerSGD on both, every parameter
    used on every rank: whether the weights agree with ContractNet's layer order and with
    HookNet's (the fast path's buckets follow the ready order; the graph search's, the
    registration order)."""
    agree = {}
    for net in (ContractNet, HookNet):
        weights = []
        for graph_search in (False, True):
            collect_earlier_runs()
            torch.manual_seed(0)
            ddp = DistributedDataParallel(ContractModel(net()),
                                          find_unused_parameters=graph_search)
            hook = powerSGD_hook.powerSGD_hook
            ddp.register_comm_hook(powerSGD_hook.PowerSGDState(**POWER_SGD),
                                   finished_first(hook) if graph_search else hook)
            optimizer = torch.optim.SGD(sgd_param_groups(ddp, 0.9), lr=0.05)
            for iteration in range(ITERATIONS):
                ddp(**contract_batch(iteration, rank)).backward()
                optimizer.step()
                optimizer.zero_grad()
            weights.append(dense_copy(dict(ddp.module.named_parameters())))
        agree[net.__name__] = sorted(name for name in weights[0]
                                     if torch.equal(weights[0][name], weights[1][name]))
    return agree
