"""What both adapters' guarded DDP wrappers are once DDP is built, framework-free.

:class:`GuardedWrapper` goes first in the bases of a DDP subclass (MMEngine's
``GuardedDDP``, mmcv 1.x's ``GuardedMMDistributedDataParallel``): the wrapper decides what
the user asked for and builds the usage record before DDP (its framework's way), then calls
:meth:`GuardedWrapper.guard` with what it decided.
"""
import contextlib
from typing import Callable, List, Optional

import torch
import torch.distributed as dist
import torch.nn as nn

from .completion import UnusedCompletion
from .cpu_ddp import leave_gloo_cleanly_at_exit
from .decision_policy import Decision, DecisionPolicy
from .stall_guard import RankPosition, watch_ranks
from .usage_record import ParamUsageRecord


class GuardedWrapper:
    """The completion, the stall guard, the comm-hook rule and the per-step sequence of a
    guarded DDP wrapper.

    Both adapters run a training step the same way: :meth:`guarded_step` around the whole
    step, then :meth:`backward_then_settle` around the backward where the framework lets the
    wrapper run it (MMEngine's optim wrapper), or :meth:`settle_after_backward` at its end
    where it does not (mmcv 1.x, from :class:`~.step_backwards.StepBackwards`).

    A subclass names itself and the way to DDP's graph search in ``comm_hook_refusal``
    (``(wrapper, fix)``, the words of the error a user's own comm hook gets while the counts
    ride the gradient all-reduce).
    """

    comm_hook_refusal = ('mmdet3d_ddp_guard', 'use find_unused_parameters=True')

    def guard(self, module: nn.Module, usage_record: ParamUsageRecord, policy: DecisionPolicy,
              iteration_of: Callable[[int], int], log_revision: Callable[[str], None],
              stall_timeout: Optional[float],
              log_stall: Callable[[str, bool], None]) -> None:
        """After DDP's ``__init__``: the completion on this wrapper's reducer, gloo's clean
        exit, and the stall guard's position and watchdog (None when it is off)."""
        self.policy = policy
        self.usage_record = usage_record
        self.completion = UnusedCompletion(self, usage_record, policy, iteration_of,
                                           log_revision)
        if dist.get_backend(self.process_group) == 'gloo':
            leave_gloo_cleanly_at_exit()
        self.stall_position = RankPosition(module)
        self.stall_watchdog = watch_ranks(self.stall_position, stall_timeout, log_stall,
                                          self.process_group)
        if self.stall_watchdog is not None:
            self.completion.watch_buckets(self.stall_position.collectives.record_bucket)
        self._reported: Optional[BaseException] = None

    @contextlib.contextmanager
    def guarded_step(self, then: Optional[str] = None):
        """One training step: the previous iteration's per-rank detail resolved, this
        iteration's position and record started; ``then``, the phase after a step that
        returned; an error that leaves the step told to the stall guard first."""
        with self._reporting():
            # The previous iteration's per-rank detail, unless a hook has read it already.
            self.usage_record.resolve()
            self.stall_position.start_forward(self.completion.current_iteration())
            self.usage_record.start_iteration()
            yield
        if then is not None:
            self.stall_position.enter(then)

    def backward_then_settle(self, backward: Callable[[], None], reduces: bool) -> None:
        """Runs ``backward()`` and settles its unused parameters before the optimizer step;
        ``reduces`` is False inside ``no_sync`` (accumulation)."""
        self.stall_position.enter('backward')
        with self._reporting():
            backward()
        self.settle_after_backward(reduces)

    def settle_after_backward(self, reduces: bool) -> List[torch.Tensor]:
        """Settles the unused parameters of the backward that just ended (``reduces``: it
        was one DDP reduces), before the optimizer step; returns the parameters completed
        with zeros."""
        position = self.stall_position
        position.enter('settling')
        with self._reporting():
            completed = self.completion.settle(reduces)
        position.enter('optimizer step')
        return completed

    @contextlib.contextmanager
    def _reporting(self):
        try:
            yield
        except Exception as error:
            self._report(error)
            raise

    def _report(self, error: BaseException) -> None:
        if self.stall_watchdog is not None and error is not self._reported:
            self._reported = error
            self.stall_watchdog.report_exception(error)

    @property
    def decision(self) -> Decision:
        return self.policy.decision

    def register_comm_hook(self, state, hook):
        self.completion.refuse_user_comm_hook(*self.comm_hook_refusal)
        super().register_comm_hook(state, hook)
