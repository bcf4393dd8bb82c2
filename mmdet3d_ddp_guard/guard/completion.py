"""What happens between a backward and the optimizer step: DDP's buckets completed with
zero gradients where the backward left parameters unreached, the counts carried on the last
bucket, the optimizer kept off the parameters no rank used, and the strict and static-graph
stops; and what the guard does with each iteration the usage record resolves.

An adapter (MMEngine's GuardedDDP, mmcv 1.x's guarded MMDistributedDataParallel) builds one
:class:`UnusedCompletion` per wrapper and calls :meth:`UnusedCompletion.settle` between the
backward and the optimizer step, where its framework allows it, with the iteration the
adapter read from its framework. The completion takes what it needs when it is built (the DDP
whose reducer it completes, the usage record, the policy, a logger) or is called with, and
never calls back into the wrapper.
"""
from typing import Callable, List, Optional, Tuple

import torch
from torch.nn.parallel import DistributedDataParallel

from ..environment.ddp_compat import untraced
from ..messages.decision_text import decision_message
from .decision_policy import DecisionPolicy, Mode
from .errors import UnusedParametersError, static_graph_changed_error, unused_parameters_error
from .iteration_usage import ResolvedIteration
from .unused_counts_comm_hook import UnusedCountsState, allreduce_with_unused_counts
from .usage_record import ParamUsageRecord


