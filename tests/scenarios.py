"""Training scenarios run inside the spawned ranks of the multi-process tests."""
import contextlib
import gc
import re
import threading
import time
from typing import Dict, List, Sequence, Tuple

import torch
import torch.distributed as dist
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import AmpOptimWrapper, OptimWrapper

from mmdet3d_ddp_guard import GuardedDDP, UnusedParametersError
from mmdet3d_ddp_guard.environment.versions import graph_search_accumulates_right, major_minor
from mmdet3d_ddp_guard.guard import accumulate_grad_hooks
from tests.toys import ToyDetector, make_toy_batch

#: ``Optimizer.zero_grad()`` zeroes gradients in place by default before torch 2.0.
GRADS_ZEROED_IN_PLACE = major_minor(torch.__version__) < (2, 0)
#: Measured on torch 1.9.1: DDP's graph search gives a weight whose gradient no rank
#: defined a zero gradient (momentum and weight decay then move it); from torch 1.10 on it
#: leaves ``.grad`` None, as one GPU does. GuardedDDP leaves it None on every torch.
GRAPH_SEARCH_LEAVES_UNDEFINED_GRADS_ALONE = major_minor(torch.__version__) >= (1, 10)
#: Measured on torch 1.9.1: DDP's graph search walks the autograd graph from every output of
#: the forward, so a logged output left out of the loss marks its parameters used, they get
#: no gradient, and the next forward fails ("Expected to have finished reduction"); from
#: torch 1.10 on it trains.
GRAPH_SEARCH_TRAINS_LOGGED_OUTPUTS = major_minor(torch.__version__) >= (1, 10)
#: gloo reduces bfloat16 tensors on torch 2.13 and 2.14; "Invalid scalar type" on 1.9.1,
#: 1.12.1, 1.13.1 and 2.1.2 (tests/test_torch_versions.py checks the gate on each).
GLOO_REDUCES_BFLOAT16 = major_minor(torch.__version__) >= (2, 2)
#: AmpOptimWrapper's loss scaling on the CPU needs torch's CPU GradScaler.
CPU_GRAD_SCALER = hasattr(torch, 'amp') and hasattr(torch.amp, 'GradScaler')


@contextlib.contextmanager
def _amp_allowed_on_cpu():
    """AmpOptimWrapper asserts a GPU at construction; on the CPU its loss scaling path is
    still real with torch's CPU GradScaler, which replaces the disabled CUDA one below."""
    import mmengine.optim.optimizer.amp_optimizer_wrapper as amp_module
    original = amp_module.is_cuda_available
    amp_module.is_cuda_available = lambda: True
    try:
        yield
    finally:
        amp_module.is_cuda_available = original


def compiled_graphs() -> int:
    """Graphs that torch.compile captured in this process (Runner's ``compile=``); 0 on a
    torch without it (< 2.0)."""
    dynamo = getattr(torch, '_dynamo', None)
    return dynamo.utils.counters['stats']['unique_graphs'] if dynamo is not None else 0


def build_optim_wrapper(model, optimizer: str, accumulative_counts: int = 1,
                        amp: bool = False):
    if optimizer == 'sgd':
        optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                weight_decay=1e-3)
    elif optimizer == 'adamw':
        optim = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    else:
        raise ValueError(optimizer)
    if not amp:
        return OptimWrapper(optim, accumulative_counts=accumulative_counts)
    if torch.cuda.is_available():
        return AmpOptimWrapper(optimizer=optim, accumulative_counts=accumulative_counts,
                               dtype='float16')
    with _amp_allowed_on_cpu():
        wrapper = AmpOptimWrapper(optimizer=optim, accumulative_counts=accumulative_counts,
                                  dtype='bfloat16', loss_scale=dict(init_scale=2.0**10))
    wrapper.loss_scaler = torch.amp.GradScaler('cpu', init_scale=2.0**10)
    return wrapper


def wrap_toy(model, wrapper: str, wrapper_kwargs: Dict = None):
    """``model`` under ``wrapper``: 'guarded' (GuardedDDP), 'ddp_find_unused' (DDP's graph
    search) or 'ddp_plain' (DDP's fast path)."""
    kwargs = dict(wrapper_kwargs or {})
    if wrapper == 'guarded':
        return GuardedDDP(model, **kwargs)
    if wrapper == 'ddp_find_unused':
        return MMDistributedDataParallel(model, find_unused_parameters=True, **kwargs)
    if wrapper == 'ddp_plain':
        return MMDistributedDataParallel(model, find_unused_parameters=False, **kwargs)
    raise ValueError(wrapper)


