"""What both adapters' guarded DDP wrappers share, framework-free: the one construction
sequence, the per-step sequence, and copies.

:class:`GuardedWrapper` goes first in the bases of a DDP subclass (MMEngine's
``GuardedDDP``, mmcv 1.x's ``GuardedMMDistributedDataParallel``). An adapter's ``__init__``
reads what the user asked for its framework's way (the config, the Runner, the script's
arguments) into a :class:`DecisionPolicy`, then calls :meth:`GuardedWrapper.build_guarded`,
which builds the record, DDP and the guard in the one order that works on every torch.
"""
import contextlib
import logging
from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

from ..environment.cpu_ddp import leave_gloo_cleanly_at_exit
from ..environment.ddp_compat import (JOIN_THROUGH_COMM_HOOK, set_static_graph,
                                      static_graph_arguments)
from ..messages.decision_text import decision_message
from ..messages.guard_errors import join_refused
from ..stall_guard import Phase, RankPosition, watch_ranks
from .completion import UnusedCompletion
from .decision_policy import Decision, DecisionPolicy, Mode
from .forward_collectives import forward_collectives_warning
from .guard_adapter import GuardAdapter
from .iteration_usage import ResolvedIteration
from .sparse_gradients import sparse_gradients_notice
from .unused_counts_comm_hook import UnusedCountsState, python_twin
from .usage_record import ParamUsageRecord


