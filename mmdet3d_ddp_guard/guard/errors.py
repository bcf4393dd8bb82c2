"""The errors the guarded wrappers raise instead of DDP's index lists and hangs, each with
the fix in the words of the user's framework (:mod:`.config_lines`)."""
from typing import Mapping, Sequence

from ..messages.config_lines import ConfigLines
from .param_table import ParamTable, format_rows


class UnusedParametersError(RuntimeError):
    """Parameters went unused while the user asked DDP not to look for them."""


class StaticGraphChangedError(RuntimeError):
    """``static_graph=True`` was written but the set of used parameters changed."""


def _parameter_table(table: ParamTable, indices: Sequence[int]) -> str:
    return format_rows(table.table_rows(indices), ('parameter', 'shape', 'module type'))


def unused_parameters_error(table: ParamTable, unused_by_rank: Mapping[int, Sequence[int]],
                            iteration: int, source: str,
                            lines: ConfigLines) -> UnusedParametersError:
    """The strict-mode stop; ``unused_by_rank`` maps each rank that is known to have left
    parameters without a gradient to their ids (all ranks under the guard, only the
    raising rank where nothing can be exchanged)."""
    offenders = {rank: ids for rank, ids in sorted(unused_by_rank.items()) if ids}
    parts = [f'{lines.wrapper}: parameters received no gradient in iteration {iteration} on '
             f'rank(s) {", ".join(map(str, offenders))}, but find_unused_parameters=False '
             f'was requested ({source}). Plain DDP would fail at the next forward ("Expected '
             'to have finished reduction in the prior iteration") or hang the other ranks; '
             'every rank stops here instead.']
    for rank, ids in offenders.items():
        parts += [f'rank {rank}: {len(ids)} parameters', _parameter_table(table, ids)]
    parts.append(f'Fix: let the guard handle them, in your config:\n    {lines.mode("auto")}\n'
                 f'{lines.mode_over_false}. Or make the model use these parameters in the '
                 'loss of every iteration.')
    return UnusedParametersError('\n'.join(parts))


def static_graph_changed_error(table: ParamTable, before: Sequence[int],
                               now: Sequence[int], iteration: int, rank: int,
                               lines: ConfigLines) -> StaticGraphChangedError:
    appeared = sorted(set(now) - set(before))
    returned = sorted(set(before) - set(now))
    parts = [f'{lines.wrapper}: static_graph=True, but in iteration {iteration} on rank {rank} '
             'the set of unused parameters differs from the first iteration\'s; DDP\'s '
             'static graph cannot follow that and would fail or hang.']
    if appeared:
        parts += ['Newly unused:', _parameter_table(table, appeared)]
    if returned:
        parts += ['Used again (unused in the first iteration):',
                  _parameter_table(table, returned)]
    parts.append(f'Fix: {lines.static_graph_fix}.')
    return StaticGraphChangedError('\n'.join(parts))
