"""The values a :class:`~.usage_record.ParamUsageRecord` resolves and the counts kept of them.

:class:`IterationUsage` is one resolved iteration: which parameters went unused, on which
ranks, and how many ranks left parameters unreached (what makes plain DDP fail). The record
returns each as a :class:`ResolvedIteration` to whoever asked it to resolve (the guard, which
hands them on to :class:`UnusedParamsHook`; the hook's own record under another wrapper).
:class:`UsageStatistics` accumulates them over the run and is checkpointed with it, so that a
resumed run's summary covers the whole run.
"""
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Tuple

from ..messages.guard_errors import checkpoint_counts_other_parameters


@dataclass(frozen=True)
class IterationUsage:
    """Which parameters went unused in one iteration.

    Attributes:
        iteration (int): The runner iteration (0-based, as ``runner.iter``).
        rank (int): The rank this record lives on.
        local_unused (tuple[int]): Ids (see :class:`ParamTable`) unused on this rank.
        per_rank_unused (tuple[tuple[int]]): Unused ids of every rank, indexed by rank; a
            single process is one rank.
        ranks_left_unreached (int): How many ranks left parameters unreached in this
            iteration's backward, which is what makes plain DDP fail; 0 in a micro-step that
            reduces nothing (``no_sync``). Undefined gradients do not count here: DDP's fast
            path reduces them as zeros without failing.
    """
    iteration: int
    rank: int
    local_unused: Tuple[int, ...]
    per_rank_unused: Tuple[Tuple[int, ...], ...]
    ranks_left_unreached: int = 0

    # Cached: the wrapper, the policy, the statistics and the hook all ask, every iteration.
    @cached_property
    def unused_on_all_ranks(self) -> FrozenSet[int]:
        sets = [set(ids) for ids in self.per_rank_unused]
        return frozenset(set.intersection(*sets))

    @cached_property
    def unused_on_any_rank(self) -> FrozenSet[int]:
        return frozenset().union(*self.per_rank_unused)

    def ranks_of(self, index: int) -> List[int]:
        return [rank for rank, ids in enumerate(self.per_rank_unused) if index in ids]

    @cached_property
    def ranks_differ(self) -> bool:
        return len(set(self.per_rank_unused)) > 1


class ResolvedIteration(NamedTuple):
    """An iteration as the record resolved it: its usage, and whether its unused sets differ
    from the previous iteration's (:meth:`UsageStatistics.update`)."""
    usage: IterationUsage
    changed: bool


class UsageStatistics:
    """Counts accumulated over the run, checkpointed with the run (see ``state_dict``).

    Args:
        num_params (int): Length of the :class:`ParamTable`.
    """

    def __init__(self, num_params: int):
        self.num_params = num_params
        self.iterations_seen = 0
        self.unused_iterations = [0] * num_params
        self.ranks_unused: List[set] = [set() for _ in range(num_params)]
        self.first_unused_iteration: Optional[int] = None
        #: Where plain DDP would first fail: unused parameters that are only undefined
        #: gradients do not make it fail.
        self.first_unreached_iteration: Optional[int] = None
        self.iterations_with_unused = 0
        self.iterations_ranks_differ = 0
        self.set_changes = 0
        self._previous: Optional[Tuple[Tuple[int, ...], ...]] = None

    def update(self, usage: IterationUsage) -> bool:
        """Adds one iteration; returns whether its unused sets differ from the previous one."""
        self.iterations_seen += 1
        for index in usage.unused_on_any_rank:
            self.unused_iterations[index] += 1
            self.ranks_unused[index].update(usage.ranks_of(index))
        if usage.unused_on_any_rank:
            self.iterations_with_unused += 1
            if self.first_unused_iteration is None:
                self.first_unused_iteration = usage.iteration
        if usage.ranks_left_unreached and self.first_unreached_iteration is None:
            self.first_unreached_iteration = usage.iteration
        if usage.ranks_differ:
            self.iterations_ranks_differ += 1
        changed = self._previous is not None and usage.per_rank_unused != self._previous
        self.set_changes += changed
        self._previous = usage.per_rank_unused
        return changed

    @property
    def ever_unused(self) -> List[int]:
        return [i for i, count in enumerate(self.unused_iterations) if count]

    def state_dict(self) -> Dict:
        return dict(
            num_params=self.num_params,
            iterations_seen=self.iterations_seen,
            unused_iterations=list(self.unused_iterations),
            ranks_unused=[sorted(r) for r in self.ranks_unused],
            first_unused_iteration=self.first_unused_iteration,
            first_unreached_iteration=self.first_unreached_iteration,
            iterations_with_unused=self.iterations_with_unused,
            iterations_ranks_differ=self.iterations_ranks_differ,
            set_changes=self.set_changes,
            previous=None if self._previous is None else [list(r) for r in self._previous])

    def load_state_dict(self, state: Dict) -> None:
        if state['num_params'] != self.num_params:
            raise ValueError(
                checkpoint_counts_other_parameters(state['num_params'], self.num_params))
        self.iterations_seen = state['iterations_seen']
        self.unused_iterations = list(state['unused_iterations'])
        self.ranks_unused = [set(r) for r in state['ranks_unused']]
        self.first_unused_iteration = state['first_unused_iteration']
        # Checkpoints written before this field existed counted every unused parameter as
        # failing.
        self.first_unreached_iteration = state.get('first_unreached_iteration',
                                                   state['first_unused_iteration'])
        self.iterations_with_unused = state['iterations_with_unused']
        self.iterations_ranks_differ = state['iterations_ranks_differ']
        self.set_changes = state['set_changes']
        previous = state['previous']
        self._previous = None if previous is None else tuple(tuple(r) for r in previous)
