"""A DDP comm hook that tells every rank, for free, which parameters each rank left unused.

GuardedDDP needs to know which parameters *no* rank used (their gradients go back to None,
as under DDP's graph search), and its reports want to know which ranks left what unused.
Asking with a collective of our own costs a synchronisation point every iteration. So the
answer rides on a collective DDP issues anyway: the all-reduce of the last gradient bucket
carries, after the gradients, one element per trainable parameter and open iteration (1
where this rank did not use the parameter, so the sum is the number of ranks that did not)
and one element that counts the ranks that left parameters unreached (their buckets had to
be completed; strict mode stops every rank on it).

DDP launches buckets strictly in order, so the last bucket is launched only once every
parameter of this rank is ready: during the main backward when this rank reached every
parameter, during GuardedDDP's completion backward otherwise. Either way the record knows
this rank's unused parameters by then. When nothing is unused, the extra elements are a
zero tensor kept on the device: no host-to-device copy, no host sync, no extra collective.

**A user's comm hook** (``register_comm_hook`` on a guarded wrapper, in the modes that carry
the counts) reduces every bucket in place of this averaging: DDP takes one comm hook, so this
one stays registered and hands each bucket to the user's, with the user's state, unchanged.
The counts then travel in a float32 all-reduce of their own, issued on the last bucket before
the user's hook issues anything: never compressed (an fp16 or PowerSGD hook would change
them), never part of the user's reduction, and issued at the same place among the hook's
collectives on every rank (PowerSGD issues some from its futures' callbacks). It costs one
small collective per iteration and no host sync.

Counting is exact while the bucket's dtype holds the world size as an integer (float32 up
to 2**24 ranks; float16 up to 2048; bfloat16 up to 256). Past that, and on a sparse last
bucket, the counts travel in that float32 all-reduce of their own too (one extra collective
per iteration, only for such configurations).

Buckets are averaged as DDP's reducer averages them without a comm hook: every gradient
multiplied by ``1 / world_size`` (``at::mul_out(bucket_view, grad, 1. / div_factor_)`` in
``Reducer::mark_variable_ready_dense``), then summed. ``x / 3`` and ``x * (1 / 3)`` differ
in the last bit for some ``x``: dividing, as torch's ``allreduce_hook`` does, rounds apart
from DDP at 3 ranks (``tests/test_three_rank_rounding.py`` holds the hook to DDP's
multiplication bit for bit, on torch 1.9.1 to 2.14.1). Two DDP configurations divide
instead, and there the averages may differ from plain DDP's in that last bit where
``1 / world_size`` is inexact: ``gradient_as_bucket_view=True`` with gradients zeroed in
place (not set to None) between iterations, where DDP divides each gradient that already
is its bucket's view (``bucket_view.div_(div_factor_)``; the hook receives the bucket after
DDP made every gradient its view, so it cannot tell which were), and torch 2.13's
``batched_grad_copy=True``, which divides the flat bucket.

The counts lengthen the last bucket's all-reduce, and a collective's summation order may
depend on its length: gloo's ring all-reduce splits a tensor into one chunk per rank and
adds each chunk's addends starting at another rank, so an element of the last bucket near a
chunk boundary may move to the next chunk and be summed in another order. At 2 ranks that
changes nothing (two addends have one sum); at 3 and more, such elements of the last bucket
may differ from plain DDP's by the rounding of a reordered sum, every other bucket staying
bit for bit DDP's. Measured at 3 gloo ranks (``tests/test_three_rank_rounding.py``, a toy
of 773 gradient elements, 6 iterations): 12 (torch 1.9.1) and 22 (2.13) of the 4638 reduced
elements differ, by at most 1.5e-8 absolute and 1.94 units of ``u * sum_r |g_r / W|``;
DDP's own fast path and graph search differ in 894 and 933 of them, by up to 2.6 and 3.0
units (a reordered sum of 3 addends: at most 4). NCCL was not measured; its algorithms
depend on the length too. Keeping the gradients' chunks would take a layout computed from
the backend's algorithm (gloo's segment sizes, NCCL's channels and protocols), or a
collective of its own.
"""
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from ..environment.ddp_compat import bucket_buffer, bucket_index, hook_result, is_last_bucket
from ..messages.guard_errors import (builtin_comm_hook_unknown, comm_hook_registered_twice,
                                     counts_not_reduced)