class UnusedCompletion:
    """Settles the unused parameters of each backward of ``ddp``.

    Args:
        ddp (DistributedDataParallel): The wrapper; in modes ``'complete'`` and ``'strict'``
            its gradient all-reduce goes through the comm hook that carries the counts.
        record (ParamUsageRecord): The usage record built on ``ddp``'s module before DDP.
        policy (DecisionPolicy): The decision, revised as the record resolves iterations.

    **Resolved iterations.** Whatever resolves the record's open iterations (the wrapper's
    :meth:`resolve` once the next forward returned, a report's :meth:`take_for_report`, or
    :meth:`settle` in a single process and at a forced exchange), the completion acts on
    each, in order: in mode ``'strict'``, an iteration in which some rank left parameters
    unreached makes the stop (:class:`UnusedParametersError`, the first such iteration's);
    otherwise the policy observes it, and a revision's message is kept for the adapter to
    log (:meth:`take_revisions`): the completion calls no logger. The stop is raised at once
    unless a report keeps the resolved iterations (:meth:`keep_for_report`): the report then
    writes the iteration that stopped the run before it raises the stop it is handed (or
    the wrapper does, at the next forward, if the report never asked).
    """

    def __init__(self, ddp: DistributedDataParallel, record: ParamUsageRecord,
                 policy: DecisionPolicy):
        self.record = record
        self.policy = policy
        self._revisions: List[str] = []
        #: Backwards settled so far (every micro-step of an accumulation window counts): the
        #: iteration number an adapter gives outside its framework's runner.
        self.iterations_ended = 0
        self._counts: Optional[UnusedCountsState] = None
        # (this rank's unused ids, whether some were unreached) while the completion runs.
        self._completing: Optional[Tuple[Tuple[int, ...], bool]] = None
        self._static_graph_unused = None
        self._stop: Optional[UnusedParametersError] = None
        #: The resolved iterations a report has not taken yet; None while no report keeps
        #: them (then nothing is kept: a run without the hook keeps no history).
        self._kept_for_report: Optional[List[ResolvedIteration]] = None
        if policy.decision.mode in (Mode.COMPLETE, Mode.STRICT):
            self._counts = UnusedCountsState(ddp.process_group, self._local_counts,
                                             policy.lines.wrapper)
            # DDP's own method: the wrapper's override hands a user's hook to the counts'.
            DistributedDataParallel.register_comm_hook(ddp, self._counts,
                                                       untraced(allreduce_with_unused_counts))
            record.resolved_by_counts = True

    @property
    def carries_counts(self) -> bool:
        """Whether the gradient all-reduce runs through the counts' comm hook."""
        return self._counts is not None

    def watch_buckets(self, listener: Callable[[object, int, int], None]) -> None:
        """``listener(group, bucket_index, numel)`` for every gradient bucket the counts'
        comm hook all-reduces (the stall guard's record); nothing in the modes without it."""
        if self._counts is not None:
            self._counts.bucket_listener = listener

    def reduce_buckets_with(self, hook: Callable, hook_state, registration: str) -> None:
        """The user's comm hook reduces every bucket from now on, the counts travelling
        beside it (only in the modes that carry them: :attr:`carries_counts`)."""
        self._counts.reduce_with(hook, hook_state, registration)

    def settle(self, reduces: bool, iteration: int) -> List[torch.Tensor]:
        """After the backward of ``iteration``: ``reduces`` is False inside ``no_sync``
        (accumulation). Returns the parameters whose gradients it completed with zeros for
        DDP."""
        record = self.record
        local_unused = record.local_unused()
        # Only a backward that reduces leaves DDP's buckets waiting for unreached parameters.
        unreached = record.local_unreached() if reduces and local_unused else ()
        self.iterations_ended += 1
        if self.policy.decision.mode == Mode.STATIC_GRAPH and reduces:
            self._check_static_graph(local_unused, iteration)
        if self._counts is None or not reduces:
            # No counts in this backward: exchanged later (modes 'find_unused' and
            # 'static_graph'), or carried by the window's last bucket (accumulation).
            self._act_on(record.end_local_iteration(iteration, local_unused, bool(unreached)))
            if self._kept_for_report is None:
                self.raise_stop()
            return []
        # DDP's reducer still waits for parameters frozen since it was built, too.
        frozen = record.local_frozen()
        # What DDP's graph search leaves untouched must stay untouched: a gradient that was
        # None before this window (set_to_none=True, torch >= 2.0's default) goes back to
        # None below; one zeroed in place (set_to_none=False) stays a zero tensor. Read
        # before the completion backward writes zeros into the unreached ones.
        params = record.table.params
        untouched_none = {i for i in local_unused if params[i].grad is None}
        untouched_none.update(record.local_undefined())
        completed = [params[i] for i in unreached]
        if unreached or frozen:
            self._completing = (local_unused, bool(unreached))
            try:
                _complete([params[i] for i in unreached + frozen],
                          [i in record.table.sparse for i in unreached + frozen],
                          [params[i] for i in frozen])
            finally:
                self._completing = None
        counts = self._counts.take_counts()
        unused_in_window = set(local_unused) & untouched_none
        for _, ids in record.open_iterations:
            unused_in_window.intersection_update(ids)
        # Nothing resolves here: the counts of this iteration are still on their way.
        record.end_local_iteration(iteration, local_unused, bool(unreached))
        if self.policy.decision.mode == Mode.COMPLETE and unused_in_window:
            self._release_unused_everywhere(sorted(unused_in_window), counts)
        record.expect_counts(counts)
        return completed

    def shadow(self, shadow_all_reduce: Callable[[], None], reduces: bool) -> None:
        """A rank that joined (torch's ``Join``: uneven inputs) shadows a step of the ranks
        that have not: ``shadow_all_reduce()`` runs DDP's all-reduce of every bucket with
        zero gradients (``reduces``; inside the active ranks' ``no_sync`` nothing is
        reduced, and only the micro-step is counted). The counts ride the last bucket as
        in a step of its own, so that the active ranks' all-reduce of it, and the gather
        their resolution may make, are matched; this rank counts as having left unused
        what every rank left unused in its own last iteration and since, as DDP's graph
        search counts a joined rank (its last all-reduced used map, which each shadow
        all-reduces again). In the modes without counts, DDP's shadow alone."""
        if self._counts is None:
            if reduces:
                shadow_all_reduce()
            return
        self.iterations_ended += 1
        iteration = self.iterations_ended - 1
        if not reduces:
            self.record.end_local_iteration(iteration, self._joined_unused(), False)
            return
        # Where the active ranks resolve, once their forward has returned.
        self.resolve()
        self.raise_stop()
        unused = self._joined_unused()
        self._completing = (unused, False)
        try:
            shadow_all_reduce()
        finally:
            self._completing = None
        self.record.end_local_iteration(iteration, unused, False)
        self.record.expect_counts(self._counts.take_counts())

    def _joined_unused(self) -> Tuple[int, ...]:
        """What a joined rank counts as unused: what every rank left unused in the last
        iteration resolved (its own last one, then each shadow's)."""
        last = self.record.last
        return tuple(sorted(last.unused_on_all_ranks)) if last is not None else ()

    def _local_counts(self, device, dtype) -> torch.Tensor:
        """This rank's part of the counts on DDP's last bucket (see the comm hook)."""
        record = self.record
        current, unreached = self._completing or (record.local_unused(), False)
        steps = [ids for _, ids in record.open_iterations] + [current]
        if not unreached and not any(steps):
            return self._counts.zeros(len(steps) * len(record.table) + 1, device, dtype)
        mask = record.local_mask(device, dtype, current)
        return torch.cat([mask, mask.new_full((1, ), float(unreached))])

    def _release_unused_everywhere(self, indices, counts: torch.Tensor) -> None:
        """Sets grad None for this rank's unused parameters that no rank used in any
        micro-step of the window and whose grad was None before it, as DDP's graph search
        leaves them, so that the optimizer skips them (no momentum, no weight decay). Reads
        only these parameters' counts: a host sync on this slow path alone."""
        params = self.record.table.params
        per_step = counts[:-1].view(-1, len(params))[:, indices]
        everywhere = (per_step > self.record.world_size - 0.5).all(dim=0).tolist()
        for index, unused_everywhere in zip(indices, everywhere):
            if unused_everywhere:
                params[index].grad = None

    def resolve(self, exchange: bool = False) -> None:
        """Resolves what the record can (with ``exchange``, every open iteration, by one
        ``all_gather`` that every rank must make at the same point) and acts on it."""
        resolved = self.record.resolve()
        if exchange:
            resolved += self.record.exchange()
        self._act_on(resolved)

    def keep_for_report(self) -> None:
        """From now on the resolved iterations are kept until :meth:`take_for_report`."""
        if self._kept_for_report is None:
            self._kept_for_report = []

    def take_for_report(self, exchange: bool
                        ) -> Tuple[List[ResolvedIteration], Optional[UnusedParametersError]]:
        """Resolves as :meth:`resolve` does, then hands over every iteration resolved since
        the last call, in order, and the strict stop, for the report to raise once it has
        written them."""
        self.resolve(exchange)
        kept, self._kept_for_report = self._kept_for_report or [], []
        stop, self._stop = self._stop, None
        return kept, stop

    def take_revisions(self) -> List[str]:
        """The messages of the decision's revisions since the last call, in order."""
        revisions, self._revisions = self._revisions, []
        return revisions

    def raise_stop(self) -> None:
        """Raises the strict stop that resolved iterations made, if any."""
        stop, self._stop = self._stop, None
        if stop is not None:
            raise stop

    def _act_on(self, resolved: List[ResolvedIteration]) -> None:
        record, policy = self.record, self.policy
        for usage, _ in resolved:
            if policy.decision.mode == Mode.STRICT and usage.ranks_left_unreached:
                if self._stop is None:
                    self._stop = unused_parameters_error(
                        record.table, dict(enumerate(usage.per_rank_unused)), usage.iteration,
                        policy.decision.source, policy.lines)
                continue
            revised = policy.observe(usage, record.statistics, record.table)
            if revised is not None:
                self._revisions.append(decision_message(revised))
        if self._kept_for_report is not None:
            self._kept_for_report.extend(resolved)

    def _check_static_graph(self, local_unused, iteration: int) -> None:
        if self._static_graph_unused is None:
            self._static_graph_unused = local_unused
        elif local_unused != self._static_graph_unused:
            raise static_graph_changed_error(self.record.table, self._static_graph_unused,
                                             local_unused, iteration, self.record.rank,
                                             self.policy.lines)


