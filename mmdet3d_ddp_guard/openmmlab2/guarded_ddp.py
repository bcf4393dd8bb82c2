"""GuardedDDP: MMEngine's DDP wrapper that never dies of unused parameters."""
import contextlib
import functools
import inspect
import weakref
from typing import Dict, Optional, Union

import torch
from mmengine.logging import MessageHub, print_log
from mmengine.model import MMDistributedDataParallel
from mmengine.model.utils import detect_anomalous_params
from mmengine.optim import OptimWrapper
from mmengine.registry import MODEL_WRAPPERS

from ..environment.ddp_compat import untraced
from ..environment.versions import graph_search_accumulates_right
from ..guard.decision_policy import DecisionPolicy, Mode
from ..guard.guarded_wrapper import GuardedWrapper
from ..environment.framework_table import MMENGINE_LINES
from ..messages.guard_errors import graph_search_accumulation_refused
from ..messages.mode_request import not_given, read_request
from ..stall_guard import DEFAULT_STALL_TIMEOUT, Phase, check_stall_timeout
from .accumulation import configured_accumulation
from .cpu_launch import log_dropped_device_ids

#: What ``Runner.wrap_model`` passes to MMEngine's own ``MMDistributedDataParallel`` when the
#: config has no ``model_wrapper_cfg`` (besides ``device_ids`` and the config's
#: ``find_unused_parameters``): a config that names GuardedDDP builds the same DDP.
#: tests/test_ddp_contract.py reads them back from a wrapper the Runner built.
RUNNER_DDP_DEFAULTS = dict(broadcast_buffers=False)


@MODEL_WRAPPERS.register_module()
class GuardedDDP(GuardedWrapper, MMDistributedDataParallel):
    """Distributed data parallel training that unused parameters cannot crash or hang.

    **What an unused parameter is.** DDP averages gradients across ranks bucket by bucket, and
    starts a bucket's all-reduce when autograd has produced the gradient of every parameter in
    it. A parameter that autograd never reaches in a backward (a layer not called, a branch
    skipped for this batch, an output left out of the loss, a head whose class has no box)
    never becomes ready, so its bucket is never reduced. With ``find_unused_parameters=False``
    the next forward raises ``Expected to have finished reduction in the prior iteration ...``
    (torchrun: ``ChildFailedError``); when only some ranks skip it, the others wait in the
    all-reduce and the run hangs until the collective times out. A gradient that is exactly
    zero is *not* unused; one that autograd reached but left undefined (a custom autograd
    Function returning None) is unused, as under DDP's graph search, and DDP's fast path
    reduces it as zeros.

    What you wrote wins: a top-level ``find_unused_parameters`` in the config is read from the
    Runner and honoured; a contradiction with ``model_wrapper_cfg`` stops the run. Handled as
    a DDP: ``state_dict``, ``no_sync``, ``copy.deepcopy``, ``torch.save``, parameters frozen
    after the build and sparse embeddings behave as on DDP. The modes, their costs at scale
    and the stall guard in detail: see docs/reference/guarded_ddp.md.

    Warning:
        The stall guard is on by default (``stall_timeout=180``). When ranks are proven stuck
        in different collectives, or a rank raised, it logs the same diagnosis on every rank
        and ends the process on every rank with exit code 1. Turn it off with
        ``stall_timeout=None`` in ``model_wrapper_cfg``; keep it below the group's timeout.

    Args:
        module (nn.Module): The model to wrap.
        find_unused_parameters (str | bool): ``'auto'``, for any model: DDP's fast path; a
            rank that did not reach some parameters runs one extra zero-gradient backward into
            them so its buckets reduce, and parameters no rank used get grad None, so the
            optimizer skips them. With nothing unused it costs one hook call per parameter and
            ``P`` extra elements in the last bucket, no collective, no host sync before the
            optimizer step (the counts are read after the next step's forward); it trains as
            DDP's graph search (bit for bit at 2 ranks). ``True``: DDP's graph search every
            iteration, as written; fails with reentrant activation checkpointing. ``False``:
            strict, costs as ``'auto'``; if a rank leaves parameters unreached, every rank
            stops with the same :class:`UnusedParametersError` naming them, the iteration and
            the fix. Defaults to the config's top-level value when written there, else
            ``'auto'``. Every mode takes your own DDP comm hook (:meth:`register_comm_hook`).
        static_graph (bool): DDP's static graph, for constant graphs; a change of the used set
            stops the run with :class:`StaticGraphChangedError`. Defaults to False.
        detect_anomalous_params (bool): MMEngine's Python graph walk that logs unreached
            parameters every iteration; slow, for debugging only. Defaults to False.
        stall_timeout (float | None): Seconds a rank may stay in one place before its watchdog
            compares positions with the other ranks: how soon a hang is named; a slower phase
            (checkpoint, validation) costs one log line. A few attribute writes per phase and
            collective; None turns it off. Defaults to 180.
        broadcast_buffers (bool): DDP's broadcast of rank 0's buffers (batch norm's running
            statistics) at every forward, one broadcast each. Defaults to False, as
            ``Runner.wrap_model`` builds MMEngine's own wrapper: each rank keeps its own.
        **kwargs: Passed on to :class:`torch.nn.parallel.DistributedDataParallel`, as written
            (``gradient_as_bucket_view``, ``bucket_cap_mb``, ``process_group``...).

    Example::

        custom_imports = dict(imports=['mmdet3d_ddp_guard'], allow_failed_imports=False)
        model_wrapper_cfg = dict(type='GuardedDDP')  # options optional, e.g.:
        model_wrapper_cfg = dict(type='GuardedDDP', find_unused_parameters='auto',
                                 stall_timeout=300)
    """

    lines = MMENGINE_LINES

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
        requested, source = read_request(find_unused_parameters, config_value,
                                         built_by_runner=runner is not None,
                                         lines=MMENGINE_LINES)
        policy = DecisionPolicy(requested, source, static_graph, MMENGINE_LINES,
                                accumulative_counts=configured_accumulation(runner))
        log_dropped_device_ids(module, kwargs)
        if 'forward_sync_buffers' not in kwargs:  # torch 2.13's new name for it wins
            kwargs['broadcast_buffers'] = broadcast_buffers
        self.build_guarded(module, policy, static_graph, stall_timeout,
                           dict(kwargs, detect_anomalous_params=detect_anomalous_params))
        self._runner = weakref.ref(runner) if runner is not None else None

    def train_step(self, data: Union[dict, tuple, list],
                   optim_wrapper: OptimWrapper) -> Dict[str, torch.Tensor]:
        """MMDistributedDataParallel's train step, settling unused parameters between the
        backward and the optimizer step."""
        if self._runner is not None:
            self._first_step_with_a_runner(self)
        iteration = self._iteration()
        with self.guarded_step(iteration, then=Phase.HOOKS):
            with optim_wrapper.optim_context(self):
                # False inside no_sync (gradient accumulation): this backward reduces nothing.
                reduces = self.require_backward_grad_sync
                if not reduces and self.decision.mode == Mode.FIND_UNUSED \
                        and not graph_search_accumulates_right(torch.__version__):
                    raise RuntimeError(graph_search_accumulation_refused(torch.__version__,
                                                                         MMENGINE_LINES))
                data = self.module.data_preprocessor(data, training=True)
                losses = self._run_forward(data, mode='loss')
                for revision in self.forward_returned():
                    self.log(revision)
            parsed_loss, log_vars = self.module.parse_losses(losses)
            with _settling_after_backward(optim_wrapper, self, reduces, iteration):
                optim_wrapper.update_params(parsed_loss)
            if self.detect_anomalous_params:
                detect_anomalous_params(parsed_loss, model=self)
        return log_vars

    def _iteration(self) -> int:
        """``runner.iter`` as RuntimeInfoHook publishes it; outside a Runner, the backwards
        settled so far."""
        iteration = MessageHub.get_current_instance().get_info('iter')
        return self.completion.iterations_ended if iteration is None else iteration

    # MMEngine shows only errors on ranks other than 0.
    log = staticmethod(functools.partial(print_log, logger='current'))

    def _adapter_state(self):
        return ('_runner', '_first_step_with_a_runner')

    def _init_adapter_state(self) -> None:
        # __init__ then sets the Runner that builds us; a copy registers no hook on the
        # original's Runner.
        self._runner = None
        # What the first step under a Runner calls, made untraced here (one wrapper, cached:
        # inside a compiled train_step, traced, it would be a frame of its own); untraced()
        # loads Dynamo, which importing the package must not do.
        self._first_step_with_a_runner = untraced(_add_stall_phase_hook)