def train_toy(rank: int, world_size: int, wrapper: str, pattern: str, optimizer: str,
              steps: int = 6, accumulative_counts: int = 1, amp: bool = False,
              wrapper_kwargs: Dict = None, dtype: torch.dtype = torch.float32,
              model_kwargs: Dict = None) -> Dict:
    """Trains a ToyDetector and returns its parameters, optimizer state and, for GuardedDDP,
    the per-iteration usage it recorded."""
    torch.manual_seed(0)
    device = torch.device('cuda', 0) if torch.cuda.is_available() else torch.device('cpu')
    model = ToyDetector(pattern, **(model_kwargs or {})).to(device, dtype)
    ddp = wrap_toy(model, wrapper, wrapper_kwargs)
    optim_wrapper = build_optim_wrapper(ddp, optimizer, accumulative_counts, amp)
    usage = []
    if wrapper == 'guarded':
        ddp.keep_resolved_for_report()  # as UnusedParamsHook does
    for iteration in range(steps):
        batch = {k: v.to(dtype) for k, v in make_toy_batch(iteration, rank).items()}
        ddp.train_step(batch, optim_wrapper)
    if wrapper == 'guarded':
        names = ddp.usage_record.table.names
        resolved, stop = ddp.resolved_for_report(exchange=True)
        assert stop is None, stop
        usage = [[sorted(names[i] for i in ids) for ids in last.per_rank_unused]
                 for last, _ in resolved]
    return dict(
        params={name: p.detach().cpu().clone() for name, p in model.named_parameters()},
        compiled_graphs=compiled_graphs(),
        optimizer_state=optim_wrapper.optimizer.state_dict(),
        usage=usage,
        decision=ddp.decision.mode if wrapper == 'guarded' else None,
        expected=[[model.expected_unused(i, r, GRADS_ZEROED_IN_PLACE) for r in range(world_size)]
                  for i in range(steps)])


def train_guarded_and_reference(rank: int, world_size: int, separate_counts: bool = False,
                                reference_model_kwargs: Dict = None, node_hooks: bool = False,
                                **case) -> Dict:
    """The same case under GuardedDDP('auto') and under DDP find_unused_parameters=True;
    ``reference_model_kwargs`` replace the model's options for DDP's run (e.g. a
    checkpointing mode that DDP's graph search can train).

    ``separate_counts``: make the bucket dtype count no rank exactly, so that the counts take
    the path of more ranks than the dtype can count (their own float32 all-reduce).
    ``node_hooks``: record usage from the AccumulateGrad nodes, torch < 2.1's path, also on
    a torch that has tensor hooks.

    Where DDP's graph search is wrong, the case is compared with
    :func:`train_manual_reference` instead: gradient accumulation before torch 2.4
    (pytorch/pytorch#69031); on torch 1.9, a gradient that no rank defines and an output
    logged but left out of the loss.
    """
    if node_hooks:
        accumulate_grad_hooks.POST_ACCUMULATE_GRAD_HOOK = False
    if separate_counts:
        from mmdet3d_ddp_guard.guard import unused_counts_comm_hook
        unused_counts_comm_hook._EXACT_INTEGERS[case.get('dtype', torch.float32)] = 0
    reference_case = dict(case)
    if reference_model_kwargs is not None:
        reference_case['model_kwargs'] = reference_model_kwargs
    guarded = train_toy(rank, world_size, 'guarded', **case)
    if graph_search_is_wrong(**case):
        return dict(guarded=guarded, reference=train_manual_reference(rank, world_size,
                                                                      **reference_case))
    return dict(guarded=guarded,
                reference=train_toy(rank, world_size, 'ddp_find_unused', **reference_case))