# c10d's own function: the stall guard records the buckets it issues as DDP's, not again as
# Python-level collectives (it replaces only the ``torch.distributed`` namespace's).
_all_reduce = dist.distributed_c10d.all_reduce

#: Largest integer every float dtype represents exactly along with all smaller ones.
_EXACT_INTEGERS = {torch.float16: 2048, torch.bfloat16: 256}


def counts_fit(dtype: torch.dtype, world_size: int) -> bool:
    """Whether a bucket of ``dtype`` can carry counts up to ``world_size`` exactly."""
    return world_size <= _EXACT_INTEGERS.get(dtype, 2**24)


def python_twin(comm_hook_type) -> Callable:
    """The Python hook that does what DDP's built-in C++ hook ``comm_hook_type`` does, in
    the same operations (each divides the bucket, or its fp16 copy, by the group's size
    before the all-reduce; fp16's copies the sum back into the bucket), with the process
    group as its state."""
    # Here, not at import: torch's hooks package loads every hook's module (PowerSGD's too).
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    twins = {dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
             dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook}
    if comm_hook_type not in twins:
        raise ValueError(builtin_comm_hook_unknown(comm_hook_type))
    return twins[comm_hook_type]


def _no_listener(group, index: int, numel: int) -> None:
    pass


class UnusedCountsState:
    """State shared between GuardedDDP and :func:`allreduce_with_unused_counts`.

    Args:
        process_group: The DDP process group (None: the default group).
        local_counts (callable): ``local_counts(device, dtype)`` returns this rank's
            flat 0/1 tensor: unused per open iteration and parameter, then the unreached
            flag (a cached :meth:`zeros` tensor when nothing is unused).
        wrapper (str): The wrapper as its framework's user knows it, for the error.

    Attributes:
        counts (Tensor, optional): The all-reduced counts of the last counted backward.
        bucket_listener (callable): ``bucket_listener(group, index, numel)`` for every
            all-reduce the hook issues (the stall guard's collective record; by default
            nothing).
        user_hook (callable, optional): The user's comm hook, which reduces every bucket
            (:meth:`reduce_with`); None: the buckets are averaged as by DDP's reducer.
        user_state: What the user registered ``user_hook`` with, passed to it as on DDP.
    """

    def __init__(self, process_group, local_counts: Callable, wrapper: str):
        self.process_group = process_group
        self.wrapper = wrapper
        self.local_counts = local_counts
        self.counts: Optional[torch.Tensor] = None
        self.bucket_listener: Callable[[object, int, int], None] = _no_listener
        self.user_hook: Optional[Callable] = None
        self.user_state = None
        self._zeros: Dict[Tuple, torch.Tensor] = {}
        self._reusable: Optional[Tuple[Tuple, torch.Tensor]] = None

    def reduce_with(self, hook: Callable, hook_state, registration: str) -> None:
        """From now on ``hook(hook_state, bucket)`` reduces every bucket; a second hook is
        refused as DDP's reducer refuses it (``registration``: the call that asked)."""
        if self.user_hook is not None:
            raise RuntimeError(comm_hook_registered_twice(registration))
        self.user_hook, self.user_state = hook, hook_state

    def zeros(self, length: int, device, dtype) -> torch.Tensor:
        key = (length, device, dtype)
        if key not in self._zeros:
            self._zeros[key] = torch.zeros(length, device=device, dtype=dtype)
        return self._zeros[key]

    def reusable(self, length: int, device, dtype) -> torch.Tensor:
        """The tensor the last bucket and the counts are all-reduced in, the same one every
        iteration (an iteration's is read back, by DDP and into :attr:`counts`, before the
        next one's last bucket is ready)."""
        key = (length, device, dtype)
        if self._reusable is None or self._reusable[0] != key:
            self._reusable = (key, torch.empty(length, device=device, dtype=dtype))
        return self._reusable[1]

    def take_counts(self) -> torch.Tensor:
        """The counts of the backward that just ended (on the device; nothing waits)."""
        if self.counts is None:
            raise RuntimeError(counts_not_reduced(self.wrapper))
        counts, self.counts = self.counts, None
        return counts


