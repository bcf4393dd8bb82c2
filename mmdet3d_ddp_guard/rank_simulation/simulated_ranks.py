"""The framework-free half of ``check --world-size N``: N ranks of DDP in one process.

Each adapter's ``rank_simulation`` builds the config's model, optimizer and per-rank data
loaders its own framework's way and says how one rank runs its batch forward and backward
(``run_rank``); :class:`SimulatedRanks` does the rest the same way for both: per rank it
records which parameters autograd did not reach (:class:`ParamUsageRecord`) and which
SyncBN-type layers ran (:class:`ForwardCollectiveCounter`), and it leaves the
rank-averaged gradient on the parameters for the adapter's one optimizer step, as DDP
(with the unused ranks counting zero, as under ``find_unused_parameters=True`` or
GuardedDDP) would.

One model instance serves every simulated rank, the ranks of an iteration one after the
other. So state that a model carries from one forward to the next is shared between the
simulated ranks, where each real rank keeps its own: a streaming model's memory
(StreamPETR's memory queue, Sparse4D's instance bank) holds what the previous simulated
rank's batch left there, not what its own rank's previous batch left. The simulation cannot
see what a rank does differently because of its own memory.
"""
import contextlib
import importlib
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

import torch.nn as nn

from ..guard.iteration_usage import IterationUsage
from ..guard.usage_record import ParamUsageRecord
from .forward_collective_counts import ForwardCollectiveCounter


@dataclass(frozen=True)
class SimulatedIteration:
    """What every simulated rank did in one iteration.

    Attributes:
        iteration (int): The runner iteration (0-based).
        unused_per_rank (tuple[tuple[int]]): Ids of :class:`ParamTable` unused, by rank
            (unreached, or reached with an undefined gradient).
        collective_calls (dict[str, list[int]]): SyncBN-type layer name -> its training
            forward calls on each rank.
        unreached_per_rank (tuple[tuple[int]]): The unused ids that autograd did not reach
            at all, by rank: these leave DDP's buckets waiting (an undefined gradient does
            not: DDP's fast path reduces it as zeros).
    """
    iteration: int
    unused_per_rank: Tuple[Tuple[int, ...], ...]
    collective_calls: Dict[str, List[int]]
    unreached_per_rank: Tuple[Tuple[int, ...], ...] = ()


class SimulationError(ValueError):
    """The config cannot be simulated (bad usage: the message names the key and the fix)."""


