"""How messages name parameters: one line per owning module, and aligned tables of rows.

Every message speaks of parameters through a parameter table's plain lists (``names``,
``module_types``, ``shapes`` and ``numels``, :class:`~mmdet3d_ddp_guard.guard.param_table.
ParamTable`'s attributes: the words call nothing of the guard), so an index in a JSON line, a
name in the log and a row in the summary mean the same parameter.
"""
from collections import OrderedDict
from typing import Iterable, List, Sequence, Tuple


def owner_of(param_name: str) -> str:
    """``'bbox_head.aux.weight'`` -> ``'bbox_head.aux'``; a root parameter -> ``''``."""
    return param_name.rpartition('.')[0]


def grouped_lines(table, indices: Iterable[int], limit: int = 12) -> List[str]:
    """Compact lines for a set of parameters, one per owning module.

    ``head.aux (Linear): weight, bias`` instead of one line per tensor; past ``limit``
    modules the rest is summarised in a final ``... and N more modules`` line, so a log
    never gets thousands of lines.
    """
    by_module: 'OrderedDict[str, List[int]]' = OrderedDict()
    for index in sorted(indices):
        by_module.setdefault(owner_of(table.names[index]), []).append(index)
    lines = []
    for module_name, members in list(by_module.items())[:limit]:
        leaves = ', '.join(table.names[i][len(module_name) + 1 if module_name else 0:]
                           for i in members)
        numel = sum(table.numels[i] for i in members)
        lines.append(f'{module_name or "<root>"} ({table.module_types[members[0]]}): '
                     f'{leaves} [{numel} elements]')
    if len(by_module) > limit:
        rest = list(by_module.values())[limit:]
        lines.append(f'... and {len(rest)} more modules '
                     f'({sum(len(m) for m in rest)} parameters)')
    return lines


def format_rows(rows: Sequence[Tuple[str, ...]], header: Tuple[str, ...]) -> str:
    """A plain aligned text table (no third-party table package needed by the core)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = ['  '.join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in (header, *rows)]
    lines.insert(1, '  '.join('-' * w for w in widths))
    return '\n'.join(lines)


def parameter_rows(table, indices: Sequence[int]) -> str:
    """The table of an error message: dotted name, shape and owning module type."""
    return format_rows([(table.names[i], str(tuple(table.shapes[i])), table.module_types[i])
                        for i in sorted(indices)], ('parameter', 'shape', 'module type'))