def _add_stall_phase_hook(wrapper: GuardedDDP) -> None:
    """Once, at the first step (the Runner registers its hooks after building us)."""
    from .hooks.stall_phase_hook import StallPhaseHook
    runner, wrapper._runner = wrapper._runner(), None
    if runner is not None and wrapper.stall_watchdog is not None \
            and not any(isinstance(hook, StallPhaseHook) for hook in runner.hooks):
        runner.register_hook(StallPhaseHook())


@contextlib.contextmanager
def _settling_after_backward(optim_wrapper: OptimWrapper, wrapper: GuardedWrapper,
                             reduces: bool, iteration: int):
    """Runs ``optim_wrapper.backward`` inside ``update_params`` as the wrapper's step needs
    it: after :meth:`~GuardedWrapper.enter_backward`, inside
    :meth:`~GuardedWrapper.telling_the_stall_guard`, then
    :meth:`~GuardedWrapper.settle_after_backward` with ``iteration``.

    MMEngine has no hook point between backward and optimizer step; wrapping the instance's
    ``backward`` keeps the optim wrapper's own ``update_params`` (loss scaling, AMP,
    accumulation counts, step/zero_grad arguments) in charge instead of re-implementing it.
    """
    original = optim_wrapper.backward

    def backward_then_settle(loss, **kwargs):
        wrapper.enter_backward()
        with wrapper.telling_the_stall_guard():
            original(loss, **kwargs)
        wrapper.settle_after_backward(reduces, iteration)

    optim_wrapper.backward = backward_then_settle
    try:
        yield
    finally:
        del optim_wrapper.backward


def _building_runner():
    """The MMEngine Runner that is building us, if any.

    ``Runner.wrap_model`` reads the config's top-level ``find_unused_parameters`` only when
    ``model_wrapper_cfg`` is None and passes the wrapper nothing of the config, so the
    Runner is found on the call stack. Only the runners' own frames are read: reading a
    frame's ``f_locals`` keeps a copy of its locals (Python < 3.13), which would keep a
    caller's objects, a previous wrapper among them, alive after the caller deleted them.
    """
    from mmengine.runner import FlexibleRunner, Runner
    runner_files = {inspect.getsourcefile(Runner), inspect.getsourcefile(FlexibleRunner)}
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_filename in runner_files:
            candidate = frame.f_locals.get('self')
            if isinstance(candidate, (Runner, FlexibleRunner)):
                return candidate
        frame = frame.f_back
    return None
