"""GuardedDDP: MMEngine's DDP wrapper that never dies of unused parameters."""
import contextlib
import inspect
import logging
import weakref
from typing import Dict, Optional, Union

import torch
from mmengine.logging import MessageHub, print_log
from mmengine.model import MMDistributedDataParallel
from mmengine.model.utils import detect_anomalous_params
from mmengine.optim import OptimWrapper
from mmengine.registry import MODEL_WRAPPERS

from ..messages.config_lines import MMENGINE_LINES
from ..environment.ddp_compat import set_static_graph, static_graph_arguments, untraced
from ..guard.decision_policy import (FIND_UNUSED, DecisionPolicy, configured_accumulation,
                                    not_given, resolve_request)
from ..guard.forward_collectives import forward_collectives_warning
from ..guard.guarded_wrapper import GuardedWrapper
from ..stall_guard import DEFAULT_STALL_TIMEOUT, check_stall_timeout
from ..guard.usage_record import ParamUsageRecord
from ..environment.versions import graph_search_accumulates_right
from .cpu_launch import log_dropped_device_ids


#: What ``Runner.wrap_model`` passes to MMEngine's own ``MMDistributedDataParallel`` when the
#: config has no ``model_wrapper_cfg`` (besides ``device_ids`` and the config's
#: ``find_unused_parameters``): a config that names GuardedDDP builds the same DDP.
#: tests/test_ddp_contract.py reads them back from a wrapper the Runner built.
RUNNER_DDP_DEFAULTS = dict(broadcast_buffers=False)


