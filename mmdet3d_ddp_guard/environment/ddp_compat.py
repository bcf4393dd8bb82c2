"""The parts of DDP's surface that changed between torch 1.9 and today, in one place.

GuardedDDP and its comm hook use them through these functions, each gated on the torch
version that changed it (``tests/test_torch_versions.py`` checks every gate on the torch at
hand, and the version matrix runs each side of each gate):

- ``GradBucket``: ``get_tensor()`` and ``is_the_last_bucket_to_allreduce()`` in torch 1.9,
  ``buffer()`` and ``is_last()`` from 1.10 on. torch 1.8 has neither a last-bucket test nor a
  reliable bucket count, which is why it is not supported (:mod:`.versions`).
- What a comm hook's future holds: a one-tensor list in torch 1.9, the tensor from 1.10 on
  (pytorch/pytorch#62074).
- ``GradBucket.get_index()`` in torch 1.9, ``index()`` from 1.10 on.
- Whether Dynamo is tracing: ``torch.compiler.is_compiling`` from torch 2.3,
  ``torch._dynamo.is_compiling`` in 2.0 to 2.2; torch 1.x has no compiler.
- DDP's ``static_graph`` argument is new in torch 1.11; torch 1.9 and 1.10 have the private
  ``DistributedDataParallel._set_static_graph()``, to be called before the first forward.
- ``join()`` (uneven inputs): from torch 1.10 (``torch.distributed.algorithms.join``) a rank
  that joined all-reduces its zero gradients through DDP's comm hook; torch 1.9's without it.
"""
import functools
from typing import Dict, List, Union

import torch

from .version_numbers import major_minor

#: torch 1.10 renamed GradBucket's accessors and lets a comm hook's future hold a tensor.
GRAD_BUCKET_API_SINCE = (1, 10)
#: torch 1.11 added ``DistributedDataParallel(static_graph=...)``.
STATIC_GRAPH_ARGUMENT_SINCE = (1, 11)
#: torch 1.10's generic Join runs a joined rank's all-reduce through DDP's comm hook.
JOIN_THROUGH_COMM_HOOK_SINCE = (1, 10)

_TORCH = major_minor(torch.__version__)
NEW_GRAD_BUCKET_API = _TORCH >= GRAD_BUCKET_API_SINCE
STATIC_GRAPH_ARGUMENT = _TORCH >= STATIC_GRAPH_ARGUMENT_SINCE
JOIN_THROUGH_COMM_HOOK = _TORCH >= JOIN_THROUGH_COMM_HOOK_SINCE


def bucket_buffer(bucket) -> torch.Tensor:
    """The flat gradient tensor of a ``GradBucket``."""
    return bucket.buffer() if NEW_GRAD_BUCKET_API else bucket.get_tensor()


def is_last_bucket(bucket) -> bool:
    """Whether DDP reduces this bucket last in the iteration (launched only once every
    parameter of this rank is ready)."""
    return bucket.is_last() if NEW_GRAD_BUCKET_API else bucket.is_the_last_bucket_to_allreduce()


def bucket_index(bucket) -> int:
    """The bucket's index in DDP's order of all-reduces."""
    return bucket.index() if NEW_GRAD_BUCKET_API else bucket.get_index()


def _compiling_test():
    compiler = getattr(torch, 'compiler', None)
    if compiler is not None and hasattr(compiler, 'is_compiling'):
        return compiler.is_compiling
    dynamo_test = getattr(getattr(torch, '_dynamo', None), 'is_compiling', None)
    return dynamo_test or (lambda: False)


#: ``is_compiling()``: whether Dynamo is tracing the caller (False on torch 1.x).
is_compiling = _compiling_test()


def hook_result(tensor: torch.Tensor) -> Union[torch.Tensor, List[torch.Tensor]]:
    """What a comm hook's future must hold for the reduced bucket ``tensor``."""
    return tensor if NEW_GRAD_BUCKET_API else [tensor]


def static_graph_arguments(static_graph: bool) -> Dict[str, bool]:
    """DDP's keyword for ``static_graph``: none where DDP has no such argument (then
    :func:`set_static_graph` does it after construction)."""
    return dict(static_graph=static_graph) if STATIC_GRAPH_ARGUMENT else {}


def set_static_graph(ddp: torch.nn.parallel.DistributedDataParallel,
                     static_graph: bool) -> None:
    """On torch 1.9 and 1.10, turns on DDP's static graph through its private
    ``_set_static_graph()`` (before any forward, as it requires); nothing on newer torch,
    which took ``static_graph`` as an argument. Every torch the import accepts below 1.11
    has it (``tests/test_torch_versions.py`` checks that on the torch at hand)."""
    if static_graph and not STATIC_GRAPH_ARGUMENT:
        ddp._set_static_graph()


@functools.lru_cache(maxsize=None)
def untraced(function):
    """``function`` as ``torch.compile`` must see it: called without tracing it or anything
    it calls, in exactly one more Python frame (the stall guard reads a collective's issuer
    at a fixed depth). Where a compiled frame calls the guard's own work (the comm hook
    from a compiled ``train_step``'s backward, the record, the Runner's hook at the first
    step), tracing it would guard on what it reads and changes, which differs at each call:
    a recompile per call. One wrapper per function (cached), so that callers may ask for it
    where it is needed, at each build or activation, and compiled frames that guard on it
    see the same object. Loads Dynamo: never called at import."""
    disable = getattr(getattr(torch, 'compiler', None), 'disable', None)  # torch >= 2.1
    if disable is None and hasattr(torch, 'compile'):
        from torch import _dynamo  # torch 2.0
        disable = _dynamo.disable
    if disable is not None:
        return disable(function)
    return through_one_frame(function)  # torch 1.x: no compiler


def through_one_frame(function):
    """``function`` called through exactly one more Python frame, as :func:`untraced` calls
    it, without loading the compiler: what stands in before the compiler is needed. Its
    signature stays the function's (DDP reads a comm hook's)."""
    @functools.wraps(function)
    def passed_through(*args, **kwargs):
        return function(*args, **kwargs)
    return passed_through
