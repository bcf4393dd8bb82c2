"""The config line that fits a model, from how its parameters went unused over a run: the
verdict of the summaries (``UnusedParamsHook``'s file, ``summarize``, ``check``)."""
from typing import Tuple

from ..guard.iteration_usage import UsageStatistics


def recommended_setting(statistics: UsageStatistics, guarded: str) -> Tuple[str, str]:
    """The config line that fits a model with this usage, and why (for summaries and the
    check command); ``guarded`` is the line that puts the guard on this framework's run
    (``ConfigLines.guard``: MMEngine's Runner builds the wrapper the config names; under mmcv
    1.x the import alone guards its DDP)."""
    if not statistics.iterations_with_unused:
        return guarded, ('no parameter went unused: plain DDP (find_unused_parameters=False) '
                         'would train this too; the guard costs next to nothing here and '
                         'keeps the run alive if a rare batch skips a branch later.')
    if statistics.first_unreached_iteration is None:
        return guarded, ('only undefined gradients: plain DDP would train, but would reduce '
                         'them as zeros into the optimizer; the guard leaves them None where '
                         'no rank defined them, as find_unused_parameters=True does.')
    # DDP's static graph keeps each rank's first unused set: ranks may differ, but not
    # change (a real 4-rank run of tests/test_check_world_size.py trains so).
    if statistics.iterations_with_unused == statistics.iterations_seen \
            and not statistics.set_changes:
        return guarded, ('the same parameters went unused in every iteration on each rank: '
                         'DDP static_graph=True would also work, until the set changes; '
                         'plain DDP fails.')
    return guarded, ('the unused set changes between iterations or ranks: plain DDP fails '
                     'and static_graph=True fails; the guard (or the slower '
                     'find_unused_parameters=True) trains it.')