class GuardedWrapper(GuardAdapter):
    """The completion, the stall guard, a user's comm hook and the per-step sequence of a
    guarded DDP wrapper, on top of what its adapter gives (:class:`.GuardAdapter`).

    **One step, one way.** Every call goes down, from the adapter into the guard, in the
    order :class:`~.guard_adapter.GuardAdapter` states; the guard never calls the adapter
    back (tests/test_one_way_step.py holds both adapters to it).

    **The report's pull.** A report hook (``UnusedParamsHook``) reads this wrapper's record:
    it calls :meth:`keep_resolved_for_report` before the run, then
    :meth:`resolved_for_report` at its hook points, and gets every iteration resolved since
    (whoever resolved it) and the strict stop, which it raises once its file holds the
    iteration that made it. Neither the record nor the guard calls the hook.

    **Copies.** ``copy.deepcopy`` and pickling (``torch.save`` of the whole wrapper) work as
    on DDP, whose ``__getstate__`` drops the process group and reducer and whose
    ``__setstate__`` builds a reducer of the copy's own on the default group: an EMA hook's
    ``deepcopy(runner.model)`` (BEVDet's ``MEGVIIEMAHook``), YOLO-style ``ModelEMA``. The
    copy leaves this wrapper's record, hooks, counts and stall guard as they were; it gets
    a guard of its own (the same decision, a record and completion on its own parameters)
    and no stall guard (one per process, the original's), so that it runs forward and, like
    a copied DDP, trains.
    """

    #: What :meth:`_guard` adds to DDP's state: this wrapper's training, never a copy's.
    _guard_state = ('usage_record', 'completion', 'stall_position', 'stall_watchdog',
                    '_reported')

    def build_guarded(self, module: nn.Module, policy: DecisionPolicy, static_graph: bool,
                      stall_timeout: Optional[float], ddp_arguments: Dict) -> None:
        """The construction sequence of both adapters, in the order that works on every
        torch: the warning about collectives in the forward (before DDP's own checks, which
        refuse torch's SyncBatchNorm on the CPU), the usage record (before DDP builds its
        reducer: on the node path, torch < 2.1 and 2.1.2, the record's hooks must be added
        to the AccumulateGrad nodes ahead of DDP's, see accumulate_grad_hooks), the
        framework's DDP (the next class after this one in the subclass's bases) with the
        graph search only in mode ``find_unused``, the static graph, the guard, the
        decision logged, and the warning for sparse gradients (their averages may differ
        from the framework's own wrapper's: :mod:`.sparse_gradients`)."""
        collectives_warning = forward_collectives_warning(module, self.lines.wrapper)
        if collectives_warning:
            self.log(collectives_warning, level=logging.WARNING)
        usage_record = ParamUsageRecord(module, ddp_arguments.get('process_group'))
        graph_search = policy.decision.mode == Mode.FIND_UNUSED
        super().__init__(module, find_unused_parameters=graph_search,
                         **static_graph_arguments(static_graph), **ddp_arguments)
        set_static_graph(self, static_graph)
        self._guard(module, usage_record, policy, stall_timeout)
        self.log(decision_message(policy.decision),
                 level=logging.WARNING if policy.decision.warning else logging.INFO)
        sparse_notice = sparse_gradients_notice(usage_record.table, policy.decision.mode,
                                                self.lines)
        if sparse_notice:
            self.log(sparse_notice, level=logging.WARNING)

    def _guard(self, module: nn.Module, usage_record: ParamUsageRecord, policy: DecisionPolicy,
               stall_timeout: Optional[float]) -> None:
        """After DDP's ``__init__`` (or ``__setstate__``): the completion on this wrapper's
        reducer, gloo's clean exit, the stall guard's position and watchdog (None when it is
        off), and the adapter's own state."""
        self.policy = policy
        self.usage_record = usage_record
        # The framework's logging function, not a bound method: the watchdog's thread holds
        # its logger, where a reference back to this wrapper would keep it alive for ever.
        log = self.log
        self.completion = UnusedCompletion(self, usage_record, policy)
        if dist.get_backend(self.process_group) == 'gloo':
            leave_gloo_cleanly_at_exit()
        self.stall_position = RankPosition(module)
        self.stall_watchdog = watch_ranks(
            self.stall_position, stall_timeout,
            lambda message, is_error: log(
                message, level=logging.ERROR if is_error else logging.WARNING),
            self.process_group, self.lines, type(module).__name__)
        if self.stall_watchdog is not None:
            self.completion.watch_buckets(self.stall_position.collectives.record_bucket)
        self._reported: Optional[BaseException] = None
        self._init_adapter_state()

    @contextlib.contextmanager
    def guarded_step(self, iteration: int, then: Optional[Phase] = None):
        """One training step of the framework's ``iteration``: its position and record
        started; ``then``, the phase after a step that returned; an error that leaves the
        step told to the stall guard first."""
        with self.telling_the_stall_guard():
            self.stall_position.start_forward(iteration)
            self.usage_record.start_iteration()
            yield
        if then is not None:
            self.stall_position.enter(then)

    def forward_returned(self) -> List[str]:
        """The step's forward has returned, its kernels queued: what the previous steps left
        open is resolved now (their reduced counts read: a wait for the GPU, which has this
        forward to run meanwhile; at the step's start the GPU idled while the host began the
        step: 0.2 % of a GPU-bound step on an H200). Every rank comes here at the same point
        of the step, so the strict stop and a gather of the ranks' masks are issued alike. A
        step that never comes here leaves its iterations open: the next reduced bucket
        carries their counts too (:meth:`ParamUsageRecord.expect_counts`). Returns the
        messages of the decision's revisions since the last step, however they were resolved,
        for the adapter to log with its framework (the guard calls no logger)."""
        with self.telling_the_stall_guard():
            self.completion.resolve()
            self.completion.raise_stop()
        return self.take_revisions()

    def take_revisions(self) -> List[str]:
        """The messages of the decision's revisions not handed over yet (an adapter's report
        asks at the run's end, where no forward follows)."""
        return self.completion.take_revisions()

    def keep_resolved_for_report(self) -> None:
        """A report will ask for the resolved iterations: keep them until it does."""
        self.completion.keep_for_report()

    def resolved_for_report(self, exchange: bool
                            ) -> Tuple[List[ResolvedIteration], Optional[BaseException]]:
        """What the report asks for at its hook points (after the optimizer step, where it
        resolves the counts for its log line): the iterations resolved since it last asked,
        in order, and the strict stop, if one of them made it, for the report to raise once
        it has written them. ``exchange``: also gather the open iterations across ranks (the
        modes without counts; every rank must pass the same)."""
        with self.telling_the_stall_guard():
            return self.completion.take_for_report(exchange)

    def enter_backward(self) -> None:
        """The step's backward starts (the stall guard's phase)."""
        self.stall_position.enter(Phase.BACKWARD)

    def settle_after_backward(self, reduces: bool, iteration: int) -> List[torch.Tensor]:
        """Settles the unused parameters of the backward of ``iteration`` that just ended
        (``reduces``: it was one DDP reduces; False inside ``no_sync``, accumulation), before
        the optimizer step; returns the parameters completed with zeros."""
        position = self.stall_position
        position.enter(Phase.SETTLING)
        with self.telling_the_stall_guard():
            completed = self.completion.settle(reduces, iteration)
        position.enter(Phase.OPTIMIZER_STEP)
        return completed

    @contextlib.contextmanager
    def telling_the_stall_guard(self):
        """A part of the step whose error, on its way out, is told to the stall guard first
        (the other ranks then learn that this one raised instead of waiting for it): the
        backward an adapter runs, and the parts of a step it runs itself (mmcv 1.x's start
        of the step)."""
        try:
            yield
        except Exception as error:
            self._report(error)
            raise

    def _report(self, error: BaseException) -> None:
        if self.stall_watchdog is not None and error is not self._reported:
            self._reported = error
            self.stall_watchdog.report_exception(error)

    # torch's Join (uneven inputs) calls these two of DDP's private methods on a rank that
    # joined, each step the others take (never called elsewhere): the counts on the last
    # bucket need this rank's share, and micro-steps inside no_sync are counted. torch 1.9's
    # join calls the second only, and all-reduces without DDP's comm hook, which carries the
    # counts: its joined rank's all-reduces would not match the others' (gloo aborts), so
    # where the counts ride the all-reduce it stops with the fix instead.
    def _check_global_requires_backward_grad_sync(self, is_joined_rank):
        syncs = super()._check_global_requires_backward_grad_sync(is_joined_rank)
        if is_joined_rank and not syncs:
            self.completion.shadow(None, reduces=False)
        return syncs

    def _match_all_reduce_for_bwd_pass(self):
        with self.telling_the_stall_guard():
            if not JOIN_THROUGH_COMM_HOOK and self.completion.carries_counts:
                raise RuntimeError(join_refused(torch.__version__, self.lines))
            self.completion.shadow(super()._match_all_reduce_for_bwd_pass, reduces=True)

    def __getstate__(self):
        state = super().__getstate__()  # DDP's: no process group, reducer or logger
        for name in self._guard_state + self._adapter_state():
            state.pop(name, None)
        if '_comm_hooks' in state:  # torch >= 2.0 keeps them; the counts' is this wrapper's
            state['_comm_hooks'] = [(hook, hook_state)
                                    for hook, hook_state in state['_comm_hooks']
                                    if not isinstance(hook_state, UnusedCountsState)]
        return state

    def __setstate__(self, state):
        module = state['_modules']['module']
        # Before DDP's reducer, as in the adapters' __init__ (see accumulate_grad_hooks).
        usage_record = ParamUsageRecord(module)
        super().__setstate__(state)
        self._guard(module, usage_record, self.policy, stall_timeout=None)

    @property
    def decision(self) -> Decision:
        return self.policy.decision

    def register_comm_hook(self, state, hook):
        """DDP's: ``hook(state, bucket)`` reduces every gradient bucket, in every mode, before
        or after the first step; a second hook is refused as DDP refuses it. Where the
        gradient all-reduce carries the counts (``'auto'``, strict), DDP's one comm hook
        stays the guard's, which hands each bucket to ``hook`` unchanged and sends the
        counts beside it, uncompressed (:mod:`.unused_counts_comm_hook`)."""
        if not self.completion.carries_counts:
            return super().register_comm_hook(state, hook)
        self._check_comm_hook(hook)
        self.completion.reduce_buckets_with(hook, state, 'register_comm_hook')
        self.logger._set_comm_hook_name(hook.__qualname__)
        if hasattr(self, '_comm_hooks'):  # torch >= 2.0 lists the hooks, as registered
            self._comm_hooks.append((hook, state))

    def _register_builtin_comm_hook(self, comm_hook_type):
        """DDP's C++ hooks: where the gradient all-reduce carries the counts, their Python
        twins (the same operations: bit for bit the same buckets) reduce the buckets."""
        if not self.completion.carries_counts:
            return super()._register_builtin_comm_hook(comm_hook_type)
        self.completion.reduce_buckets_with(python_twin(comm_hook_type), self.process_group,
                                            'register_builtin_comm_hook')
        self.logger._set_comm_hook_name(str(comm_hook_type))