def graph_search_is_wrong(pattern: str, accumulative_counts: int = 1, **case) -> bool:
    """Whether DDP's graph search trains this case wrong on the torch at hand."""
    return (accumulative_counts > 1 and not graph_search_accumulates_right(torch.__version__)
            or pattern == 'undefined_grad' and not GRAPH_SEARCH_LEAVES_UNDEFINED_GRADS_ALONE
            or pattern == 'output_logged_not_in_loss'
            and not GRAPH_SEARCH_TRAINS_LOGGED_OUTPUTS)


def train_manual_reference(rank: int, world_size: int, pattern: str, optimizer: str,
                           steps: int = 6, accumulative_counts: int = 1,
                           model_kwargs: Dict = None) -> Dict:
    """What DDP's graph search computes where it is correct, without DDP: each rank
    accumulates its own gradients over the window, then every parameter's gradient is
    all-reduced by hand and averaged, counting zero for the ranks that did not use it; a
    parameter that no rank used in the window keeps its gradient untouched (None). The
    independent reference for gradient accumulation on torch < 2.4."""
    torch.manual_seed(0)
    model = ToyDetector(pattern, **(model_kwargs or {}))
    optim_wrapper = build_optim_wrapper(model, optimizer, accumulative_counts)
    params = list(model.parameters())
    for iteration in range(steps):
        data = model.data_preprocessor(make_toy_batch(iteration, rank), training=True)
        loss, _ = model.parse_losses(model._run_forward(data, mode='loss'))
        optim_wrapper.backward(optim_wrapper.scale_loss(loss))
        if (iteration + 1) % accumulative_counts:
            continue
        for param in params:
            used = torch.tensor([float(param.grad is not None)])
            dist.all_reduce(used)
            if not used.item():
                continue
            grad = param.grad if param.grad is not None else torch.zeros_like(param)
            dist.all_reduce(grad)
            param.grad = grad / world_size
        optim_wrapper.step()
        optim_wrapper.zero_grad()
    return dict(params={name: p.detach().clone() for name, p in model.named_parameters()},
                optimizer_state=optim_wrapper.optimizer.state_dict())


def toy_runner_cfg(work_dir: str, pattern: str, wrapper: Dict = None, max_iters: int = 6,
                   distributed: bool = True, checkpoint_interval: int = 1000,
                   log_interval: int = 1, hook: bool = True, **extra) -> Dict:
    """A complete Runner config for ToyDetector with UnusedParamsHook."""
    cfg = dict(
        model=dict(type='ToyDetector', pattern=pattern),
        work_dir=work_dir,
        experiment_name=f'toy_{pattern}_{abs(hash(work_dir))}',
        train_dataloader=dict(
            batch_size=4, num_workers=0, sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='default_collate'), dataset=dict(type='ToyDataset')),
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=max_iters),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.05, momentum=0.9)),
        custom_hooks=[dict(type='UnusedParamsHook', interval=2)] if hook else [],
        default_hooks=dict(
            logger=dict(type='LoggerHook', interval=log_interval),
            checkpoint=dict(type='CheckpointHook', interval=checkpoint_interval,
                            by_epoch=False)),
        log_processor=dict(by_epoch=False, window_size=log_interval),
        launcher='pytorch' if distributed else 'none',
        env_cfg=dict(dist_cfg=dict(backend='gloo')),
        default_scope='mmengine')
    if wrapper is not None:
        cfg['model_wrapper_cfg'] = wrapper
    cfg.update(extra)
    return cfg


