"""The errors the guarded wrappers raise instead of DDP's index lists and hangs (their texts:
:mod:`~mmdet3d_ddp_guard.messages.guard_errors`)."""
from typing import Mapping, Sequence

from ..messages.config_lines import ConfigLines
from ..messages.guard_errors import static_graph_changed_message, unused_parameters_message
from .param_table import ParamTable


class UnusedParametersError(RuntimeError):
    """Parameters went unused while the user asked DDP not to look for them."""


class StaticGraphChangedError(RuntimeError):
    """``static_graph=True`` was written but the set of used parameters changed."""


def unused_parameters_error(table: ParamTable, unused_by_rank: Mapping[int, Sequence[int]],
                            iteration: int, source: str,
                            lines: ConfigLines) -> UnusedParametersError:
    """The strict-mode stop; ``unused_by_rank`` maps each rank that is known to have left
    parameters without a gradient to their ids (all ranks under the guard, only the
    raising rank where nothing can be exchanged)."""
    offenders = {rank: ids for rank, ids in sorted(unused_by_rank.items()) if ids}
    return UnusedParametersError(
        unused_parameters_message(table, offenders, iteration, source, lines))


def static_graph_changed_error(table: ParamTable, before: Sequence[int],
                               now: Sequence[int], iteration: int, rank: int,
                               lines: ConfigLines) -> StaticGraphChangedError:
    return StaticGraphChangedError(static_graph_changed_message(
        table, sorted(set(now) - set(before)), sorted(set(before) - set(now)), iteration, rank,
        lines))