@MODEL_WRAPPERS.register_module()
class GuardedDDP(GuardedWrapper, MMDistributedDataParallel):
    """Distributed data parallel training that unused parameters cannot crash or hang.

    **What an unused parameter is.** DDP averages gradients across ranks bucket by bucket,
    and starts a bucket's all-reduce when autograd has produced the gradient of every
    parameter in it. A parameter that autograd never reaches in a backward (a layer that was
    not called, a branch skipped for this batch, an output left out of the loss, a head whose
    class has no box and whose loss is skipped) never becomes ready, so its bucket is never
    reduced. With ``find_unused_parameters=False`` the next forward then raises
    ``Expected to have finished reduction in the prior iteration ...`` (torchrun shows it as
    ``ChildFailedError``); when only some ranks skip the parameter, the ranks that used it
    wait in the all-reduce for a partner that never comes, and the run hangs until the
    collective times out. A gradient that exists and is exactly zero is *not* unused. A
    gradient that autograd reached but left undefined (a custom autograd Function that
    returns None for it) is unused on that rank, as under DDP's graph search; it cannot
    break DDP's fast path, which reduces it as zeros.

    **The modes.** ``find_unused_parameters`` takes:

    - ``'auto'`` (default): GuardedDDP's own way, mode ``'complete'``. DDP runs its fast path
      (``find_unused_parameters=False``: no graph search). A post-accumulate-grad hook on
      every parameter records which ones autograd reached, and whether their gradient is
      defined. DDP's last bucket all-reduce carries, after the gradients, one element per
      trainable parameter: the number of ranks that did not use it. On a rank that used
      every parameter that is all there is: a zero tensor kept on the device goes along, and
      nothing of ours waits for the GPU or talks to other ranks between the backward and the
      optimizer step. On a rank that did not reach some parameters, one extra backward of a
      zero gradient into exactly those fires DDP's own hooks for them, so the missing
      buckets are reduced in order and nothing fails or hangs, whatever differs between
      iterations or ranks; that rank then reads the counts of its own unused parameters
      (a host sync, on the slow path only) and gives the ones that no rank used grad None,
      so the optimizer skips them (no momentum, no weight decay), exactly as under
      ``find_unused_parameters=True`` or on one GPU. Parameters used on some ranks get the
      cross-rank mean with zeros for the ranks that did not use them, as under
      ``find_unused_parameters=True``. Training is the same as with DDP's graph search:
      bit-identical on 2 ranks in the tests for SGD with momentum and AdamW, undefined
      gradients included; on 3 ranks and more, up to the rounding of sums taken in another
      order, as DDP's fast path and graph search differ from each other (the counts
      lengthen the last bucket, which moves some of its elements to another chunk of the
      ring all-reduce; docs/how_it_works.md). The per-rank detail for the reports is
      read after the optimizer step, where MMEngine synchronises anyway for the log line;
      a collective of ours (one ``all_gather`` of a byte per parameter) follows only in
      iterations where some parameter was unused on some ranks but not all, to learn
      which ranks.
      Cost with nothing unused: one hook call per parameter per backward and ``P`` extra
      elements (a few KB) in the last bucket's all-reduce; no host sync, no collective.
      With parameters unused on every rank (mmdet3d's SMOKE leaves six so every iteration):
      the completion backward and one host read of their counts; still no collective. With
      ranks that disagree: one small ``all_gather`` after the step. At 1024 ranks and 6000
      parameter tensors the counts add 24 KB to the last bucket (float32), and that gather
      moves 6 MB into each rank, only in the iterations whose ranks disagree.
    - ``True``: DDP's graph search. Every iteration DDP walks the autograd graph from the
      forward's outputs (in C++), marks unreached parameters ready and all-reduces a used
      map. Correct for any pattern; pays the walk every iteration whether or not anything is
      unused. Fails with reentrant activation checkpointing ("mark a variable ready only
      once"). Honoured when written; use it when you need your own DDP comm hook. The
      per-rank report is exchanged in batches (see :class:`ParamUsageRecord`).
    - ``False``: DDP's fast path without a safety net, and the same cost as ``'auto'`` when
      nothing is unused. If a rank leaves parameters unreached, its buckets are completed
      (so no rank hangs in DDP's all-reduce) and then every rank stops before the next
      forward with the same :class:`UnusedParametersError`, naming which ranks left which
      parameters (shapes, modules), the iteration and the config line that fixes it. An
      undefined gradient does not stop the run: DDP's fast path reduces it as zeros, and it
      is reported only.

    ``static_graph=True`` is honoured as well: DDP then records the used set once and expects
    it forever; GuardedDDP raises :class:`StaticGraphChangedError` the iteration it changes.

    **What the user wrote wins.** A top-level ``find_unused_parameters = ...`` in the config
    (present in many mmdet3d configs, and silently dropped by MMEngine's ``Runner`` when
    ``model_wrapper_cfg`` is set) is read from the Runner that builds this wrapper and
    honoured; if it contradicts ``model_wrapper_cfg`` the run does not start. An inherited
    ``find_unused_parameters = True`` is overridden by one leaf line in your config:
    ``find_unused_parameters = 'auto'``.

    **What it tells you.** The decision, its reason and its evidence (which parameters, how
    often unused, on which ranks) are logged once at build and again whenever the situation
    changes class; :attr:`decision` holds the current :class:`Decision` and
    :attr:`usage_record` the per-iteration record that :class:`UnusedParamsHook` reads too.

    **The stall guard: hangs that no flag fixes.** A collective that runs on some ranks and
    not on others in the same iteration hangs every rank whatever DDP's options: a SyncBN
    (torch's, mmcv's, mmdet3d's ``NaiveSyncBatchNorm``, a codebase's own) in a branch that
    depends on the batch, a loss term all-reduced only when a class has boxes. Plain DDP waits
    for the process group's timeout (10 to 30 minutes), then NCCL's watchdog names a sequence
    number. Here every rank keeps in memory its iteration, its phase (data, forward,
    backward, settling, optimizer step, hooks, validation, checkpoint) and the sequence of
    collectives it issued (the Python-level ``torch.distributed`` calls, through recording
    functions put in that namespace, and DDP's buckets, through the counts' comm hook), each
    with its op, element count and issuer: the innermost module of the model on the issuing
    stack. A watchdog thread compares one integer once a second. Only when its rank has not
    moved for ``stall_timeout`` seconds does it publish its snapshot to the run's c10d store
    and read the other ranks'. The run ends on evidence that holds on every backend: ranks
    whose n-th collectives differ (or one that left an iteration without a collective
    another issued in it), or a rank that raised. On gloo, where a collective blocks the host,
    every rank waiting in communication at different collective counts ends it too. On NCCL,
    where the host blocks at its first synchronisation wherever that is, agreeing collectives
    are logged as a possible hang and the run is left to the group's timeout. When it ends,
    every rank logs the same diagnosis (each rank's collective by module, the cause, the
    fix), the hook's files are written, a checkpoint being written is finished, torchrun's
    ``ChildFailedError`` summary shows the diagnosis, and every rank exits with code 1, a
    second or two after ``stall_timeout`` when every rank answers. Waiting that can end (a
    rank busy outside collectives: a checkpoint, a slow data loader, a long validation) is
    logged once, and judged again after 2, 4, 8 ... timeouts (at most 10 minutes apart),
    re-reading the store only after a change. A rank whose step raises publishes its error
    and re-raises at once, with its traceback: a crash ends as fast as without the guard.
    Cost while nothing stalls: a few attribute writes per phase and per collective, no module
    hook (``torch.compile`` compiles the same frames), no store I/O, no collective
    (``tests/test_collective_budget.py``). Only the first live guarded wrapper of a process
    has a watchdog.

    **CPU.** A module on the CPU gets no ``device_ids`` (``Runner.wrap_model`` passes them to
    every DDP subclass, and DDP refuses them for CPU modules).

    Args:
        module (nn.Module): The model to wrap.
        find_unused_parameters (str | bool): ``'auto'``, True or False, as above. Defaults
            to the config's top-level value when written there, else ``'auto'``.
        static_graph (bool): DDP's static graph. Defaults to False.
        detect_anomalous_params (bool): MMEngine's Python graph walk that logs unreached
            parameters every iteration; slow, for debugging only. Defaults to False.
        stall_timeout (float | None): Seconds a rank may stay in one place before its
            watchdog compares positions with the other ranks; None turns the stall guard
            off (no thread, no record). Only a hang ends the run, so a slow phase costs one
            log line: the timeout sets how soon a hang is named, and how long a
            legitimately slow phase (your longest checkpoint save, validation or data
            stall) runs before that line. Keep it well below the process group's timeout
            (MMEngine's default is 30 minutes), so that the guard speaks first. Defaults to
            180.
        broadcast_buffers (bool): DDP's broadcast of rank 0's buffers (batch norm's running
            statistics) at every forward. Defaults to False, as ``Runner.wrap_model``
            builds MMEngine's own wrapper, not to torch's True: each rank keeps its own
            statistics, and a val loop on every rank sees them. True costs one broadcast
            per forward and gives every rank rank 0's.
        **kwargs: Passed on to :class:`torch.nn.parallel.DistributedDataParallel`, as
            written (``gradient_as_bucket_view``, ``bucket_cap_mb``, ``process_group``...).

    **Handled as a DDP.** Everything else is DDP's own: ``state_dict`` keys (``module.``),
    ``no_sync``, ``named_parameters``; ``copy.deepcopy`` and ``torch.save`` of the wrapper
    (an EMA hook's copy) give a wrapper of the copy's own, with the same decision and no
    stall guard, leaving this one's training as it was. Parameters whose ``requires_grad``
    turns False after the wrapper was built (a backbone frozen after warm-up) are marked
    ready for DDP without a gradient, as its graph search does, and are not unused; when
    they require grad again they are tracked again. ``nn.Embedding(sparse=True)`` trains as
    under DDP's graph search, skipped by some ranks or not.
    """

    comm_hook_refusal = ('GuardedDDP', 'build GuardedDDP with find_unused_parameters=True '
                         '(DDP graph search) instead')

    def __init__(self,
                 module,
                 find_unused_parameters: Union[str, bool] = not_given(),
                 static_graph: bool = False,
                 detect_anomalous_params: bool = False,
                 stall_timeout: Optional[float] = DEFAULT_STALL_TIMEOUT,
                 broadcast_buffers: bool = RUNNER_DDP_DEFAULTS['broadcast_buffers'],
                 **kwargs):
        if not isinstance(static_graph, bool):
            raise TypeError(f'GuardedDDP: static_graph must be True or False, not '
                            f'{static_graph!r}.')
        check_stall_timeout(stall_timeout, MMENGINE_LINES)
        runner = _building_runner()
        config_value = (runner.cfg['find_unused_parameters']
                        if runner is not None and 'find_unused_parameters' in runner.cfg
                        else not_given())
        requested, source = resolve_request(find_unused_parameters, config_value,
                                            built_by_runner=runner is not None)
        policy = DecisionPolicy(requested, source, static_graph, MMENGINE_LINES,
                                accumulative_counts=configured_accumulation(runner))
        # Before DDP's own checks, which refuse torch's SyncBatchNorm on the CPU.
        collectives_warning = forward_collectives_warning(module, MMENGINE_LINES.wrapper)
        if collectives_warning:
            print_log(collectives_warning, logger='current', level=logging.WARNING)
        log_dropped_device_ids(module, kwargs)
        # Before DDP builds its reducer: on the node path (torch < 2.1, and 2.1.2) the
        # record's hooks must be added to the AccumulateGrad nodes ahead of DDP's (see
        # accumulate_grad_hooks).
        usage_record = ParamUsageRecord(module, kwargs.get('process_group'))
        if 'forward_sync_buffers' not in kwargs:  # torch 2.13's new name for it wins
            kwargs['broadcast_buffers'] = broadcast_buffers
        super().__init__(
            module=module,
            detect_anomalous_params=detect_anomalous_params,
            find_unused_parameters=policy.decision.mode == FIND_UNUSED,
            **static_graph_arguments(static_graph),
            **kwargs)
        set_static_graph(self, static_graph)
        self.guard(module, usage_record, policy, stall_timeout)
        self._runner = weakref.ref(runner) if runner is not None else None
        print_log(policy.decision.format(), logger='current',
                  level=logging.WARNING if policy.decision.warning else logging.INFO)

    def train_step(self, data: Union[dict, tuple, list],
                   optim_wrapper: OptimWrapper) -> Dict[str, torch.Tensor]:
        """MMDistributedDataParallel's train step, settling unused parameters between the
        backward and the optimizer step."""
        if self._runner is not None:
            self._add_stall_phase_hook()
        with self.guarded_step(then='hooks'):
            with optim_wrapper.optim_context(self):
                # False inside no_sync (gradient accumulation): this backward reduces nothing.
                reduces = self.require_backward_grad_sync
                if not reduces and self.decision.mode == FIND_UNUSED \
                        and not graph_search_accumulates_right(torch.__version__):
                    raise RuntimeError(
                        'GuardedDDP: find_unused_parameters=True (DDP graph search) with '
                        f'gradient accumulation (no_sync) trains wrong on torch '
                        f'{torch.__version__}: a parameter used in an earlier micro-step of '
                        'the window but not in the last one is not synchronised across ranks '
                        '(pytorch/pytorch#69031, fixed in torch 2.4). Build GuardedDDP with '
                        "find_unused_parameters='auto' (the same training as the corrected "
                        'graph search), or upgrade torch to >= 2.4.')
                data = self.module.data_preprocessor(data, training=True)
                losses = self._run_forward(data, mode='loss')
            parsed_loss, log_vars = self.module.parse_losses(losses)
            with _settling_after_backward(optim_wrapper, self, reduces):
                optim_wrapper.update_params(parsed_loss)
            if self.detect_anomalous_params:
                detect_anomalous_params(parsed_loss, model=self)
        return log_vars

    def iteration_of(self, own_count: int) -> int:
        """``runner.iter`` as RuntimeInfoHook publishes it; ``own_count`` outside a Runner."""
        iteration = MessageHub.get_current_instance().get_info('iter')
        return own_count if iteration is None else iteration

    @staticmethod
    def log_revision(message: str) -> None:
        print_log(message, logger='current')

    @staticmethod
    def log_stall(message: str, is_error: bool) -> None:
        # Errors reach every rank's console (MMEngine shows only errors on ranks other than
        # 0).
        print_log(message, logger='current',
                  level=logging.ERROR if is_error else logging.WARNING)

    def _adapter_state(self):
        return ('_runner', )

    def _init_adapter_state(self) -> None:
        self._runner = None  # a copy registers no hook on the original's Runner

    @untraced  # inside a compiled train_step: traced, it would be a frame of its own
    def _add_stall_phase_hook(self) -> None:
        """Once, at the first step (the Runner registers its hooks after building us)."""
        from .hooks.stall_phase_hook import StallPhaseHook
        runner, self._runner = self._runner(), None
        if runner is not None and self.stall_watchdog is not None \
                and not any(isinstance(hook, StallPhaseHook) for hook in runner.hooks):
            runner.register_hook(StallPhaseHook())


