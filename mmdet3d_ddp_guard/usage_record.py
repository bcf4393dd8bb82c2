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
from dataclasses import dataclass
from functools import cached_property
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

from .param_table import ParamTable

MIN_TORCH = (2, 1)


def check_torch_version(version: str = torch.__version__) -> None:
    """Fail early, naming the fix, on a torch without post-accumulate-grad hooks."""
    major, minor = (int(part) for part in version.split('+')[0].split('.')[:2])
    if (major, minor) < MIN_TORCH:
        raise RuntimeError(
            f'mmdet3d_ddp_guard needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} '
            f'(Tensor.register_post_accumulate_grad_hook), but torch {version} is '
            'installed. Upgrade torch, or remove mmdet3d_ddp_guard from custom_imports '
            "and set find_unused_parameters=True in your config instead.")


@dataclass(frozen=True)
class IterationUsage:
    """Which parameters went unused in one iteration.

    Attributes:
        iteration (int): The runner iteration (0-based, as ``runner.iter``).
        rank (int): The rank this record lives on.
        local_unused (tuple[int]): Ids (see :class:`ParamTable`) unused on this rank.
        per_rank_unused (tuple[tuple[int]]): Unused ids of every rank, indexed by rank; a
            single process is one rank.
    """
    iteration: int
    rank: int
    local_unused: Tuple[int, ...]
    per_rank_unused: Tuple[Tuple[int, ...], ...]

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
            iterations_with_unused=self.iterations_with_unused,
            iterations_ranks_differ=self.iterations_ranks_differ,
            set_changes=self.set_changes,
            previous=None if self._previous is None else [list(r) for r in self._previous])

    def load_state_dict(self, state: Dict) -> None:
        if state['num_params'] != self.num_params:
            raise ValueError(
                f'UsageStatistics: the checkpoint counts {state["num_params"]} trainable '
                f'parameters but this model has {self.num_params}; resume with the same '
                'model, or drop the hook state from the checkpoint (meta["unused_params"]).')
        self.iterations_seen = state['iterations_seen']
        self.unused_iterations = list(state['unused_iterations'])
        self.ranks_unused = [set(r) for r in state['ranks_unused']]
        self.first_unused_iteration = state['first_unused_iteration']
        self.iterations_with_unused = state['iterations_with_unused']
        self.iterations_ranks_differ = state['iterations_ranks_differ']
        self.set_changes = state['set_changes']
        previous = state['previous']
        self._previous = None if previous is None else tuple(tuple(r) for r in previous)


class ParamUsageRecord:
    """Tracks, per iteration and per rank, which trainable parameters autograd reached.

    One ``register_post_accumulate_grad_hook`` per parameter adds the parameter to a set
    when autograd accumulates its gradient (the hook is ``set.add`` itself: no Python frame
    per call). :meth:`close_iteration` turns the set into an :class:`IterationUsage` and, in
    a distributed run, shares every rank's unused ids with one ``all_gather`` of a byte mask
    (one small collective per iteration, never one per parameter).

    Cost: one C-level hook call per parameter per backward, one byte per parameter
    gathered per iteration.

    Args:
        module (nn.Module): The unwrapped model.
        process_group (ProcessGroup, optional): The group to gather over; the default group
            when None. Ignored when torch.distributed is not initialised.
    """

    def __init__(self, module: nn.Module, process_group=None):
        check_torch_version()
        self.table = ParamTable(module)
        self.statistics = UsageStatistics(len(self.table))
        self.last: Optional[IterationUsage] = None
        self.last_changed = False
        self.process_group = process_group
        distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(process_group) if distributed else 0
        self.world_size = dist.get_world_size(process_group) if distributed else 1
        self._reached: set = set()
        self._handles = [p.register_post_accumulate_grad_hook(self._reached.add)
                         for p in self.table.params]

    def start_iteration(self) -> None:
        self._reached.clear()

    def local_unused(self) -> Tuple[int, ...]:
        """Ids not reached since :meth:`start_iteration` on this rank."""
        reached = self._reached
        return tuple(i for i, p in enumerate(self.table.params) if p not in reached)

    def close_iteration(self, iteration: int,
                        local_unused: Optional[Tuple[int, ...]] = None,
                        no_rank_had_unused: bool = False) -> IterationUsage:
        """Ends the iteration; in a distributed run a collective (every rank must call it,
        with the same ``no_rank_had_unused``) unless ``no_rank_had_unused``.

        Args:
            iteration (int): The runner iteration.
            local_unused (tuple[int], optional): This rank's unused ids, when the caller
                took them with :meth:`local_unused` before running backwards of its own
                (which would mark more parameters as reached).
            no_rank_had_unused (bool): The caller already knows, from a collective of its
                own, that no rank left a parameter unused: nothing to gather.
        """
        local = self.local_unused() if local_unused is None else local_unused
        if self.world_size == 1:
            per_rank = (local, )
        elif no_rank_had_unused:
            per_rank = ((), ) * self.world_size
        else:
            per_rank = self._gather(local)
        self.last = IterationUsage(iteration, self.rank, local, per_rank)
        self.last_changed = self.statistics.update(self.last)
        return self.last

    def _gather(self, local: Sequence[int]) -> Tuple[Tuple[int, ...], ...]:
        device = (torch.device('cuda', torch.cuda.current_device())
                  if dist.get_backend(self.process_group) == 'nccl' else torch.device('cpu'))
        mask = torch.zeros(len(self.table), dtype=torch.uint8)
        if local:
            mask[list(local)] = 1
        mask = mask.to(device)
        gathered = [torch.empty_like(mask) for _ in range(self.world_size)]
        dist.all_gather(gathered, mask, group=self.process_group)
        return tuple(tuple(m.nonzero().flatten().tolist()) for m in gathered)

    def remove(self) -> None:
        """Detaches the autograd hooks (the record keeps what it has seen)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