def train_toy_runner(rank: int, world_size: int, work_dir: str, pattern: str,
                     wrapper: Dict = None, flexible: bool = False, **cfg_extra) -> Dict:
    """Trains through a real Runner on this rank; returns what the hook saw and wrote.

    With ``flexible``, through MMEngine's FlexibleRunner, whose DDPStrategy builds
    ``wrapper`` as its ``model_wrapper``.
    """
    import json
    import os.path as osp

    from mmengine.config import Config
    from mmengine.runner import FlexibleRunner, Runner

    from mmdet3d_ddp_guard import UnusedParamsHook
    cfg = toy_runner_cfg(work_dir, pattern, wrapper, distributed=world_size > 1, **cfg_extra)
    if flexible:
        cfg['strategy'] = dict(type='DDPStrategy', model_wrapper=cfg.pop('model_wrapper_cfg'))
    runner = (FlexibleRunner if flexible else Runner).from_cfg(Config(cfg))
    runner.train()
    hook = next(h for h in runner.hooks if isinstance(h, UnusedParamsHook))
    model = runner.model.module if hasattr(runner.model, 'module') else runner.model
    record = hook.record
    with open(osp.join(hook.out_dir, 'unused_params.jsonl')) as f:
        lines = [json.loads(line) for line in f]
    return dict(
        lines=lines,
        names=record.table.names,
        truth=[[model.expected_unused(line['iter'], r, GRADS_ZEROED_IN_PLACE)
                for r in range(world_size)]
               for line in lines],
        statistics=record.statistics.state_dict(),
        record_is_wrappers=record is getattr(runner.model, 'usage_record', None),
        decision=getattr(getattr(runner.model, 'decision', None), 'mode', None),
        decision_source=getattr(getattr(runner.model, 'decision', None), 'source', None),
        params={name: p.detach().cpu().clone() for name, p in model.named_parameters()},
        compiled_graphs=compiled_graphs(),
        post_accumulate_hooks=_usage_hooks_per_parameter(model),
        scalar=runner.message_hub.get_scalar('train/unused_params').data[0].tolist())


def _usage_hooks_per_parameter(model) -> List[int]:
    """How many usage hooks each parameter carries: torch's own count of tensor hooks, or
    where the record hooks AccumulateGrad nodes instead (torch < 2.1, 2.1.2), whose Python
    post-hooks torch does not list, the live node hooks that name the parameter."""
    if not accumulate_grad_hooks.hooks_nodes():
        return [len(p._post_accumulate_grad_hooks or {}) for p in model.parameters()]
    hooks = [obj for obj in gc.get_objects()
             if isinstance(obj, accumulate_grad_hooks._AccumulateGradNodeHook)
             and obj.node is not None]
    return [sum(hook.param is p for hook in hooks) for p in model.parameters()]


def _group_with_collective_counter():
    """The default group, whose private sequence number counts every collective issued on
    it (torch >= 1.10; checked on 2.11 and 2.13)."""
    group = dist.group.WORLD
    if not hasattr(group, '_get_sequence_number_for_group'):
        raise RuntimeError(
            f'torch {torch.__version__} has no ProcessGroup._get_sequence_number_for_group, '
            'which the collective-budget tests read to count collectives; run them on a '
            'torch that has it (1.10 to 2.13 do).')
    return group


def collectives_beyond_ddp_buckets(rank: int, world_size: int, patterns: Sequence[str],
                                   steps: int = 6, stall_timeout: float = 1.0,
                                   seconds: float = 10.0) -> Dict[str, List[Tuple[int, int, int]]]:
    """For each pattern in turn, a GuardedDDP('auto') of its own, and per iteration (after
    DDP's bucket rebuild in iterations 0 and 1): how many collectives it issued on the process
    group beyond DDP's own bucket all-reduces, read from the group's own sequence number (gloo
    counts every collective); how many keys the default c10d store gained; and how many store
    operations the stall watchdog made (its thread running, with ``stall_timeout`` 1 s: a rank
    that paused that long would judge). Each pattern trains at least ``steps`` iterations, the
    first also at least ``seconds`` seconds (one launch for every pattern: a watchdog that
    judged a healthy run shows within a few stall timeouts, and a second long window would
    only repeat the first)."""
    group = _group_with_collective_counter()
    store = dist.distributed_c10d._get_default_store()
    extra: Dict[str, List[Tuple[int, int, int]]] = {}
    for pattern in patterns:
        torch.manual_seed(0)
        ddp = GuardedDDP(ToyDetector(pattern, depth=3), bucket_cap_mb=1e-4,
                         stall_timeout=stall_timeout)
        if not any(thread.name == 'mmdet3d_ddp_guard-stall-watchdog'
                   for thread in threading.enumerate()):
            raise RuntimeError('the stall watchdog is not running')
        optim_wrapper = build_optim_wrapper(ddp, 'sgd')
        extra[pattern] = []
        long_enough = seconds if pattern == patterns[0] else 0.0
        started = time.monotonic()
        iteration = 0
        # Every rank trains as many iterations as rank 0, which decides when it has run long.
        while not _rank_0_says(iteration >= steps
                               and time.monotonic() - started >= long_enough):
            before = group._get_sequence_number_for_group()
            keys_before = store.num_keys()
            store_operations = ddp.stall_watchdog.store_operations
            ddp.train_step(make_toy_batch(iteration, rank), optim_wrapper)
            if iteration >= 2:
                buckets = len(ddp._get_ddp_logging_data()['rebuilt_bucket_sizes'].split(','))
                extra[pattern].append(
                    (group._get_sequence_number_for_group() - before - buckets,
                     store.num_keys() - keys_before,
                     ddp.stall_watchdog.store_operations - store_operations))
            iteration += 1
    # Rank 0's process hosts the store: it must not leave while another rank still reads.
    dist.barrier()
    return extra