@contextlib.contextmanager
def _settling_after_backward(optim_wrapper: OptimWrapper, wrapper: GuardedWrapper,
                             reduces: bool):
    """Runs ``optim_wrapper.backward`` inside ``update_params`` through the wrapper's
    :meth:`~GuardedWrapper.backward_then_settle`.

    MMEngine has no hook point between backward and optimizer step; wrapping the instance's
    ``backward`` keeps the optim wrapper's own ``update_params`` (loss scaling, AMP,
    accumulation counts, step/zero_grad arguments) in charge instead of re-implementing it.
    """
    original = optim_wrapper.backward

    def backward_then_settle(loss, **kwargs):
        wrapper.backward_then_settle(lambda: original(loss, **kwargs), reduces)

    optim_wrapper.backward = backward_then_settle
    try:
        yield
    finally:
        del optim_wrapper.backward


def _building_runner():
    """The MMEngine Runner that is building us, if any.

    ``Runner.wrap_model`` reads the config's top-level ``find_unused_parameters`` only when
    ``model_wrapper_cfg`` is None and passes the wrapper nothing of the config, so the
    Runner is found on the call stack.
    """
    from mmengine.runner import FlexibleRunner, Runner
    frame = inspect.currentframe()
    while frame is not None:
        candidate = frame.f_locals.get('self')
        if isinstance(candidate, (Runner, FlexibleRunner)):
            return candidate
        frame = frame.f_back
    return None