# No return annotation: DDP checks it, and torch 1.9 accepts only a bare ``Future`` where
# newer torch accepts only ``Future[torch.Tensor]``; both accept none.
# DDP's reducer calls it from the backward, which under a compiled train_step (MMEngine's
# Runner with compile=) runs inside a frame Dynamo evaluates: it must never be traced (the
# futures' callbacks run inside it or on the backend's thread, where Dynamo is off). So it is
# registered as ``untraced(allreduce_with_unused_counts)``, when a guarded wrapper is built
# (:func:`untraced` loads Dynamo: never at import).
def allreduce_with_unused_counts(state: UnusedCountsState, bucket: dist.GradBucket):
    """DDP's default all-reduce of ``bucket`` (or the user's hook), with this rank's unused
    counts on the last."""
    group = state.process_group if state.process_group is not None else dist.group.WORLD
    world_size = group.size()
    buffer = bucket_buffer(bucket)

    def reduce_bucket():
        if state.user_hook is not None:
            return state.user_hook(state.user_state, bucket)
        state.bucket_listener(state.process_group, bucket_index(bucket), buffer.numel())
        return _all_reduce(_averaged(buffer, world_size), group=group,
                           async_op=True).get_future().then(
                               lambda fut: hook_result(fut.value()[0]))

    if not is_last_bucket(bucket):
        return reduce_bucket()
    # A sparse bucket (an nn.Embedding(sparse=True), last when it is the input's) has no
    # dense tail to carry the counts on, nor a bucket that a user's hook reduces.
    if state.user_hook is not None or buffer.is_sparse or \
            not counts_fit(buffer.dtype, world_size):
        return _counts_beside(state, bucket, group, reduce_bucket)
    local = state.local_counts(buffer.device, buffer.dtype)
    length = buffer.numel()
    state.bucket_listener(state.process_group, bucket_index(bucket), length + local.numel())
    # The average is written straight into the longer tensor, as DDP's reducer writes it
    # into its bucket: one pass over the bucket, where a new average and a concatenation
    # were two more (4 % of a GPT-2 step on a CPU, whose last bucket holds the embedding).
    combined = state.reusable(length + local.numel(), buffer.device, buffer.dtype)
    # Without autograd, as DDP's reducer fills its buckets: under backward(create_graph=True)
    # the bucket requires grad, and an out= write refuses that.
    with torch.no_grad():
        torch.mul(buffer, 1.0 / world_size, out=combined[:length])
        combined[length:].copy_(local)

    def split(fut):
        reduced = fut.value()[0]
        # A copy: the next iteration writes its own counts where these are.
        state.counts = reduced[length:].clone()
        return hook_result(reduced[:length])

    return _all_reduce(combined, group=group, async_op=True).get_future().then(split)


def _counts_beside(state: UnusedCountsState, bucket: dist.GradBucket, group,
                   reduce_bucket: Callable):
    """The last bucket reduced by ``reduce_bucket()`` (a future of what DDP takes back), the
    counts in a float32 all-reduce of their own, issued first (see the module's
    docstring)."""
    buffer = bucket_buffer(bucket)
    # A copy: the cached zeros of an iteration with nothing unused must stay zeros.
    local = state.local_counts(buffer.device, torch.float32).clone()
    state.bucket_listener(state.process_group, bucket_index(bucket), local.numel())
    reduced_counts = _all_reduce(local, group=group, async_op=True).get_future()
    reduced_bucket = reduce_bucket()

    def keep_counts(fut):
        state.counts = fut.value()[1].value()[0]
        return fut.value()[0].value()

    return torch.futures.collect_all([reduced_bucket, reduced_counts]).then(keep_counts)


def _averaged(buffer: torch.Tensor, world_size: int) -> torch.Tensor:
    """``buffer`` made ready for a sum that averages, as DDP's reducer does: a dense bucket
    multiplied by ``1 / world_size`` in place (it is DDP's own flat copy of the gradients), a
    sparse one divided (``Reducer::mark_variable_ready_sparse``) into a new tensor.

    Never a sparse one in place: a sparse bucket is the parameter's gradient itself, whose
    values an embedding's backward takes as a view of the gradient it received (a reshape),
    and autograd may still pass that gradient to other layers, later in this backward (an
    embedding added to another layer's output: ``relu(stem(x)) + embedding(ids)``). DDP's
    own reducer divides it in place when no comm hook is registered (MMEngine's and mmcv's
    wrappers, DDP's graph search), and so divides those layers' gradients by the world size
    twice (pytorch/pytorch#34904 added that ``div_``); ``tests/test_sparse_gradients.py``
    shows it and holds the guard to the true averages."""
    if buffer.is_sparse:
        return buffer / world_size
    return buffer.mul_(1.0 / world_size)