def _rank_0_says(flag: bool) -> bool:
    """Rank 0's ``flag``, on every rank (a broadcast)."""
    value = torch.tensor([int(flag)])
    dist.broadcast(value, src=0)
    return bool(value.item())


def strict_stop_message(rank: int, world_size: int, pattern: str) -> str:
    """Trains under GuardedDDP(find_unused_parameters=False) until it stops; returns the
    error this rank stopped with."""
    try:
        train_toy(rank, world_size, 'guarded', pattern, 'sgd', steps=3,
                  wrapper_kwargs=dict(find_unused_parameters=False))
    except UnusedParametersError as error:
        return f'{type(error).__name__}: {error}'
    return 'trained without stopping'


def strict_stop_in_a_runner(rank: int, world_size: int, work_dir: str, pattern: str) -> Dict:
    """Trains a real Runner under GuardedDDP(find_unused_parameters=False) with
    UnusedParamsHook until the strict stop; returns the error and the iterations of the
    hook's per-iteration file (rank 0 writes it)."""
    import json
    import os.path as osp

    from mmengine.config import Config
    from mmengine.runner import Runner
    cfg = toy_runner_cfg(work_dir, pattern,
                         dict(type='GuardedDDP', find_unused_parameters=False))
    runner = Runner.from_cfg(Config(cfg))
    try:
        runner.train()
        error = None
    except UnusedParametersError as stop:
        error = stop
    path = osp.join(work_dir, 'unused_params.jsonl')
    lines = []
    if osp.exists(path):
        with open(path) as f:
            lines = [json.loads(line) for line in f]
    stopped_at = re.search(r'no gradient in iteration (\d+) on', str(error or ''))
    return dict(error=None if error is None else str(error),
                stopped_at=int(stopped_at.group(1)) if stopped_at else None,
                file_iterations=[line['iter'] for line in lines],
                last_line=lines[-1] if lines else None, runner_iter=runner.iter)


def collectives_during_training(rank: int, world_size: int, work_dir: str, pattern: str,
                                wrapper: Dict, **cfg_extra) -> int:
    """How many collectives a real Runner's ``train()`` issued on the default group."""
    from mmengine.config import Config
    from mmengine.runner import Runner
    group = _group_with_collective_counter()
    runner = Runner.from_cfg(Config(toy_runner_cfg(work_dir, pattern, wrapper, **cfg_extra)))
    before = group._get_sequence_number_for_group()
    runner.train()
    return group._get_sequence_number_for_group() - before


def settle_without_host_sync(rank: int, world_size: int, pattern: str, steps: int = 4) -> int:
    """Trains GuardedDDP('auto') on CUDA with the window between each backward and its
    optimizer step (GuardedDDP's settling) under ``torch.cuda.set_sync_debug_mode('error')``:
    any host-device synchronisation there raises. Returns the steps taken."""
    from mmengine.optim import OptimWrapper as _OptimWrapper

    class SyncCheckingOptimWrapper(_OptimWrapper):

        def backward(self, loss, **kwargs):
            super().backward(loss, **kwargs)
            torch.cuda.set_sync_debug_mode('error')

        def step(self, **kwargs):
            torch.cuda.set_sync_debug_mode(0)
            super().step(**kwargs)

    torch.manual_seed(0)
    device = torch.device('cuda', torch.cuda.current_device())
    ddp = GuardedDDP(ToyDetector(pattern, depth=3).to(device), device_ids=[device.index])
    optim_wrapper = SyncCheckingOptimWrapper(torch.optim.SGD(ddp.parameters(), lr=0.05))
    for iteration in range(steps):
        batch = {k: v.to(device) for k, v in make_toy_batch(iteration, rank).items()}
        ddp.train_step(batch, optim_wrapper)
    return steps


