"""The per-iteration record of which parameters autograd reached: the one source of truth.

:class:`GuardedDDP` and :class:`UnusedParamsHook` both read one :class:`ParamUsageRecord`.
Under ``GuardedDDP`` the wrapper owns it and the hook borrows it; without the wrapper the hook
creates it. Either way a model carries one set of tracking hooks, never two.

Ground truth: a parameter is *unused* in an iteration on a rank when autograd did not
accumulate a gradient into it during that iteration's backward on that rank. A gradient that
exists and is exactly zero (CenterPoint's task heads when a class has no box) is *used*: DDP
reduces it normally and it can never cause DDP's "Expected to have finished reduction" error.

An iteration is one runner iteration: one forward and one backward. With gradient
accumulation (``accumulative_counts > 1``) each micro-step is its own iteration, as in
MMEngine's own iteration counter and log lines.
"""
from typing import Callable, List, Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

from ..messages.guard_errors import counts_for_other_iterations, resolved_for_other_iterations
from .accumulate_grad_hooks import register_grad_accumulated_hook
from .iteration_usage import IterationUsage, ResolvedIteration, UsageStatistics
from .param_table import ParamTable


class ParamUsageRecord:
    """Tracks, per iteration and per rank, which trainable parameters autograd reached.

    **Locally.** One hook per parameter (:mod:`.accumulate_grad_hooks`) files the parameter
    as *reached* when autograd accumulated a gradient into it, or as *undefined* when the
    hook ran but left ``.grad`` None (a custom autograd Function that returns None for it:
    DDP's graph search counts such a parameter as unused on that rank, and so do we). The
    hook runs before DDP's own hook on the parameter; on the ``AccumulateGrad`` node path
    (torch < 2.1, and 2.1.2) only if the record is created before the DDP wrapper, as
    GuardedDDP does. An undefined gradient in a
    micro-step whose parameter already holds a gradient from an earlier micro-step of the
    window leaves that gradient in place: it counts as used, as for DDP, which reduces the
    window's gradient. Cost: one hook call per parameter per backward; deciding that
    nothing is unused is a length check.

    **Across ranks.** Iterations end locally (:meth:`end_local_iteration`) and wait as *open*
    iterations until their per-rank detail is known, in one of two ways:

    - Counts (GuardedDDP's modes 'complete' and 'strict'): DDP's last bucket all-reduce
      carried, for every open iteration, how many ranks did not use each parameter; the
      wrapper hands them over with :meth:`expect_counts` and :meth:`resolve` reads them
      after the optimizer step. A parameter unused on no rank or on every rank needs no
      rank identities; only when some parameter was unused on some ranks but not all does
      the same ``all_gather`` as in the exchange below follow, decided on every
      rank from the same reduced counts. No collective of ours otherwise.
    - Exchange (any other wrapper): :meth:`exchange` gathers the local masks of every open
      iteration in one ``all_gather`` (``K x (P + 1)`` bytes: the extra byte per iteration
      says whether the rank left parameters unreached, as opposed to undefined gradients
      only). The caller chooses when (the hook: at log lines, checkpoints and the end), so
      the exchange costs one small collective per batch of iterations instead of one per
      iteration; past ``max_open`` open iterations the record exchanges on its own, so
      memory stays bounded.

    Resolution is a pull: :meth:`resolve`, :meth:`exchange` and :meth:`end_local_iteration`
    return the iterations they resolved, in order, as :class:`ResolvedIteration` s, to the
    caller, which acts on them; the record calls nobody. Under GuardedDDP the guard is that
    caller, and hands them on to :class:`UnusedParamsHook` when the hook asks.

    Args:
        module (nn.Module): The unwrapped model.
        process_group (ProcessGroup, optional): The group to gather over; the default group
            when None. Ignored when torch.distributed is not initialised.
        max_open (int): Open iterations kept before an exchange is forced. Defaults to 50.
    """

    def __init__(self, module: nn.Module, process_group=None, max_open: int = 50):
        self.table = ParamTable(module)
        self.statistics = UsageStatistics(len(self.table))
        self.last: Optional[IterationUsage] = None
        self.process_group = process_group
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(process_group) if distributed else 0
        self.world_size = dist.get_world_size(process_group) if distributed else 1
        self.max_open = max_open
        #: Set by GuardedDDP when counts on DDP's last bucket resolve the open iterations.
        self.resolved_by_counts = False
        self._reached: set = set()
        self._undefined: set = set()
        # (iteration, local unused ids, whether this rank left some of them unreached)
        self._open: List[Tuple[int, Tuple[int, ...], bool]] = []
        self._counts: Optional[_CountsInFlight] = None
        self._reached_listener: Optional[Callable[[torch.Tensor], None]] = None
        self._handles = [register_grad_accumulated_hook(p, self._on_grad_accumulated)
                         for p in self.table.params]

    def _on_grad_accumulated(self, param: torch.Tensor) -> None:
        (self._reached if param.grad is not None else self._undefined).add(param)
        if self._reached_listener is not None:
            self._reached_listener(param)

    def on_parameter_reached(self, listener: Callable[[torch.Tensor], None]) -> None:
        """``listener(param)`` after each gradient the record files, inside the backward
        (:class:`~.step_backwards.StepBackwards` tells from it when a step's backwards are
        over, for a framework that runs them where the wrapper cannot)."""
        self._reached_listener = listener

    def start_iteration(self) -> None:
        self._reached.clear()
        self._undefined.clear()

    def local_unused(self) -> Tuple[int, ...]:
        """Ids without a gradient from this iteration's backward on this rank so far:
        unreached, or reached with an undefined gradient. A parameter frozen since the
        wrapper was built (``requires_grad=False``) is not unused: see :meth:`local_frozen`."""
        reached = self._reached
        if len(reached) == len(self.table):
            return ()
        return tuple(i for i, p in enumerate(self.table.params)
                     if p not in reached and p.requires_grad)

    def local_unreached(self) -> Tuple[int, ...]:
        """Ids that autograd did not reach at all on this rank (DDP's hooks did not fire:
        their buckets wait)."""
        reached, undefined = self._reached, self._undefined
        if len(reached) == len(self.table):
            return ()
        return tuple(i for i, p in enumerate(self.table.params)
                     if p not in reached and p not in undefined and p.requires_grad)

    def local_frozen(self) -> Tuple[int, ...]:
        """Ids of parameters that required grad when DDP was built and no longer do (frozen
        after warm-up): DDP's reducer still waits for them, and DDP's graph search marks
        them ready as unused, leaving their gradient alone."""
        if len(self._reached) == len(self.table):
            return ()
        return tuple(i for i, p in enumerate(self.table.params)
                     if not p.requires_grad and p not in self._reached)

    def local_undefined(self) -> Tuple[int, ...]:
        """Ids that this rank's backward reached with an undefined gradient (``.grad``
        stayed None)."""
        undefined = self._undefined
        if not undefined:
            return ()
        return tuple(i for i, p in enumerate(self.table.params) if p in undefined)

    @property
    def open_iterations(self) -> List[Tuple[int, Tuple[int, ...]]]:
        """(iteration, local unused ids) of the iterations not yet resolved across ranks."""
        return [(iteration, ids) for iteration, ids, _ in self._open]

    def end_local_iteration(self, iteration: int,
                            local_unused: Optional[Tuple[int, ...]] = None,
                            left_unreached: Optional[bool] = None
                            ) -> List[ResolvedIteration]:
        """Ends the iteration on this rank; its per-rank detail follows later, except in a
        single process, and when ``max_open`` iterations are open (an exchange): returns
        the iterations this resolved.

        Args:
            iteration (int): The runner iteration.
            local_unused (tuple[int], optional): This rank's unused ids, when the caller
                took them with :meth:`local_unused` before running backwards of its own
                (which would mark more parameters as reached).
            left_unreached (bool, optional): Whether a reducing backward left some of them
                unreached, given with ``local_unused``; by default read from the record.
        """
        local = self.local_unused() if local_unused is None else local_unused
        if left_unreached is None:
            left_unreached = bool(self.local_unreached())
        self._open.append((iteration, local, left_unreached))
        if self.world_size == 1 and not self.resolved_by_counts:
            return self._resolved([(local, )], [int(left_unreached)])
        if not self.resolved_by_counts and len(self._open) >= self.max_open:
            return self.exchange()
        return []

    def expect_counts(self, counts: torch.Tensor) -> None:
        """Hands over the reduced counts of all open iterations (a ``K x P + 1`` device
        tensor: per open iteration and parameter, the number of ranks that did not use it;
        last, the number of ranks that left parameters unreached). The copy to the host
        starts now; nothing waits for it until :meth:`resolve`. Counts not resolved yet are
        replaced: these cover every open iteration, theirs too."""
        self._counts = _CountsInFlight(counts)

    def resolve(self) -> List[ResolvedIteration]:
        """Resolves the open iterations from the counts handed over, if any (waits for their
        copy: a host sync; a collective only when ranks differ), and returns them. The
        guarded wrapper calls it once the next step's forward has returned, or earlier,
        after the optimizer step, when a report hook asks for its log line: the later call
        finds nothing."""
        if self._counts is None:
            return []
        counts, self._counts = self._counts.values(), None
        num_params, world = len(self.table), self.world_size
        steps = len(self._open)
        if counts.numel() != steps * num_params + 1:
            raise RuntimeError(counts_for_other_iterations(
                (counts.numel() - 1) // max(num_params, 1), steps))
        unused = counts[:-1].view(steps, num_params) > 0.5
        if (unused & (counts[:-1].view(steps, num_params) < world - 0.5)).any():
            return self._resolved(*self._gather_open())
        per_rank = [(tuple(row.nonzero().flatten().tolist()), ) * world for row in unused]
        # Only the window's last micro-step reduces, and only there can DDP fail.
        return self._resolved(per_rank, [0] * (steps - 1) + [round(counts[-1].item())])

    def exchange(self) -> List[ResolvedIteration]:
        """Resolves every open iteration with one ``all_gather`` (every rank must call it at
        the same point) and returns them; nothing when no iteration is open, or when counts
        will resolve them (the micro-steps of an accumulation window ride the window's last
        bucket)."""
        if self._open and self.world_size > 1 and not self.resolved_by_counts:
            return self._resolved(*self._gather_open())
        return []

    def local_mask(self, device, dtype,
                   current: Optional[Tuple[int, ...]] = None) -> torch.Tensor:
        """The open iterations' (then ``current``'s) local unused ids as a flat 0/1 tensor
        on ``device``, one row of parameters per iteration."""
        steps = [ids for _, ids, _ in self._open] + ([] if current is None else [current])
        mask = torch.zeros(len(steps) * len(self.table), dtype=dtype)
        for k, ids in enumerate(steps):
            mask[[k * len(self.table) + i for i in ids]] = 1
        return mask.to(device)

    def _gather_open(self) -> Tuple[List[Tuple[Tuple[int, ...], ...]], List[int]]:
        """Every rank's unused ids of every open iteration, and per iteration how many ranks
        left parameters unreached."""
        device = (torch.device('cuda', torch.cuda.current_device())
                  if dist.get_backend(self.process_group) == 'nccl' else torch.device('cpu'))
        steps = len(self._open)
        left_unreached = torch.tensor([left for _, _, left in self._open], dtype=torch.uint8)
        local_masks = torch.cat([self.local_mask(device, torch.uint8), left_unreached.to(device)])
        gathered = [torch.empty_like(local_masks) for _ in range(self.world_size)]
        dist.all_gather(gathered, local_masks, group=self.process_group)
        gathered = torch.stack(gathered).cpu()
        masks = gathered[:, :-steps].view(self.world_size, steps, len(self.table))
        per_rank = [tuple(tuple(masks[rank, k].nonzero().flatten().tolist())
                          for rank in range(self.world_size)) for k in range(steps)]
        return per_rank, gathered[:, -steps:].sum(dim=0).tolist()

    def _resolved(self, per_rank_of_open: List[Tuple[Tuple[int, ...], ...]],
                  ranks_left_unreached: List[int]) -> List[ResolvedIteration]:
        """The open iterations, resolved with their per-rank detail and counted."""
        if len(per_rank_of_open) != len(self._open):
            raise RuntimeError(resolved_for_other_iterations(len(per_rank_of_open),
                                                             len(self._open)))
        opened, self._open = self._open, []
        resolved = []
        for (iteration, local, _), per_rank, unreached in zip(opened, per_rank_of_open,
                                                              ranks_left_unreached):
            self.last = IterationUsage(iteration, self.rank, local, tuple(per_rank), unreached)
            resolved.append(ResolvedIteration(self.last, self.statistics.update(self.last)))
        return resolved

    def remove(self) -> None:
        """Detaches the autograd hooks (the record keeps what it has seen)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []


class _CountsInFlight:
    """Reduced counts on their way to the host: on CUDA a non-blocking copy into pinned
    memory and an event, so that handing them over never waits for the GPU."""

    def __init__(self, counts: torch.Tensor):
        if counts.is_cuda:
            self._host = torch.empty(counts.shape, dtype=torch.float32, pin_memory=True)
            self._host.copy_(counts.float(), non_blocking=True)
            self._ready = torch.cuda.Event()
            self._ready.record()
        else:
            self._host, self._ready = counts, None

    def values(self) -> torch.Tensor:
        """The counts as a float32 tensor on the host."""
        if self._ready is not None:
            self._ready.synchronize()
        return self._host.float()