def _complete(params: List[torch.Tensor], sparse: List[bool],
              frozen: List[torch.Tensor]) -> None:
    """One backward of zero gradients into ``params``: DDP's hooks fire for them, and their
    buckets are reduced in order. A sparse parameter gets an empty sparse gradient (DDP
    reduces sparse buckets as sparse tensors). A ``frozen`` one requires grad for this
    backward only, and keeps no gradient it did not have, as under DDP's graph search."""
    had_no_grad = [p.grad is None for p in frozen]
    for param in frozen:
        param.requires_grad_(True)
    for param, is_sparse in zip(params, sparse):
        if is_sparse and param.grad is not None and param.grad._nnz() == 0:
            # A sparse gradient zeroed in place (zero_grad(set_to_none=False), torch < 2.0's
            # default) has every dimension sparse; the zeros added to it would keep that
            # layout, which gloo cannot reduce with the other ranks' embedding gradients.
            param.grad = None
    try:
        torch.autograd.backward(params, [_zero_gradient(p, is_sparse)
                                         for p, is_sparse in zip(params, sparse)])
    finally:
        for param, none_before in zip(frozen, had_no_grad):
            param.requires_grad_(False)
            if none_before:
                param.grad = None


def _zero_gradient(param: torch.Tensor, sparse: bool) -> torch.Tensor:
    if not sparse:
        return torch.zeros_like(param)
    # No index, so no element: the embedding's layout (one sparse dimension).
    return torch.sparse_coo_tensor(
        torch.empty((1, 0), dtype=torch.long, device=param.device),
        torch.empty((0, ) + tuple(param.shape[1:]), dtype=param.dtype, device=param.device),
        param.shape)