class _ReducedGradientsOptimWrapper(OptimWrapper):
    """Keeps every parameter's reduced gradient at each step, flat (NaN where a parameter
    has none), and never moves a parameter, so that runs under different wrappers reduce
    gradients of the same parameters and differ only in how they reduce them.

    ``loss_factor`` scales this rank's loss (0: its gradients are exact zeros, so that the
    all-reduce adds zeros to one rank's contribution and no summation order can round).
    ``set_to_none``: how ``zero_grad`` clears the gradients between iterations.
    """

    def __init__(self, model, loss_factor: float, set_to_none: bool):
        super().__init__(torch.optim.SGD(model.parameters(), lr=0.0))
        self._params = list(model.parameters())
        self.loss_factor = loss_factor
        self.set_to_none = set_to_none
        self.grads = []

    def scale_loss(self, loss):
        return super().scale_loss(loss) * self.loss_factor

    def step(self, **kwargs):
        self.grads.append(torch.cat([
            (p.grad.detach() if p.grad is not None else torch.full_like(p, float('nan')))
            .reshape(-1) for p in self._params]))

    def zero_grad(self, **kwargs):
        self.optimizer.zero_grad(set_to_none=self.set_to_none)


def _last_bucket_elements(ddp, model):
    """Which elements of the flat gradient lie in DDP's last bucket after its rebuild (the
    one that carries the counts under GuardedDDP); None where DDP's logging data does not
    say (torch 1.9; 1.12 on says)."""
    indices = ddp._get_ddp_logging_data().get('rebuilt_per_bucket_param_indices')
    if not indices:
        return None
    last = {int(i) for i in indices.split(',')[-1].split()}
    return torch.cat([torch.full((p.numel(), ), i in last)
                      for i, p in enumerate(model.parameters())])


def _local_gradients(rank: int, world_size: int, pattern: str, steps: int) -> List:
    """Per iteration, every rank's own gradient (before any reduction) of ToyDetector at its
    initial parameters, flat, zeros where the rank left a parameter unused: shape
    (world_size, parameters' elements)."""
    torch.manual_seed(0)
    model = ToyDetector(pattern)
    gathered_per_iteration = []
    for iteration in range(steps):
        model.zero_grad(set_to_none=True)
        # The patterns follow the model's count of forwards.
        model.forward_count = iteration
        data = model.data_preprocessor(make_toy_batch(iteration, rank), training=True)
        loss, _ = model.parse_losses(model._run_forward(data, mode='loss'))
        loss.backward()
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(world_size)]
        dist.all_gather(gathered, flat)
        gathered_per_iteration.append(torch.stack(gathered))
    return gathered_per_iteration


def reduced_gradients(rank: int, world_size: int, runs: Dict[str, Dict],
                      steps: int = 3) -> Dict:
    """ToyDetector on the CPU under each of ``runs`` (label -> ``wrapper`` for
    :func:`wrap_toy`, and optionally ``pattern`` (default 'none'), ``wrapper_kwargs``,
    ``only_rank_0_contributes``, ``set_to_none`` (default True)), ``steps`` iterations at the
    initial parameters. Per run: the flat reduced gradients of each iteration and which of
    their elements lie in DDP's last bucket; under 'local', per pattern, every rank's own
    gradients (:func:`_local_gradients`)."""
    results = {}
    for label, run in runs.items():
        torch.manual_seed(0)
        model = ToyDetector(run.get('pattern', 'none'))
        ddp = wrap_toy(model, run['wrapper'], run.get('wrapper_kwargs'))
        optim_wrapper = _ReducedGradientsOptimWrapper(
            model, 0.0 if run.get('only_rank_0_contributes') and rank else 1.0,
            run.get('set_to_none', True))
        for iteration in range(steps):
            ddp.train_step(make_toy_batch(iteration, rank), optim_wrapper)
        results[label] = dict(grads=optim_wrapper.grads,
                              last_bucket=_last_bucket_elements(ddp, model))
    results['local'] = {pattern: _local_gradients(rank, world_size, pattern, steps)
                        for pattern in sorted({run.get('pattern', 'none')
                                               for run in runs.values()})}
    return results
