"""The evidence a revised decision shows: what the usage record saw, in lines of text.

The decision policy (:mod:`mmdet3d_ddp_guard.guard.decision_policy`) attaches these lines to
each revision it logs; the record's objects are read by their attributes, so that the words
stay apart from the mechanism.
"""
from typing import List

from .parameter_text import grouped_lines


def evidence_lines(usage, statistics, ever_unused: List[int], table,
                   limit: int = 12) -> List[str]:
    """The evidence of a revised decision, a line each: how often parameters went unused
    and how their sets changed (``statistics``, the record's ``UsageStatistics``, read by its
    attributes), who left what unused in ``usage``'s iteration (an ``IterationUsage``), and
    the parameters ever unused (``ever_unused``, their ids), by name, shape and module
    (``table``, the record's ``ParamTable``, read by its attributes), at most ``limit`` of
    each."""
    seen = statistics.iterations_seen
    lines = [f'evidence: {statistics.iterations_with_unused} of {seen} iterations had '
             f'unused parameters; {len(ever_unused)} of {len(table.names)} parameters '
             f'were ever unused; unused sets changed {statistics.set_changes} times; ranks '
             f'differed in {statistics.iterations_ranks_differ} iterations.']
    for rank, ids in enumerate(usage.per_rank_unused):
        lines.append(f'rank {rank}, iteration {usage.iteration}: {len(ids)} unused')
        lines += [f'  {line}' for line in grouped_lines(table, ids, limit)]
    ever = ever_unused
    if ever:
        lines.append('unused so far (iterations unused / seen, ranks):')
        for index in ever[:limit]:
            ranks = ','.join(map(str, sorted(statistics.ranks_unused[index])))
            lines.append(f'  {table.names[index]} {list(table.shapes[index])} '
                         f'({table.module_types[index]}): '
                         f'{statistics.unused_iterations[index]}/{seen}, ranks {ranks}')
        if len(ever) > limit:
            lines.append(f'  ... and {len(ever) - limit} more')
    return lines
