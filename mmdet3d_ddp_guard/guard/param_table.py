"""Names, shapes and owning modules of a model's trainable parameters.

Every report this package writes (the wrapper's decision block, the strict-mode error, the
hook's log lines and summary files) speaks of parameters through one :class:`ParamTable`
(in the words of :mod:`~mmdet3d_ddp_guard.messages.parameter_text`), so an index in a JSON
line, a name in the log and a row in the summary always mean the same parameter.
"""
from typing import Dict, List, Tuple

import torch.nn as nn

from ..messages.parameter_text import owner_of


class ParamTable:
    """The trainable parameters of ``module`` in ``named_parameters()`` order.

    The index of a parameter here is its id everywhere in this package. Only parameters with
    ``requires_grad=True`` are listed: DDP does not reduce frozen ones and autograd never
    reaches them, so they can never be "unused" in the sense that breaks DDP.

    Args:
        module (nn.Module): The model, unwrapped (not the DDP wrapper), so that names match
            the checkpoint's keys.

    Attributes:
        names, shapes, numels, module_types (list): Per id, what messages/ read of it
            (plain values: the words take no call into the guard's objects).
        sparse (frozenset[int]): The parameters whose gradients are sparse, as DDP tells
            them (``nn.Embedding`` and ``nn.EmbeddingBag`` built with ``sparse=True``).
    """

    def __init__(self, module: nn.Module):
        modules = dict(module.named_modules())
        self.names: List[str] = []
        self.params = []
        self.shapes: List[Tuple[int, ...]] = []
        self.numels: List[int] = []
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
            self.numels.append(param.numel())
            self.module_types.append(type(owner).__name__)
        self.sparse = frozenset(sparse)

    def __len__(self) -> int:
        return len(self.params)

    def describe(self, index: int) -> Dict:
        """One parameter as a JSON-ready dict (the id-to-name table of the reports)."""
        return dict(
            id=index,
            name=self.names[index],
            shape=list(self.shapes[index]),
            numel=self.numels[index],
            module_type=self.module_types[index])
