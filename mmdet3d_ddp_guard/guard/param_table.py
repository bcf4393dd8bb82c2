"""Names, shapes and owning modules of a model's trainable parameters.

Every report this package writes (the wrapper's decision block, the strict-mode error, the
hook's log lines and summary files) speaks of parameters through one :class:`ParamTable`, so
an index in a JSON line, a name in the log and a row in the summary always mean the same
parameter.
"""
from collections import OrderedDict
from typing import Dict, Iterable, List, Sequence, Tuple

import torch.nn as nn


class ParamTable:
    """The trainable parameters of ``module`` in ``named_parameters()`` order.

    The index of a parameter here is its id everywhere in this package. Only parameters with
    ``requires_grad=True`` are listed: DDP does not reduce frozen ones and autograd never
    reaches them, so they can never be "unused" in the sense that breaks DDP.

    Args:
        module (nn.Module): The model, unwrapped (not the DDP wrapper), so that names match
            the checkpoint's keys.

    Attributes:
        sparse (frozenset[int]): The parameters whose gradients are sparse, as DDP tells
            them (``nn.Embedding`` and ``nn.EmbeddingBag`` built with ``sparse=True``).
    """

    def __init__(self, module: nn.Module):
        modules = dict(module.named_modules())
        self.names: List[str] = []
        self.params = []
        self.shapes: List[Tuple[int, ...]] = []
        self.module_types: List[str] = []
        sparse = []
        for name, param in module.named_parameters():
            if not param.requires_grad:
                continue
            owner = modules.get(owner_of(name), module)
            if isinstance(owner, (nn.Embedding, nn.EmbeddingBag)) and owner.sparse:
                sparse.append(len(self.params))
            self.names.append(name)
            self.params.append(param)
            self.shapes.append(tuple(param.shape))
            self.module_types.append(type(owner).__name__)
        self.sparse = frozenset(sparse)

    def __len__(self) -> int:
        return len(self.params)

    def numel(self, index: int) -> int:
        return self.params[index].numel()

    def describe(self, index: int) -> Dict:
        """One parameter as a JSON-ready dict (the id-to-name table of the reports)."""
        return dict(
            id=index,
            name=self.names[index],
            shape=list(self.shapes[index]),
            numel=self.numel(index),
            module_type=self.module_types[index])

    def grouped(self, indices: Iterable[int], limit: int = 12) -> List[str]:
        """Compact lines for a set of parameters, one per owning module.

        ``head.aux (Linear): weight, bias`` instead of one line per tensor; past ``limit``
        modules the rest is summarised in a final ``... and N more modules`` line, so a log
        never gets thousands of lines.
        """
        by_module: 'OrderedDict[str, List[int]]' = OrderedDict()
        for index in sorted(indices):
            by_module.setdefault(owner_of(self.names[index]), []).append(index)
        lines = []
        for module_name, members in list(by_module.items())[:limit]:
            leaves = ', '.join(self.names[i][len(module_name) + 1 if module_name else 0:]
                               for i in members)
            numel = sum(self.numel(i) for i in members)
            lines.append(f'{module_name or "<root>"} ({self.module_types[members[0]]}): '
                         f'{leaves} [{numel} elements]')
        if len(by_module) > limit:
            rest = list(by_module.values())[limit:]
            lines.append(f'... and {len(rest)} more modules '
                         f'({sum(len(m) for m in rest)} parameters)')
        return lines

    def table_rows(self, indices: Sequence[int]) -> List[Tuple[str, str, str]]:
        """(dotted name, shape, owning module type) rows, for error messages."""
        return [(self.names[i], str(tuple(self.shapes[i])), self.module_types[i])
                for i in sorted(indices)]


def owner_of(param_name: str) -> str:
    """``'bbox_head.aux.weight'`` -> ``'bbox_head.aux'``; a root parameter -> ``''``."""
    return param_name.rpartition('.')[0]


def format_rows(rows: Sequence[Tuple[str, ...]], header: Tuple[str, ...]) -> str:
    """A plain aligned text table (no third-party table package needed by the core)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    lines = ['  '.join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip()
             for row in (header, *rows)]
    lines.insert(1, '  '.join('-' * w for w in widths))
    return '\n'.join(lines)
