"""A DDP comm hook that tells every rank, for free, whether any rank left parameters unused.

GuardedDDP's completion needs to know which parameters *no* rank used (their gradients go
back to None). Asking costs a collective; asking every iteration costs about as much as DDP's
own graph search on a small-step model. So the question rides on a collective DDP issues
anyway: the all-reduce of the last gradient bucket carries one extra element, the number of
ranks with unreached parameters in this backward. DDP launches buckets strictly in order, so
the last bucket is launched only once every parameter of this rank is ready: during the
main backward when nothing was unused here (the flag is 0), during the completion backward
otherwise (the flag was set to 1 just before). When the sum is 0, no gather is needed.

Buckets are averaged exactly as DDP's default ``allreduce_hook`` does (divide, then sum).
"""
from typing import Optional

import torch
import torch.distributed as dist


class UnusedFlagState:
    """State shared between GuardedDDP and :func:`allreduce_with_unused_flag`.

    Attributes:
        process_group: The DDP process group (None: the default group).
        local_has_unused (bool): Set by GuardedDDP before it completes this rank's buckets.
        ranks_with_unused (Tensor, optional): The all-reduced flag of the last backward.
    """

    def __init__(self, process_group=None):
        self.process_group = process_group
        self.local_has_unused = False
        self.ranks_with_unused: Optional[torch.Tensor] = None

    def any_rank_had_unused(self) -> bool:
        """Reads (and consumes) the flag of the backward that just ended."""
        if self.ranks_with_unused is None:
            raise RuntimeError('GuardedDDP: the last gradient bucket was not reduced in this '
                               'backward; another comm hook may have replaced GuardedDDP\'s.')
        flag, self.ranks_with_unused = self.ranks_with_unused, None
        self.local_has_unused = False
        return bool(flag.item() > 0)


def allreduce_with_unused_flag(state: UnusedFlagState,
                               bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    world_size = group.size()
    buffer = bucket.buffer()
    if not bucket.is_last():
        buffer.div_(world_size)
        return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(
            lambda fut: fut.value()[0])
    combined = torch.cat(
        [buffer.div(world_size),
         buffer.new_full((1, ), float(state.local_has_unused))])

    def split(fut):
        reduced = fut.value()[0]
        state.ranks_with_unused = reduced[-1]
        return reduced[:-1]

    return dist.all_reduce(combined, group=group, async_op=True).get_future().then(split)
