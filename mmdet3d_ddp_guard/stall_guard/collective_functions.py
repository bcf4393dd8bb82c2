"""Which ``torch.distributed`` functions issue a collective, read from the torch at hand.

Which name a caller uses depends on the torch version: torch's own ``SyncBatchNorm`` gathers
with ``_all_gather_base`` on 1.12 and 1.13, ``all_gather_into_tensor`` on 2.1 and
``all_gather_single`` on 2.13 and 2.14 (on any backend but gloo). A hand-kept table goes
stale with each release, so the list is built from ``distributed_c10d`` itself: every
function it exports (and the private ``_base`` forms callers still use) that takes a
``group`` is a collective, except those of :data:`GROUP_QUERIES`, which ask about groups
without communicating, and those of :data:`POINT_TO_POINT`, left out on purpose
(docs/limits.md says why). A new collective of a new torch is recorded without a change
here; ``tests/test_collective_functions.py`` fails on every CI leg where a function is
neither recorded nor listed.

What the ranks must agree on is compared only where they must: the element count of the
tensor every rank passes with the same size (``all_reduce``, ``broadcast``, ``reduce``, the
``_into_tensor``/``_single``/``_base`` output, the coalesced list's total), nothing for
the forms whose sizes may differ by rank (the list ``all_gather`` and ``reduce_scatter``,
which NCCL runs uneven, ``all_to_all``, ``gather``, ``scatter``, objects, barriers).
"""
import inspect
from typing import Dict, List, Optional, Tuple

import torch.distributed.distributed_c10d as c10d

#: Functions that take a ``group`` and issue no collective of their own.
GROUP_QUERIES = frozenset({
    'destroy_process_group', 'get_backend', 'get_backend_config', 'get_global_rank',
    'get_group_rank', 'get_process_group_ranks', 'get_rank', 'get_world_size', 'new_group',
    'new_subgroups', 'new_subgroups_by_enumeration', 'shrink_group', 'split_group',
})
#: Point-to-point functions, not recorded: they pair two ranks by their own order, not every
#: rank of the group by the group's, so the stall guard's rule (the n-th collective of a
#: group is the same on every rank) does not hold for them.
POINT_TO_POINT = frozenset({'send', 'recv', 'isend', 'irecv', 'send_object_list',
                            'recv_object_list', 'batch_isend_irecv'})
#: Private forms that callers use on the torch versions where they are the only ones.
PRIVATE_COLLECTIVES = ('_all_gather_base', '_reduce_scatter_base')
# The collectives whose first argument must have the same size on every rank; the other
# forms whose first argument must agree end in one of _SAME_SIZE_SUFFIXES.
_SAME_SIZE = frozenset({'all_reduce', 'broadcast', 'reduce', 'all_reduce_coalesced'})
_SAME_SIZE_SUFFIXES = ('_into_tensor', '_single', '_base', 'reduce_scatter_tensor')
_UNEVEN = frozenset({'all_to_all_single'})


def functions_with_a_group() -> Dict[str, List[str]]:
    """Every function of ``distributed_c10d`` (exported, or a private collective) that
    takes a ``group`` argument: name -> its parameters' names."""
    exported = getattr(c10d, '__all__', None)  # torch < 2.0 has none: its public names
    if exported is None:
        exported = [name for name in dir(c10d) if not name.startswith('_')]
    names = set(exported) | set(PRIVATE_COLLECTIVES)
    found = {}
    for name in names:
        function = getattr(c10d, name, None)
        if not callable(function) or isinstance(function, type):
            continue
        try:
            parameters = list(inspect.signature(function).parameters)
        except (TypeError, ValueError):
            continue
        if 'group' in parameters:
            found[name] = parameters
    return found


def collective_functions() -> Dict[str, Tuple[int, Optional[str]]]:
    """Collective name -> (position of its ``group`` argument, name of its first argument
    when every rank must pass it with the same element count, else None)."""
    table = {}
    for name, parameters in functions_with_a_group().items():
        if name in GROUP_QUERIES or name in POINT_TO_POINT:
            continue
        same_size = name in _SAME_SIZE or (name.endswith(_SAME_SIZE_SUFFIXES)
                                           and name not in _UNEVEN)
        table[name] = (parameters.index('group'), parameters[0] if same_size else None)
    return table


def agreed_count(value) -> Optional[int]:
    """The element count of a tensor, or of a list of tensors together; None otherwise."""
    if hasattr(value, 'numel'):
        return value.numel()
    if isinstance(value, (list, tuple)) and value and all(hasattr(v, 'numel') for v in value):
        return sum(v.numel() for v in value)
    return None