def import_codebase_module(name: str, named_by: str):
    """Imports ``name``, a module of the user's codebase (its plugin package, a custom
    import); where that fails, a :class:`SimulationError` that names the module and the fix
    instead of the import's traceback.

    Args:
        name (str): The module, e.g. ``'projects.mmdet3d_plugin'``.
        named_by (str): What in the config names it, for the message.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = error.name or ''
        if missing and (name == missing or name.startswith(missing + '.')):
            top = missing.split('.')[0]
            raise SimulationError(
                f'cannot import {name!r} ({named_by}): no module {missing!r} on the path. '
                f'Run check from the codebase\'s root (the folder that holds {top}/, which '
                'its tools/dist_train.sh puts on PYTHONPATH), or add that folder to '
                'PYTHONPATH.') from error
        raise SimulationError(f'importing {name!r} ({named_by}) fails: {error}. The '
                              "training's import fails the same way: install what it "
                              'needs.') from error
    except ImportError as error:
        raise SimulationError(f'importing {name!r} ({named_by}) fails: {error}. The '
                              "training's import fails the same way.") from error


class SimulatedRanks:
    """The base of the adapters' ``RankSimulation``: runs one iteration of every simulated
    rank on one model copy (whose state between forwards the ranks share: see the module's
    docstring) and records it. A subclass builds the rest and defines
    :meth:`step` (one iteration: :meth:`run_iteration`, then its optimizer step).

    Attributes:
        record (ParamUsageRecord): The usage record over every simulated iteration.
        collectives (ForwardCollectiveCounter): The SyncBN-type layers and their calls.
        iterations (list[SimulatedIteration]): The iterations simulated so far.

    Args:
        model (nn.Module): The unwrapped model (one copy serves every rank).
        world_size (int): Number of simulated ranks.
    """

    def __init__(self, model: nn.Module, world_size: int):
        self.world_size = world_size
        self.record = ParamUsageRecord(model)
        self.collectives = ForwardCollectiveCounter(model)
        self.iterations: List[SimulatedIteration] = []

    def run(self, iters: int) -> List[SimulatedIteration]:
        """Simulates ``iters`` more iterations; returns all simulated so far."""
        for _ in range(iters):
            self.iterations.append(self.step(len(self.iterations)))
        return self.iterations

    def step(self, iteration: int) -> SimulatedIteration:
        """Simulates iteration ``iteration`` (0-based) on every rank and steps the
        optimizer; the adapter's."""
        raise NotImplementedError

    def run_iteration(self, iteration: int, rank_batches: Sequence[Iterator],
                      run_rank: Callable) -> SimulatedIteration:
        """Runs ``run_rank(batch)`` for the next batch of every rank, in rank order, and
        leaves the sum of the ranks' gradients on the parameters (``run_rank`` is to
        back-propagate its loss divided by ``world_size``, as DDP averages gradients).

        Args:
            iteration (int): The runner iteration (0-based) being simulated.
            rank_batches (list[Iterator]): Each rank's endless batches
                (:func:`endless_batches`), by rank.
            run_rank (callable): ``run_rank(batch)`` runs one rank's forward and backward.

        Returns:
            SimulatedIteration: What every rank did. The caller then steps its optimizer.
        """
        unused, unreached, calls = [], [], []
        summed: Dict = {}
        for batches in rank_batches:
            self.record.start_iteration()
            self.collectives.start_rank()
            run_rank(next(batches))
            unused.append(self.record.local_unused())
            unreached.append(self.record.local_unreached())
            calls.append(self.collectives.calls())
            # Each rank starts from no gradient, as a real rank does: the record can then
            # tell a gradient a custom Function left undefined from one it produced.
            for param in self.record.table.params:
                if param.grad is not None:
                    summed[param] = param.grad + summed[param] if param in summed \
                        else param.grad
                    param.grad = None
        for param, grad in summed.items():
            param.grad = grad
        per_rank = tuple(unused)
        self.record.statistics.update(IterationUsage(iteration, 0, per_rank[0], per_rank,
                                                     sum(map(bool, unreached))))
        return SimulatedIteration(
            iteration, per_rank,
            {name: [rank_calls[name] for rank_calls in calls]
             for name in self.collectives.types},
            tuple(unreached))


@contextlib.contextmanager
def dist_info_of(module, rank: int, world_size: int):
    """Points ``module.get_dist_info`` at ``(rank, world_size)`` while the block runs.

    OpenMMLab's samplers and loader builders read their rank from ``get_dist_info`` in their
    own module (mmengine.dist, mmcv.runner); this is how one process builds each rank's.

    Args:
        module: The module whose global ``get_dist_info`` the builder calls.
        rank (int): The simulated rank.
        world_size (int): The simulated world size.
    """
    original = module.get_dist_info
    module.get_dist_info = lambda *args, **kwargs: (rank, world_size)
    try:
        yield
    finally:
        module.get_dist_info = original


def endless_batches(loader) -> Iterator:
    """Batches as the train loops hand them out: epoch after epoch, with the sampler's
    epoch set as DistSamplerSeedHook and the iteration-based loops set it.

    Args:
        loader (DataLoader): One rank's loader.
    """
    epoch = 0
    while True:
        sampler = getattr(loader.batch_sampler, 'sampler', loader.sampler)
        if hasattr(sampler, 'set_epoch'):
            sampler.set_epoch(epoch)
        yield from loader
        epoch += 1

