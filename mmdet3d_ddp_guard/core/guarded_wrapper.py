"""What both adapters' guarded DDP wrappers are once DDP is built, framework-free.

:class:`GuardedWrapper` goes first in the bases of a DDP subclass (MMEngine's
``GuardedDDP``, mmcv 1.x's ``GuardedMMDistributedDataParallel``): the wrapper decides what
the user asked for and builds the usage record before DDP (its framework's way), then calls
:meth:`GuardedWrapper.guard` with what it decided.
"""
from typing import Callable, Optional

import torch.distributed as dist
import torch.nn as nn

from .completion import UnusedCompletion
from .cpu_ddp import leave_gloo_cleanly_at_exit
from .decision_policy import Decision, DecisionPolicy
from .stall_guard import RankPosition, watch_ranks
from .usage_record import ParamUsageRecord


class GuardedWrapper:
    """The completion, the stall guard and the comm-hook rule of a guarded DDP wrapper.

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
        self.stall_position = RankPosition(self.process_group)
        self.stall_watchdog = watch_ranks(self.stall_position, stall_timeout, log_stall,
                                          self.process_group, module)

    @property
    def decision(self) -> Decision:
        return self.policy.decision

    def register_comm_hook(self, state, hook):
        self.completion.refuse_user_comm_hook(*self.comm_hook_refusal)
        super().register_comm_hook(state, hook)
